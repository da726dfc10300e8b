// Package firer fires the schedules of EventBridge Scheduler for the local
// runtime (internal/local/localrun): the emulator stores schedules but never
// fires them. In AWS, Scheduler itself invokes the scheduler function.
package firer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"
	"github.com/relaybatch/relay/internal/schedule"
)

// DefaultRefresh is how often a Firer re-reads the schedules when nothing
// is due sooner.
const DefaultRefresh = 5 * time.Second

// Firer does locally what Scheduler does in AWS, for an emulator that stores
// schedules but never fires them: it reads the group's schedules through the
// Scheduler API and calls Fire at each one's scheduled times, with the
// schedule's input (context attributes such as schedule.ScheduledTimePlaceholder
// substituted, as Scheduler does) and the scheduled time.
//
// It re-reads the schedules every Refresh and just before firing, so a
// schedule deleted or disabled before its time does not fire. A schedule
// fires for its times from its creation (or StartDate) on, but only those
// after the Firer last looked at the group, so a restart or a re-enable does
// not replay the past. A process that was suspended catches up on times at
// most an hour late, as Scheduler's retries would; an at() schedule fires
// however late, once, and is deleted afterwards if its ActionAfterCompletion
// is DELETE. Within one process a schedule never fires the same scheduled
// time twice. A firing that fails is retried as its target's RetryPolicy
// says (Scheduler's default, 185 attempts, when it has none), with a
// backoff from RetryWait doubling to 5 s; Fire calls are sequential.
type Firer struct {
	API   schedule.API
	Group string
	// Refresh defaults to DefaultRefresh.
	Refresh time.Duration
	// Now is the clock schedules are evaluated against (required).
	// Refresh and waiting use real time, so a test can move Now forward and
	// see firings within one Refresh.
	Now func() time.Time
	// Fire delivers one firing. An error is logged and the firing retried.
	Fire   func(ctx context.Context, scheduleName string, input []byte, scheduledTime time.Time) error
	Logger *slog.Logger
	// Since is when the Firer starts looking: times after it fire. Zero
	// means when Run starts.
	Since time.Time
	// RetryWait is the wait before a failed firing's first retry; 200 ms by
	// default.
	RetryWait time.Duration

	// lastLoad is the clock reading of the last successful read of the
	// schedules: every time up to it has been fired for the schedules then
	// known, so a schedule seen later fires only after it.
	lastLoad  time.Time
	schedules map[string]*tracked
	// lastFired survives a schedule's deletion, so one deleted and recreated
	// under the same name cannot fire a time again.
	lastFired map[string]time.Time
}

// tracked is one schedule as last read, with its next firing.
type tracked struct {
	arn, expr, tz, input string
	start, end           time.Time
	created              time.Time
	deleteAfter          bool
	enabled              bool
	retries              int // retries of a failed firing (the target's RetryPolicy)
	when                 schedule.Expr
	next                 time.Time // zero: nothing more to fire
}

