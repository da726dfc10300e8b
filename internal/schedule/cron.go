// Package schedule owns recurring batches' timing on EventBridge Scheduler:
// it validates a template's 5-field cron and timezone, translates them to
// Scheduler's 6-field cron, creates and deletes the schedules, and parses
// the expressions it reads back (ParseExpression)
// for the local firer (internal/local/firer), which fires the schedules the
// emulator stores but never fires.
package schedule

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	// Lambda's provided.al2023 image carries no zoneinfo; embedding it keeps
	// timezone validation identical everywhere.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/relaybatch/relay/internal/errs"
)

// Request fields named in validation errors.
const (
	ParamSchedule = "schedule"
	ParamTimezone = "schedule_timezone"
)

// maxExpressionLen is Scheduler's limit on ScheduleExpression.
const maxExpressionLen = 256

// Spec is a validated recurring schedule: a standard 5-field cron
// (minute hour day-of-month month day-of-week) evaluated in Timezone. It is
// two plain strings so it can be stored with the template and rebuilt; the
// methods re-parse, which costs microseconds.
type Spec struct {
	Cron     string
	Timezone string
}

// Parse validates a 5-field cron expression and an IANA timezone (empty
// means "UTC"). Fields take *, numbers, lists, ranges, steps, and month and
// day names (JAN-DEC, SUN-SAT, any case); day-of-week 0 and 7 are both
// Sunday. Errors are *errs.Error Invalid naming ParamSchedule or
// ParamTimezone.
//
// Standard cron fires when day-of-month OR day-of-week matches if both are
// restricted; Scheduler requires one of them to be "?" and so cannot express
// the OR. Such a schedule is refused rather than silently given AND
// semantics.
func Parse(expr, tz string) (Spec, error) {
	s := Spec{Cron: strings.Join(strings.Fields(expr), " "), Timezone: tz}
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	c, err := s.compile()
	if err != nil {
		return Spec{}, err
	}
	if e := c.expression(); len(e) > maxExpressionLen {
		return Spec{}, errs.Invalidf(ParamSchedule, "schedule %q translates to a Scheduler expression longer than %d characters; simplify its lists", s.Cron, maxExpressionLen)
	}
	// Feb 30 and the like parse but never fire; say so now rather than keep
	// a template that never runs.
	if c.next(time.Now()).IsZero() {
		return Spec{}, errs.Invalidf(ParamSchedule, "schedule %q never fires", s.Cron)
	}
	return s, nil
}

// Expression is the Scheduler form, "cron(min hour dom month dow year)":
// one of day-of-month and day-of-week is "?", day-of-week uses the names
// SUN-SAT (so cron's 0-7 and Scheduler's 1-7 numbering cannot be confused),
// steps that run to the end of a field become "start/step", other sets
// become lists and ranges, and the year is "*". It is "" for a Spec that
// Parse would refuse.
func (s Spec) Expression() string {
	c, err := s.compile()
	if err != nil {
		return ""
	}
	return c.expression()
}

// Next returns the first firing strictly after t, in the spec's timezone,
// or the zero time for a Spec that Parse would refuse. It follows
// Scheduler's daylight-saving rules: a time that falls in the hour skipped
// in spring does not fire that day, and the hour repeated in autumn fires
// once.
func (s Spec) Next(t time.Time) time.Time {
	c, err := s.compile()
	if err != nil {
		return time.Time{}
	}
	return c.next(t)
}

// compiled is a Spec broken into field sets, one bit per allowed value.
type compiled struct {
	minute, hour, dom, month, dow uint64 // dow: bit 0 is Sunday
	// domStar and dowStar: the field was * (or ?), so it does not restrict
	// the day and the other day field alone decides.
	domStar, dowStar bool
	loc              *time.Location
	sched            cronSchedule
}

