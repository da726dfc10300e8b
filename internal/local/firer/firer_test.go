package firer

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"
	"github.com/relaybatch/relay/internal/schedule"
)

// fakeClock is the Firer's Now, moved by the test so a schedule's minutes
// pass in milliseconds.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// firings records Fire calls.
type firings struct {
	mu     sync.Mutex
	times  map[string][]time.Time
	inputs map[string][][]byte
}

func (f *firings) fire(_ context.Context, name string, input []byte, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.times[name] = append(f.times[name], at)
	f.inputs[name] = append(f.inputs[name], input)
	return nil
}

func (f *firings) of(name string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.times[name])
}

// waitFired waits until name has fired for at. The deadline only keeps a
// broken Firer from hanging the test.
func (f *firings) waitFired(t *testing.T, name string, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !slices.ContainsFunc(f.of(name), at.Equal) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not fire for %s; fired %v", name, at, f.of(name))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFirer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newManager(t)
	every, err := schedule.Parse("* * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	// An hour ahead of the real clock, so every schedule's creation date
	// (real time) is before the Firer starts, and on a minute so the first
	// pass fires: that tells the test the Firer is running.
	t0 := time.Now().Add(2 * time.Hour).Truncate(time.Hour)
	clock := &fakeClock{t: t0}

	const a, b = "batch_a", "batch_b" // b is the control that keeps firing
	for _, id := range []string{a, b} {
		if _, err := m.Create(ctx, "tenant_1", id, every); err != nil {
			t.Fatal(err)
		}
	}
	_, err = m.API.CreateSchedule(ctx, &scheduler.CreateScheduleInput{
		Name:               aws.String("disabled"),
		GroupName:          aws.String(m.Group),
		ScheduleExpression: aws.String("cron(* * * * ? *)"),
		FlexibleTimeWindow: &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff},
		Target:             &types.Target{Arn: aws.String(m.TargetARN), RoleArn: aws.String(m.RoleARN), Input: aws.String("{}")},
		State:              types.ScheduleStateDisabled,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A one-time at() schedule, as Scheduler takes it: at in UTC, deleted
	// after it fires.
	_, err = m.API.CreateSchedule(ctx, &scheduler.CreateScheduleInput{
		Name:                       aws.String("expire-batch_1"),
		GroupName:                  aws.String(m.Group),
		ScheduleExpression:         aws.String("at(" + t0.Add(2*time.Minute).UTC().Format("2006-01-02T15:04:05") + ")"),
		ScheduleExpressionTimezone: aws.String("UTC"),
		FlexibleTimeWindow:         &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff},
		Target: &types.Target{Arn: aws.String(m.TargetARN), RoleArn: aws.String(m.RoleARN),
			Input: aws.String(`{"at":"<aws.scheduler.scheduled-time>"}`)},
		ActionAfterCompletion: types.ActionAfterCompletionDelete,
		State:                 types.ScheduleStateEnabled,
	})
	if err != nil {
		t.Fatal(err)
	}

	fired := &firings{times: map[string][]time.Time{}, inputs: map[string][][]byte{}}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	f := &Firer{API: m.API, Group: m.Group, Refresh: 100 * time.Millisecond, Now: clock.Now, Fire: fired.fire,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	go func() { done <- f.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})

	minute := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	fired.waitFired(t, b, minute(0))
	fired.waitFired(t, a, minute(0))
	clock.Set(minute(1))
	fired.waitFired(t, b, minute(1))
	clock.Set(minute(2).Add(20 * time.Second))
	fired.waitFired(t, b, minute(2))
	fired.waitFired(t, "expire-batch_1", minute(2))

	// The one-time schedule deletes itself after firing, as in AWS.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := m.API.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String("expire-batch_1"), GroupName: aws.String(m.Group)})
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("one-time schedule still there after firing: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Delete a before minute 3: b's firing for minute 3 comes from a pass
	// that read the schedules after the delete, so a cannot fire for it.
	if err := m.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	clock.Set(minute(3))
	fired.waitFired(t, b, minute(3))

	// A schedule created while running is picked up, from its creation on.
	clock.Set(minute(3).Add(30 * time.Second))
	if _, err := m.Create(ctx, "tenant_1", "batch_c", every); err != nil {
		t.Fatal(err)
	}
	// A jump over two minutes fires both, once each.
	clock.Set(minute(5))
	fired.waitFired(t, b, minute(5))
	fired.waitFired(t, "batch_c", minute(5))

	for _, c := range []struct {
		name string
		want []time.Time
	}{
		{a, []time.Time{minute(0), minute(1), minute(2)}},
		{b, []time.Time{minute(0), minute(1), minute(2), minute(3), minute(4), minute(5)}},
		{"batch_c", []time.Time{minute(4), minute(5)}},
		{"expire-batch_1", []time.Time{minute(2)}},
		{"disabled", nil},
	} {
		if got := fired.of(c.name); !slices.EqualFunc(got, c.want, time.Time.Equal) {
			t.Errorf("%s fired for %v, want %v", c.name, got, c.want)
		}
	}

	// The input is the schedule's, with the scheduled time filled in.
	fired.mu.Lock()
	var in schedule.Input
	err = json.Unmarshal(fired.inputs[a][1], &in)
	oneTime := string(fired.inputs["expire-batch_1"][0])
	fired.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if want := (schedule.Input{TemplateID: a, Tenant: "tenant_1", ScheduledTime: minute(1).UTC().Format(time.RFC3339)}); in != want {
		t.Errorf("input = %+v, want %+v", in, want)
	}
	if at, err := in.At(); err != nil || !at.Equal(minute(1)) {
		t.Errorf("Input.At() = %s, %v; want %s", at, err, minute(1))
	}
	if want := `{"at":"` + minute(2).UTC().Format(time.RFC3339) + `"}`; oneTime != want {
		t.Errorf("one-time input = %s, want %s", oneTime, want)
	}
}

func TestFirerNeedsAPIAndFire(t *testing.T) {
	t.Parallel()
	if err := (&Firer{}).Run(t.Context()); err == nil {
		t.Fatal("Run without API and Fire succeeded, want an error")
	}
}

// A firing whose delivery fails is retried, as Scheduler retries a target
// per its RetryPolicy: the scheduler function's faults do not lose a run.
func TestFirerRetriesAFailedFiring(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := newManager(t)
	every, err := schedule.Parse("* * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(2 * time.Hour).Truncate(time.Hour)
	if _, err := m.Create(ctx, "tenant_1", "batch_retry", every); err != nil {
		t.Fatal(err)
	}
	fired := &firings{times: map[string][]time.Time{}, inputs: map[string][][]byte{}}
	var mu sync.Mutex
	calls := 0
	flaky := func(ctx context.Context, name string, input []byte, at time.Time) error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n <= 2 {
			return errors.New("function error")
		}
		return fired.fire(ctx, name, input, at)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	f := &Firer{API: m.API, Group: m.Group, Refresh: time.Hour, Now: (&fakeClock{t: t0}).Now, Fire: flaky,
		RetryWait: time.Millisecond, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	go f.Run(runCtx)
	fired.waitFired(t, "batch_retry", t0)
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Fatalf("Fire called %d times, want 3 (two failures, then the firing)", calls)
	}
}
