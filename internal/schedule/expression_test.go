package schedule

import (
	"testing"
	"time"
)

// What Expression writes, ParseExpression must read back with the same
// firing times: the local Firer computes them from the expression it finds
// in the emulator.
func TestParseExpressionRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ cron, tz string }{
		{"*/15 * * * *", ""},
		{"0 9 * * 1-5", "Europe/Paris"},
		{"30 2 * * *", "Europe/Paris"},
		{"*/30 * * * *", "Europe/Paris"},
		{"0 0 1 * *", "America/New_York"},
		{"0 12 * * 5-7", ""},
		{"0 0 * * */2", "Asia/Tokyo"},
		{"10-40/10 */5 */3 jan,jun *", ""},
		{"0 0 29 2 *", ""},
	} {
		t.Run(tt.cron+"/"+tt.tz, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tt.cron, tt.tz)
			if err != nil {
				t.Fatal(err)
			}
			e, err := ParseExpression(s.Expression(), s.Timezone)
			if err != nil {
				t.Fatalf("ParseExpression(%q): %v", s.Expression(), err)
			}
			// Start in March so the walk crosses both DST changes.
			from := time.Date(2026, time.March, 20, 0, 0, 0, 0, time.UTC)
			want, got := from, from
			for i := 0; i < 500; i++ {
				want, got = s.Next(want), e.Next(got)
				if !got.Equal(want) {
					t.Fatalf("firing %d: ParseExpression(%q).Next = %s, Spec.Next = %s", i, s.Expression(), got, want)
				}
			}
		})
	}
}

func TestParseExpressionForms(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tt := range []struct {
		name, expr, tz string
		start          string // rate anchor
		after, want    string // want "" means no further firing
	}{
		{"scheduler day numbers", "cron(0 9 ? * 2-6 *)", "", "", "2026-01-02T10:00:00Z", "2026-01-05T09:00:00Z"},
		{"day of month", "cron(0 0 15 * ? *)", "", "", "2026-01-16T00:00:00Z", "2026-02-15T00:00:00Z"},
		{"year", "cron(0 0 1 1 ? 2030)", "", "", "2026-05-01T00:00:00Z", "2030-01-01T00:00:00Z"},
		{"year list", "cron(0 0 1 1 ? 2027,2035-2040)", "", "", "2028-01-01T00:00:00Z", "2035-01-01T00:00:00Z"},
		{"past year", "cron(0 0 1 1 ? 2020)", "", "", "2026-05-01T00:00:00Z", ""},
		{"rate minutes", "rate(5 minutes)", "", "2026-01-01T00:00:30Z", "2026-01-01T00:07:00Z", "2026-01-01T00:10:30Z"},
		{"rate before its start", "rate(1 hour)", "", "2026-01-01T10:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T10:00:00Z"},
		{"rate on a firing", "rate(2 hours)", "", "2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T04:00:00Z"},
		{"rate days are 24h across DST", "rate(1 day)", "Europe/Paris", "2026-03-28T08:00:00Z", "2026-03-28T08:00:00Z", "2026-03-29T08:00:00Z"},
		{"at", "at(2026-05-01T10:00:00)", "", "", "2026-04-01T00:00:00Z", "2026-05-01T10:00:00Z"},
		{"at in its timezone", "at(2026-05-01T10:00:00)", "Europe/Paris", "", "2026-04-01T00:00:00Z", "2026-05-01T08:00:00Z"},
		{"at past", "at(2026-05-01T10:00:00)", "", "", "2026-05-01T10:00:00Z", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := ParseExpression(tt.expr, tt.tz)
			if err != nil {
				t.Fatalf("ParseExpression(%q): %v", tt.expr, err)
			}
			if tt.start != "" {
				e.Start = at(tt.start)
			}
			got := e.Next(at(tt.after))
			switch {
			case tt.want == "" && !got.IsZero():
				t.Errorf("Next(%s) = %s, want none", tt.after, got)
			case tt.want != "" && !got.Equal(at(tt.want)):
				t.Errorf("Next(%s) = %s, want %s", tt.after, got.UTC().Format(time.RFC3339), tt.want)
			}
		})
	}
}

func TestParseExpressionRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ expr, tz string }{
		{"", ""},
		{"0 9 * * 1-5", ""},
		{"every(5 minutes)", ""},
		{"cron(0 0 * * * *)", ""}, // neither day field is ?
		{"cron(0 0 ? * ? *)", ""},
		{"cron(0 0 * * ?)", ""},
		{"cron(0 0 L * ? *)", ""},
		{"cron(0 0 ? * 2#1 *)", ""},
		{"cron(0 0 ? * 0 *)", ""}, // Scheduler's week is 1-7
		{"cron(0 0 * * ? 1969)", ""},
		{"rate(0 minutes)", ""},
		{"rate(5 weeks)", ""},
		{"rate(minutes)", ""},
		{"at(2026-13-01T00:00:00)", ""},
		{"at(2026-05-01 10:00)", ""},
		{"rate(5 minutes)", "Nowhere/Land"},
	} {
		if e, err := ParseExpression(tt.expr, tt.tz); err == nil {
			t.Errorf("ParseExpression(%q, %q) = %+v, want an error", tt.expr, tt.tz, e)
		}
	}
}