func (s Spec) compile() (compiled, error) {
	loc, err := loadLocation(s.Timezone)
	if err != nil {
		return compiled{}, errs.Invalidf(ParamTimezone, "schedule_timezone %q is not an IANA time zone name", s.Timezone)
	}
	f := strings.Fields(s.Cron)
	if len(f) != 5 {
		return compiled{}, errs.Invalidf(ParamSchedule, "schedule %q must have 5 fields (minute hour day-of-month month day-of-week), has %d", s.Cron, len(f))
	}
	c := compiled{loc: loc}
	for _, p := range []struct {
		set   *uint64
		star  *bool
		field field
	}{
		{&c.minute, nil, minuteField},
		{&c.hour, nil, hourField},
		{&c.dom, &c.domStar, domField},
		{&c.month, nil, monthField},
		{&c.dow, &c.dowStar, cronDowField},
	} {
		var star bool
		var err error
		*p.set, star, err = p.field.parse(f[p.field.index])
		if err != nil {
			return compiled{}, errs.Invalidf(ParamSchedule, "schedule %q: %s: %v", s.Cron, p.field.name, err)
		}
		if p.star != nil {
			*p.star = star
		}
	}
	// 7 is Sunday too.
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1
	}
	if !c.domStar && !c.dowStar {
		return compiled{}, errs.Invalidf(ParamSchedule,
			"schedule %q restricts both day-of-month and day-of-week, which cron treats as either-or; EventBridge Scheduler cannot express that, so use * in one of them (or two templates)", s.Cron)
	}
	c.sched, err = newCronSchedule(c.minute, c.hour, c.dom, c.month, c.dow, c.domStar, c.dowStar, loc, nil)
	if err != nil {
		return compiled{}, errs.Invalidf(ParamSchedule, "schedule %q: %v", s.Cron, err)
	}
	return c, nil
}

func (c compiled) next(t time.Time) time.Time {
	n := c.sched.next(t)
	if n.IsZero() {
		return n
	}
	return n.In(c.loc)
}

func (c compiled) expression() string {
	dom, dow := compress(c.dom, domField, nil), "?"
	if c.domStar {
		// Only day-of-week restricts (or neither does).
		dom = "?"
		dow = compress(c.dow<<1, schedulerDowField, dayNames) // cron's Sunday 0 → Scheduler's 1
		if c.dowStar {
			dom, dow = "*", "?"
		}
	}
	return fmt.Sprintf("cron(%s %s %s %s %s *)",
		compress(c.minute, minuteField, nil),
		compress(c.hour, hourField, nil),
		dom,
		compress(c.month, monthField, nil),
		dow)
}

