package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/errs"
)

func TestParseExpression(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cron, want string
	}{
		{"*/15 * * * *", "cron(0/15 * * * ? *)"},
		{"0 9 * * 1-5", "cron(0 9 ? * MON-FRI *)"},
		{"0 0 1 * *", "cron(0 0 1 * ? *)"},
		{"* * * * *", "cron(* * * * ? *)"},
		{"  0   9 * *  1-5 ", "cron(0 9 ? * MON-FRI *)"},
		{"30 8 * jan,JUL mon", "cron(30 8 ? 1,7 MON *)"},
		{"0 12 * * sun", "cron(0 12 ? * SUN *)"},
		{"0 12 * * 7", "cron(0 12 ? * SUN *)"},
		{"0 12 * * 0,7", "cron(0 12 ? * SUN *)"},
		{"0 12 * * 6", "cron(0 12 ? * SAT *)"},
		{"0 12 * * 5-7", "cron(0 12 ? * SUN,FRI,SAT *)"},
		{"0 12 * * Mon-Wed,fri", "cron(0 12 ? * MON-WED,FRI *)"},
		{"0 0 * * */2", "cron(0 0 ? * SUN,TUE,THU,SAT *)"},
		{"0 0 * * 0-6", "cron(0 0 ? * * *)"},
		{"0 0 ? * MON", "cron(0 0 ? * MON *)"},
		{"0 * ? * *", "cron(0 * * * ? *)"},
		{"0 */6 * * *", "cron(0 0/6 * * ? *)"},
		{"5/20 * * * *", "cron(5/20 * * * ? *)"},
		{"0 0 */2 * *", "cron(0 0 1/2 * ? *)"},
		{"0 0 1 */3 *", "cron(0 0 1 1/3 ? *)"},
		{"0 0 1 jan-mar *", "cron(0 0 1 1-3 ? *)"},
		{"5,10,20 1-3 * * *", "cron(5,10,20 1-3 * * ? *)"},
		{"0,30 * * * *", "cron(0,30 * * * ? *)"},
		// A stepped range that stops short is not "start/step", which would
		// run to the end of the hour.
		{"10-40/10 * * * *", "cron(10,20,30,40 * * * ? *)"},
		{"0-59 0-23 1-31 1-12 *", "cron(* * * * ? *)"},
		{"0 0 15,L * *", ""}, // L is Scheduler's, not cron's
	} {
		t.Run(tt.cron, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tt.cron, "")
			if tt.want == "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want an error", tt.cron, s)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.cron, err)
			}
			if got := s.Expression(); got != tt.want {
				t.Errorf("Expression() = %q, want %q", got, tt.want)
			}
			if s.Timezone != "UTC" {
				t.Errorf("Timezone = %q, want UTC by default", s.Timezone)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cron, tz, param, mention string
	}{
		{"", "", ParamSchedule, "5 fields"},
		{"* * * *", "", ParamSchedule, "5 fields"},
		{"0 * * * * *", "", ParamSchedule, "5 fields"},
		{"@daily", "", ParamSchedule, "5 fields"},
		{"60 * * * *", "", ParamSchedule, "minute"},
		{"-1 * * * *", "", ParamSchedule, "minute"},
		{"+5 * * * *", "", ParamSchedule, "minute"},
		{"1,,2 * * * *", "", ParamSchedule, "minute"},
		{"a * * * *", "", ParamSchedule, "minute"},
		{"5-1 * * * *", "", ParamSchedule, "backwards"},
		{"*/0 * * * *", "", ParamSchedule, "step"},
		{"* 24 * * *", "", ParamSchedule, "hour"},
		{"* * 0 * *", "", ParamSchedule, "day-of-month"},
		{"* * 32 * *", "", ParamSchedule, "day-of-month"},
		{"* * * 13 *", "", ParamSchedule, "month"},
		{"* * * foo *", "", ParamSchedule, "month"},
		{"* * * * 8", "", ParamSchedule, "day-of-week"},
		{"0 0 * * 1#2", "", ParamSchedule, "day-of-week"},
		{"0 0 1 * 1", "", ParamSchedule, "both day-of-month and day-of-week"},
		{"0 0 1-7 * mon", "", ParamSchedule, "both day-of-month and day-of-week"},
		{"0 0 */2 * */2", "", ParamSchedule, "both day-of-month and day-of-week"},
		{"0 0 30 2 *", "", ParamSchedule, "never fires"},
		{"0 0 * * *", "Mars/Olympus_Mons", ParamTimezone, "schedule_timezone"},
		{"0 0 * * *", "Local", ParamTimezone, "schedule_timezone"},
		{"0 0 * * *", "../etc/passwd", ParamTimezone, "schedule_timezone"},
	} {
		t.Run(tt.cron+"/"+tt.tz, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.cron, tt.tz)
			var e *errs.Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q, %q) error = %v, want *errs.Error", tt.cron, tt.tz, err)
			}
			if e.Kind != errs.Invalid || e.Param != tt.param {
				t.Errorf("got kind %v param %q, want Invalid naming %q", e.Kind, e.Param, tt.param)
			}
			if !strings.Contains(e.Message, tt.mention) {
				t.Errorf("message %q does not mention %q", e.Message, tt.mention)
			}
		})
	}
}

