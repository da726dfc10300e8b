package schedule

import (
	"fmt"
	"strings"
	"time"
)

// Kind is the form of a Scheduler schedule expression.
type Kind string

const (
	KindCron Kind = "cron"
	KindRate Kind = "rate"
	KindAt   Kind = "at"
)

// atLayout is the timestamp inside at(...), in the schedule's timezone.
const atLayout = "2006-01-02T15:04:05"

// Expr is a Scheduler schedule expression read back from the API, so the
// local firer (internal/local/firer) can tell when a schedule fires.
type Expr struct {
	Kind     Kind
	Location *time.Location
	// Every is a rate's period.
	Every time.Duration
	// Start anchors a rate: it fires at Start, Start+Every, … AWS anchors a
	// rate at the schedule's StartDate or, without one, its creation; the
	// caller sets it. Zero means "from whenever Next is asked".
	Start time.Time
	// At is an at() schedule's one firing.
	At time.Time

	cron cronSchedule
}

// ParseExpression parses Scheduler's cron(min hour dom month dow year),
// rate(N minutes|hours|days) and at(yyyy-mm-ddThh:mm:ss) forms, evaluated in
// the IANA timezone tz ("" is UTC, Scheduler's default). Cron takes what
// Expression writes and more (*, ?, lists, ranges, steps, names, years) but
// not Scheduler's L, W and # day rules, which nothing here creates.
func ParseExpression(expr, tz string) (Expr, error) {
	if tz == "" {
		tz = "UTC"
	}
	loc, err := loadLocation(tz)
	if err != nil {
		return Expr{}, fmt.Errorf("schedule timezone %q: %w", tz, err)
	}
	kind, body, ok := strings.Cut(strings.TrimSpace(expr), "(")
	if !ok || !strings.HasSuffix(body, ")") {
		return Expr{}, fmt.Errorf("schedule expression %q: want cron(...), rate(...) or at(...)", expr)
	}
	body = strings.TrimSpace(strings.TrimSuffix(body, ")"))
	e := Expr{Kind: Kind(kind), Location: loc}
	switch e.Kind {
	case KindCron:
		e.cron, err = parseSchedulerCron(body, loc)
	case KindRate:
		e.Every, err = parseRate(body)
	case KindAt:
		e.At, err = time.ParseInLocation(atLayout, body, loc)
	default:
		err = fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		return Expr{}, fmt.Errorf("schedule expression %q: %w", expr, err)
	}
	return e, nil
}

// Next returns the first firing strictly after t, or the zero time when
// there is none (an at() already past, a cron that never matches again).
func (e Expr) Next(t time.Time) time.Time {
	switch e.Kind {
	case KindCron:
		return e.cron.next(t)
	case KindRate:
		switch {
		case e.Start.IsZero():
			return t.Add(e.Every)
		case e.Start.After(t):
			return e.Start
		}
		return e.Start.Add((t.Sub(e.Start)/e.Every + 1) * e.Every)
	case KindAt:
		if e.At.After(t) {
			return e.At
		}
	}
	return time.Time{}
}

func parseRate(body string) (time.Duration, error) {
	value, unit, ok := strings.Cut(body, " ")
	n, err := number(value)
	if !ok || err != nil || n < 1 {
		return 0, fmt.Errorf("want rate(value unit) with a positive value")
	}
	switch strings.TrimSpace(unit) {
	case "minute", "minutes":
		return time.Duration(n) * time.Minute, nil
	case "hour", "hours":
		return time.Duration(n) * time.Hour, nil
	case "day", "days":
		// Scheduler's day is 24 hours, not a calendar day, across DST too.
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return 0, fmt.Errorf("unit %q is not minutes, hours or days", unit)
}

// yearField: Scheduler's sixth field.
var yearField = field{name: "year", index: 5, min: minYear, max: maxYear}

func parseSchedulerCron(body string, loc *time.Location) (cronSchedule, error) {
	f := strings.Fields(body)
	if len(f) != 6 {
		return cronSchedule{}, fmt.Errorf("want 6 fields (minute hour day-of-month month day-of-week year), have %d", len(f))
	}
	// Exactly one day field is "?": the other one alone picks the days.
	if (f[2] == "?") == (f[4] == "?") {
		return cronSchedule{}, fmt.Errorf(`exactly one of day-of-month and day-of-week must be "?"`)
	}
	var sets [5]uint64
	var stars [5]bool
	for i, fl := range []field{minuteField, hourField, domField, monthField, schedulerDowField} {
		var err error
		if sets[i], stars[i], err = fl.parse(f[i]); err != nil {
			return cronSchedule{}, fmt.Errorf("%s: %w", fl.name, err)
		}
	}
	dow := sets[4] >> 1 // Scheduler's SUN=1 → bit 0
	years, err := yearField.parseYears(f[5])
	if err != nil {
		return cronSchedule{}, fmt.Errorf("year: %w", err)
	}
	return newCronSchedule(sets[0], sets[1], sets[2], sets[3], dow, stars[2], stars[4], loc, years)
}

// parseYears is parse for a field too wide for a uint64 set; nil means any
// year.
func (f field) parseYears(text string) ([]bool, error) {
	if text == "*" {
		return nil, nil
	}
	years := make([]bool, f.max-f.min+1)
	_, err := f.each(text, func(y int) { years[y-f.min] = true })
	return years, err
}