// compress writes a field's set in Scheduler syntax. names, given for
// day-of-week, replace the numbers and rule out the "/" form, which
// Scheduler's day-of-week does not take.
func compress(set uint64, f field, names []string) string {
	var vals []int
	for v := f.min; v <= f.max; v++ {
		if set&(1<<v) != 0 {
			vals = append(vals, v)
		}
	}
	if len(vals) == f.max-f.min+1 {
		return "*"
	}
	show := strconv.Itoa
	if names != nil {
		show = func(v int) string { return names[v-f.min] }
	}
	// A progression that runs to the end of the field is "start/step", as in
	// the AWS examples ("0/15" for every quarter hour).
	if names == nil && len(vals) >= 3 {
		step := vals[1] - vals[0]
		progression := vals[len(vals)-1]+step > f.max
		for i := 2; i < len(vals) && progression; i++ {
			progression = vals[i]-vals[i-1] == step
		}
		if progression {
			return fmt.Sprintf("%d/%d", vals[0], step)
		}
	}
	var parts []string
	for i := 0; i < len(vals); {
		j := i
		for j+1 < len(vals) && vals[j+1] == vals[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, show(vals[i])+"-"+show(vals[j]))
		case j > i:
			parts = append(parts, show(vals[i]), show(vals[j]))
		default:
			parts = append(parts, show(vals[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// loadLocation is time.LoadLocation without its special cases: "Local"
// would mean the server's zone and "" is handled by Parse.
func loadLocation(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	return time.LoadLocation(name)
}

// field describes one cron field: its position, bounds and names.
type field struct {
	name     string
	index    int
	min, max int
	names    []string // names[i] stands for the value namesMin+i
	namesMin int
}

var (
	monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	dayNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

	minuteField = field{name: "minute", index: 0, min: 0, max: 59}
	hourField   = field{name: "hour", index: 1, min: 0, max: 23}
	domField    = field{name: "day-of-month", index: 2, min: 1, max: 31}
	monthField  = field{name: "month", index: 3, min: 1, max: 12, names: monthNames, namesMin: 1}
	// cron's day-of-week: 0-7 with Sunday at both ends, SUN=0.
	cronDowField = field{name: "day-of-week", index: 4, min: 0, max: 7, names: dayNames, namesMin: 0}
	// Scheduler's day-of-week: 1-7, SUN=1.
	schedulerDowField = field{name: "day-of-week", index: 4, min: 1, max: 7, names: dayNames, namesMin: 1}
)

// parse reads a field into a set with one bit per allowed value.
func (f field) parse(text string) (set uint64, star bool, err error) {
	star, err = f.each(text, func(v int) { set |= 1 << v })
	return set, star, err
}

// each reads a comma-separated list of *, ?, N, N-M, each optionally with
// /STEP (N/STEP runs from N to the field's end, as in cron and Scheduler),
// and calls add for every value it allows. star reports a bare * or ? term,
// which leaves the field unrestricted.
func (f field) each(text string, add func(int)) (star bool, err error) {
	for term := range strings.SplitSeq(text, ",") {
		base, stepText, hasStep := strings.Cut(term, "/")
		step := 1
		if hasStep {
			if step, err = number(stepText); err != nil || step < 1 {
				return false, fmt.Errorf("bad step in %q", term)
			}
		}
		var lo, hi int
		if base == "*" || base == "?" && f.isDay() {
			lo, hi = f.min, f.max
			star = star || step == 1
		} else {
			loText, hiText, isRange := strings.Cut(base, "-")
			if lo, err = f.value(loText); err != nil {
				return false, fmt.Errorf("%w in %q", err, term)
			}
			hi = lo
			switch {
			case isRange:
				if hi, err = f.value(hiText); err != nil {
					return false, fmt.Errorf("%w in %q", err, term)
				}
			case hasStep:
				hi = f.max
			}
			if hi < lo {
				return false, fmt.Errorf("range %q runs backwards", term)
			}
		}
		for v := lo; v <= hi; v += step {
			add(v)
		}
	}
	return star, nil
}

// isDay: only the day fields take "?".
func (f field) isDay() bool { return f.index == domField.index || f.index == cronDowField.index }

func (f field) value(s string) (int, error) {
	if i := slices.IndexFunc(f.names, func(n string) bool { return strings.EqualFold(n, s) }); i >= 0 {
		return f.namesMin + i, nil
	}
	v, err := number(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number or name", s)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("%d is outside %d-%d", v, f.min, f.max)
	}
	return v, nil
}

// number accepts plain decimal digits only; strconv.Atoi would also take a
// sign.
func number(s string) (int, error) {
	if s == "" || len(s) > 4 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return strconv.Atoi(s)
}

// cronSchedule computes cron firings with robfig/cron, plus what robfig
// lacks: Scheduler's year field and its rule that the autumn repeated hour
// fires once.
type cronSchedule struct {
	spec  *cron.SpecSchedule
	loc   *time.Location
	years []bool // indexed by year-minYear; nil: every year
}

const minYear, maxYear = 1970, 2199

// newCronSchedule builds the robfig schedule from field sets (dow bit 0 is
// Sunday), writing "*" for an unrestricted day field so robfig applies the
// same AND/OR rule as cron.
func newCronSchedule(minute, hour, dom, month, dow uint64, domStar, dowStar bool, loc *time.Location, years []bool) (cronSchedule, error) {
	list := func(set uint64, star bool) string {
		if star {
			return "*"
		}
		var vals []string
		for v := range 64 {
			if set&(1<<v) != 0 {
				vals = append(vals, strconv.Itoa(v))
			}
		}
		return strings.Join(vals, ",")
	}
	text := strings.Join([]string{
		list(minute, false), list(hour, false), list(dom, domStar), list(month, false), list(dow, dowStar),
	}, " ")
	s, err := cron.ParseStandard(text)
	if err != nil {
		return cronSchedule{}, err
	}
	spec := s.(*cron.SpecSchedule)
	spec.Location = loc
	return cronSchedule{spec: spec, loc: loc, years: years}, nil
}

// next returns the first firing strictly after t, or zero if there is none
// (robfig looks five years ahead; a restricted year list is searched year by
// year).
func (c cronSchedule) next(t time.Time) time.Time {
	for {
		n := c.spec.Next(t)
		if n.IsZero() {
			return n
		}
		if y := n.In(c.loc).Year(); c.years != nil && (y < minYear || y > maxYear || !c.years[y-minYear]) {
			y = c.nextYear(y)
			if y == 0 {
				return time.Time{}
			}
			// Next is strictly after its argument; start a second before
			// New Year so midnight itself can match.
			t = time.Date(y, time.January, 1, 0, 0, 0, 0, c.loc).Add(-time.Second)
			continue
		}
		if repeatedWallClock(n.In(c.loc)) {
			t = n
			continue
		}
		return n
	}
}

// nextYear is the first allowed year after y, 0 if none.
func (c cronSchedule) nextYear(y int) int {
	for y++; y <= maxYear; y++ {
		if y >= minYear && c.years[y-minYear] {
			return y
		}
	}
	return 0
}

// repeatedWallClock reports whether t's wall-clock time already happened
// earlier, in the hour that repeats when clocks go back. Scheduler fires such
// a time once, on its first occurrence.
func repeatedWallClock(t time.Time) bool {
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, off := t.Zone()
	_, before := start.Add(-time.Nanosecond).Zone()
	return before > off && t.Sub(start) < time.Duration(before-off)*time.Second
}