func TestSpecNext(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tt := range []struct {
		name, cron, tz string
		after, want    string
	}{
		{"quarter hours", "*/15 * * * *", "", "2026-01-02T12:07:30Z", "2026-01-02T12:15:00Z"},
		{"strictly after", "*/15 * * * *", "", "2026-01-02T12:15:00Z", "2026-01-02T12:30:00Z"},
		{"weekdays skip the weekend", "0 9 * * 1-5", "", "2026-01-02T10:00:00Z", "2026-01-05T09:00:00Z"},
		{"sunday as 7", "0 9 * * 7", "", "2026-01-02T10:00:00Z", "2026-01-04T09:00:00Z"},
		{"first of the month", "0 0 1 * *", "", "2026-01-02T00:00:00Z", "2026-02-01T00:00:00Z"},
		{"leap day", "0 0 29 2 *", "", "2026-01-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"paris winter", "0 9 * * *", "Europe/Paris", "2026-03-27T08:00:00Z", "2026-03-28T08:00:00Z"},
		{"paris across spring DST", "0 9 * * *", "Europe/Paris", "2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z"},
		// 02:30 does not exist in Paris on 29 March 2026: skipped that day.
		{"paris skipped hour", "30 2 * * *", "Europe/Paris", "2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"},
		{"paris before repeated hour", "30 2 * * *", "Europe/Paris", "2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z"},
		// 02:30 happens twice on 25 October 2026: it fires once.
		{"paris repeated hour once", "30 2 * * *", "Europe/Paris", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		{"paris half hours across autumn DST", "*/30 * * * *", "Europe/Paris", "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z"},
		{"new york", "0 9 * * *", "America/New_York", "2026-07-01T00:00:00Z", "2026-07-01T13:00:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tt.cron, tt.tz)
			if err != nil {
				t.Fatal(err)
			}
			got := s.Next(utc(tt.after))
			if want := utc(tt.want); !got.Equal(want) {
				t.Errorf("Next(%s) = %s, want %s", tt.after, got.UTC().Format(time.RFC3339), tt.want)
			}
			if got.Location().String() != s.Timezone {
				t.Errorf("Next in %s, want the spec's timezone %s", got.Location(), s.Timezone)
			}
		})
	}
}

func TestInvalidSpecIsInert(t *testing.T) {
	t.Parallel()
	s := Spec{Cron: "0 0 1 * 1", Timezone: "UTC"}
	if got := s.Expression(); got != "" {
		t.Errorf("Expression() = %q, want \"\" for a spec Parse refuses", got)
	}
	if got := s.Next(time.Now()); !got.IsZero() {
		t.Errorf("Next() = %s, want zero", got)
	}
}
