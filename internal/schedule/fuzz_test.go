package schedule

import (
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/errs"
)

// FuzzParse: a client's schedule and timezone either parse, or get a 400
// naming the field; what parses translates to a Scheduler expression that
// parses back to the same firings.
func FuzzParse(f *testing.F) {
	for _, s := range [][2]string{
		{"*/15 * * * *", ""}, {"0 9 * * MON-FRI", "Europe/Paris"}, {"0 0 31 2 *", "UTC"},
		{"5,10-20/3 1-23/2 1 JAN,jul 0,7", "America/New_York"}, {"* * * * *", "../../etc/passwd"},
		{"0 0 1 1 *", "Local"}, {"60 * * * *", ""}, {"0 0 * * 8", ""}, {"0-59/0 * * * *", ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, expr, tz string) {
		spec, err := Parse(expr, tz)
		if err != nil {
			if !errs.Is(err, errs.Invalid) {
				t.Fatalf("Parse(%q, %q): %v is not a 400", expr, tz, err)
			}
			return
		}
		e := spec.Expression()
		parsed, err := ParseExpression(e, spec.Timezone)
		if err != nil {
			t.Fatalf("Parse(%q, %q) gave %q, which does not parse back: %v", expr, tz, e, err)
		}
		at := time.Date(2031, 3, 30, 0, 30, 0, 0, time.UTC)
		for range 3 {
			want, got := spec.Next(at), parsed.Next(at)
			if !got.Equal(want) {
				t.Fatalf("%q (%s) fires at %v after %v, its expression %q at %v", expr, spec.Timezone, want, at, e, got)
			}
			if want.IsZero() {
				break
			}
			at = want
		}
	})
}
