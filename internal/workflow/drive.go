package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/inference"
)

// Host is the engine's side of one run of a record (docs/api.md "Workflow
// records"): where its checkpoint lives, how its requests reach the
// providers within the capacity its chunk holds, and how the record ends
// or goes on later. The driver calls nothing else.
type Host interface {
	// Load takes the record's lease and returns its last checkpoint, the
	// zero State for a record not started. A *BusyError means another
	// executor drives the record.
	Load(ctx context.Context) (State, error)
	// TakeSlots makes the record hold its model's slots (a record that
	// waited gave them back); false means the model is full. ErrFinished
	// means the record's line was committed meanwhile.
	TakeSlots(ctx context.Context) (bool, error)
	// ReturnSlots gives the record's slots back while it waits.
	ReturnSlots(ctx context.Context) error
	// Exec runs a step's admitted requests concurrently within the slots
	// the record holds, each with its tool rounds in its one slot
	// (RunTools), handing each answer to done (by the call's position) as
	// it comes, before it returns.
	Exec(ctx context.Context, calls []Call, done func(i int, r inference.Result))
	// Save checkpoints the record after a step.
	Save(ctx context.Context, st State) error
	// Stop, checked before every event, fails the record when its batch
	// was cancelled or expired, or its key or budget no longer lets it
	// spend; nil means go on. An error leaves the record at its checkpoint.
	Stop(ctx context.Context) (*Error, error)
	// Requeue ends this run holding no lease: the record goes on in
	// another invocation after delay.
	Requeue(ctx context.Context, delay time.Duration) error
	// Finish commits the record's line (o is Completed or Failed) and
	// drops its checkpoint.
	Finish(ctx context.Context, o Outcome) error
}

// BusyError is Host.Load's answer while another executor holds the
// record's lease.
type BusyError struct {
	Until time.Time // when that lease runs out unless renewed
}

func (e *BusyError) Error() string {
	return "workflow: the record is leased until " + e.Until.Format(time.RFC3339)
}

// ErrFinished is Host.TakeSlots's answer for a record whose line is
// committed already: the run has nothing left to do.
var ErrFinished = errors.New("workflow: the record's line is committed already")

// ErrOutOfTime is Drive's answer when the invocation ran out of time
// before the record made progress: its message should come back as a
// failed receive rather than go round again at once.
var ErrOutOfTime = errors.New("workflow: out of time before the record made progress")

// capacityRetry is how soon a resumed record whose model is full looks again.
const capacityRetry = 3 * time.Second

// yieldMargin is the invocation time an event needs beyond its callback's
// timeout; with less left, a record that made progress hands over.
const yieldMargin = 10 * time.Second

// Driver runs one record from its checkpoint until it ends, waits, or
// hands over to another invocation. The step machine is Runner's; the
// driver takes the lease and the capacity around it and ends the run
// through its Host.
type Driver struct {
	Spec       Spec
	WorkflowID string // "<batch>:<custom_id>"
	RecordID   string // custom_id
	Model      string // the only model a step's requests may name
	// Policy is the callback's address policy (Runner.Policy).
	Policy egress.Policy
	// Call delivers an event and returns the answer (Caller.Call).
	Call func(ctx context.Context, spec Spec, ev Event) (Answer, error)
	Host Host
	Log  *slog.Logger     // nil: no logs
	Now  func() time.Time // the clock (required)
}

func (d *Driver) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Drive runs the record. runCtx ends before the invocation does, ctx with
// it: the steps run under runCtx, and what ends the run (a commit, a
// requeue) under ctx. A nil error means the run ended as it should
// (committed, or requeued); another error leaves the record at its last
// checkpoint for its message's next delivery.
func (d *Driver) Drive(ctx, runCtx context.Context) error {
	st, err := d.Host.Load(ctx)
	var busy *BusyError
	if errors.As(err, &busy) {
		// A duplicate delivery while another executor drives the record:
		// look again once its lease runs out (if it commits first, this
		// message finds the chunk done).
		d.log().InfoContext(ctx, "workflow record busy; retrying later", "until", busy.Until)
		return d.Host.Requeue(ctx, busy.Until.Sub(d.Now())+time.Second)
	}
	if err != nil {
		return err
	}
	defer func() { st.Results.Close() }() // the run's last state: its results are in its checkpoint
	// A record whose batch was cancelled or expired, or that may no longer
	// spend, ends on that answer with its error line: it neither waits nor
	// takes capacity, so it must not go on should Stop answer otherwise
	// next (a refusal read from a cache about to be renewed).
	stop, err := d.Host.Stop(ctx)
	if err != nil {
		return err
	}
	if stop != nil {
		return d.end(ctx, failed(stop, "", st))
	}
	if ok, err := d.ready(ctx, st); !ok {
		return err
	}
	r := d.runner(runCtx)
	o, err := r.Run(runCtx, st)
	st = o.State
	if err != nil {
		return d.cutShort(ctx, runCtx, r, st, err)
	}
	return d.end(ctx, o)
}

// ready makes the record ready to send its next event: its wait over and
// its model's slots held. Otherwise it reports false, with the run's
// result: the record was handed over, or has nothing left to do.
func (d *Driver) ready(ctx context.Context, st State) (bool, error) {
	if w := time.UnixMilli(st.WaitUntil).Sub(d.Now()); st.WaitUntil > 0 && w > 0 {
		return false, d.Host.Requeue(ctx, w) // delivered early: wait on, still holding nothing
	}
	switch held, err := d.Host.TakeSlots(ctx); {
	case errors.Is(err, ErrFinished):
		return false, nil
	case err != nil:
		return false, err
	case !held:
		return false, d.Host.Requeue(ctx, capacityRetry) // the model is full
	}
	return true, nil
}

// runner is the step machine over the host.
func (d *Driver) runner(runCtx context.Context) *Runner {
	return &Runner{
		Spec: d.Spec, WorkflowID: d.WorkflowID, RecordID: d.RecordID, Model: d.Model, Policy: d.Policy,
		Call: d.Call, Exec: d.Host.Exec, Save: d.Host.Save, Stop: d.Host.Stop,
		Yield: func() bool {
			dl, ok := runCtx.Deadline()
			return ok && time.Until(dl) < d.Spec.CallbackTimeout+yieldMargin
		},
		Now: d.Now,
	}
}

// cutShort is the result of a run that stopped with err, at the record's
// last checkpoint.
func (d *Driver) cutShort(ctx, runCtx context.Context, r *Runner, st State, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case runCtx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		if r.Saved > 0 {
			// Out of time after checkpointing progress: go on in a fresh
			// invocation rather than spend one of the message's receives
			// on a record that is moving.
			d.log().InfoContext(ctx, "workflow record continues in another invocation", "step", st.Step+r.Saved)
			return d.Host.Requeue(ctx, 0)
		}
		return ErrOutOfTime
	}
	return fmt.Errorf("workflow %s: %w", d.WorkflowID, err)
}

// end ends the run where the step machine stopped: a waiting record gives
// its slots back and goes on at its time, a yielded one at once, and an
// ended one commits its line.
func (d *Driver) end(ctx context.Context, o Outcome) error {
	switch o.Kind {
	case Waiting:
		if err := d.Host.ReturnSlots(ctx); err != nil {
			return fmt.Errorf("workflow %s: give back capacity: %w", d.WorkflowID, err)
		}
		return d.Host.Requeue(ctx, o.Until.Sub(d.Now()))
	case Yielded:
		return d.Host.Requeue(ctx, 0)
	}
	return d.Host.Finish(ctx, o)
}