// Run fires schedules until ctx is done, then returns ctx.Err(). Failures to
// read the schedules are logged and the previous view is kept.
func (f *Firer) Run(ctx context.Context) error {
	if f.API == nil || f.Fire == nil {
		return errors.New("schedule firer: API and Fire are required")
	}
	refresh := cmp.Or(f.Refresh, DefaultRefresh)
	log := cmp.Or(f.Logger, slog.Default()).With("schedule_group", f.Group)
	// Just before the start, so a time exactly at the start fires.
	f.lastLoad = cmp.Or(f.Since, f.Now()).Add(-time.Nanosecond)
	f.schedules = map[string]*tracked{}
	f.lastFired = map[string]time.Time{}
	for {
		// Read the clock before the schedules: anything deleted before a time
		// became due is then gone from the view that fires it.
		now := f.Now()
		if err := f.load(ctx, now, log); err != nil && ctx.Err() == nil {
			log.Error("read schedules", "err", err)
		}
		f.fireDue(ctx, now, log)

		wait := refresh
		for _, t := range f.schedules {
			if t.enabled && !t.next.IsZero() {
				wait = min(wait, max(t.next.Sub(f.Now()), 0))
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// load replaces the view of the group's schedules, keeping the next firing
// of those whose timing did not change.
func (f *Firer) load(ctx context.Context, now time.Time, log *slog.Logger) error {
	var names []string
	in := &scheduler.ListSchedulesInput{GroupName: schedule.GroupName(f.Group)}
	for {
		out, err := f.API.ListSchedules(ctx, in)
		if err != nil {
			return fmt.Errorf("list schedules: %w", err)
		}
		for _, s := range out.Schedules {
			names = append(names, aws.ToString(s.Name))
		}
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	fresh := make(map[string]*tracked, len(names))
	for _, name := range names {
		got, err := f.API.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(name), GroupName: schedule.GroupName(f.Group)})
		if schedule.IsNotFound(err) {
			continue // deleted since the listing
		}
		if err != nil {
			return fmt.Errorf("get schedule %s: %w", name, err)
		}
		t := &tracked{
			arn:         aws.ToString(got.Arn),
			expr:        aws.ToString(got.ScheduleExpression),
			tz:          aws.ToString(got.ScheduleExpressionTimezone),
			start:       aws.ToTime(got.StartDate),
			end:         aws.ToTime(got.EndDate),
			created:     aws.ToTime(got.CreationDate),
			deleteAfter: got.ActionAfterCompletion == types.ActionAfterCompletionDelete,
			enabled:     got.State != types.ScheduleStateDisabled,
		}
		t.retries = defaultRetries
		if got.Target != nil {
			t.input = aws.ToString(got.Target.Input)
			if rp := got.Target.RetryPolicy; rp != nil && rp.MaximumRetryAttempts != nil {
				t.retries = int(*rp.MaximumRetryAttempts)
			}
		}
		old := f.schedules[name]
		if old != nil && old.sameTiming(t) {
			t.when, t.next = old.when, old.next
			if t.enabled && !old.enabled {
				// Re-enabled: resume, as Scheduler does, without the times
				// that passed while disabled.
				t.next = f.first(name, t)
			}
			fresh[name] = t
			continue
		}
		when, err := schedule.ParseExpression(t.expr, t.tz)
		if err != nil {
			if old == nil || old.expr != t.expr || old.tz != t.tz {
				log.Error("schedule cannot be fired locally", "schedule", name, "err", err)
			}
			t.when = schedule.Expr{} // never due
			fresh[name] = t
			continue
		}
		t.when = when
		t.next = f.first(name, t)
		fresh[name] = t
	}
	f.schedules, f.lastLoad = fresh, now
	return nil
}

func (t *tracked) sameTiming(u *tracked) bool {
	return t.expr == u.expr && t.tz == u.tz && t.start.Equal(u.start) && t.end.Equal(u.end)
}

// first is the first firing of a schedule that is new, changed or
// re-enabled: after the previous look at the group, so a restart does not
// replay the past, and from its creation (or StartDate) on, so one created
// just before a time that came due before this look still fires it.
func (f *Firer) first(name string, t *tracked) time.Time {
	switch t.when.Kind {
	case schedule.KindAt:
		// One-time schedules ignore StartDate and fire however late.
		if t.when.At.After(f.lastFired[name]) {
			return t.when.At
		}
		return time.Time{}
	case schedule.KindRate:
		// A rate fires first at its StartDate or, without one, at creation.
		t.when.Start = cmp.Or(t.start, t.created, f.lastLoad)
	}
	after := f.lastLoad
	for _, from := range []time.Time{t.start, t.created} {
		if !from.IsZero() {
			after = maxTime(after, from.Add(-time.Nanosecond))
		}
	}
	return t.when.Next(after)
}

// fireDue fires every enabled schedule's times up to now, earliest first.
func (f *Firer) fireDue(ctx context.Context, now time.Time, log *slog.Logger) {
	type firing struct {
		name string
		at   time.Time
	}
	var due []firing
	for name, t := range f.schedules {
		if !t.enabled {
			continue
		}
		if t.when.Kind != schedule.KindAt && !t.next.IsZero() && now.Sub(t.next) > schedule.MaxLateness {
			skipTo := t.when.Next(now.Add(-schedule.MaxLateness))
			log.Warn("schedule missed firings more than an hour late; skipping them", "schedule", name, "from", t.next, "to", skipTo)
			t.next = skipTo
		}
		for !t.next.IsZero() && !t.next.After(now) {
			if t.when.Kind != schedule.KindAt && !t.end.IsZero() && t.next.After(t.end) {
				t.next = time.Time{}
				break
			}
			due = append(due, firing{name, t.next})
			t.next = t.when.Next(t.next)
		}
	}
	slices.SortFunc(due, func(a, b firing) int { return cmp.Or(a.at.Compare(b.at), strings.Compare(a.name, b.name)) })
	for _, d := range due {
		if ctx.Err() != nil {
			return
		}
		if !d.at.After(f.lastFired[d.name]) {
			continue
		}
		f.lastFired[d.name] = d.at
		t := f.schedules[d.name]
		log := log.With("schedule", d.name, "scheduled_time", d.at)
		f.fire(ctx, d.name, t, d.at, log)
		if t.when.Kind == schedule.KindAt && t.deleteAfter {
			_, err := f.API.DeleteSchedule(ctx, &scheduler.DeleteScheduleInput{Name: aws.String(d.name), GroupName: schedule.GroupName(f.Group)})
			if err != nil && !schedule.IsNotFound(err) {
				log.Error("delete completed one-time schedule", "err", err)
			}
		}
	}
}

// defaultRetries is Scheduler's MaximumRetryAttempts when a target has no
// RetryPolicy.
const defaultRetries = 185

// fire delivers one firing, retrying a failure up to the schedule's retries.
func (f *Firer) fire(ctx context.Context, name string, t *tracked, at time.Time, log *slog.Logger) {
	input := substitute(t, at)
	wait := cmp.Or(f.RetryWait, 200*time.Millisecond)
	for attempt := 0; ; attempt++ {
		err := f.Fire(ctx, name, input, at)
		if err == nil {
			log.Info("fired schedule", "retries", attempt)
			return
		}
		if attempt >= t.retries || ctx.Err() != nil {
			log.Error("fire schedule; retries exhausted", "retries", attempt, "err", err)
			return
		}
		log.Warn("fire schedule; retrying", "retry", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// substitute fills in Scheduler's context attributes, as Scheduler does for
// every invocation.
func substitute(t *tracked, at time.Time) []byte {
	var id [8]byte
	rand.Read(id[:])
	return []byte(strings.NewReplacer(
		schedule.ScheduledTimePlaceholder, at.UTC().Format(time.RFC3339),
		"<aws.scheduler.schedule-arn>", t.arn,
		"<aws.scheduler.execution-id>", hex.EncodeToString(id[:]),
		"<aws.scheduler.attempt-number>", "1",
	).Replace(t.input))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
