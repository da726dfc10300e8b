package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/tidwall/sjson"

	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/inference"
)

// State is a record's checkpoint, saved after every step: what the next
// event is and what the record has used so far. A record resumed from it
// sends that event again (with the same event_id) and never re-runs, or
// re-counts, the requests of a step it saved.
type State struct {
	// Step is the step of the next event: 0 is start, n ≥ 1 the results
	// event of step n.
	Step int `json:"step"`
	// Results are what the next results event carries, spooled.
	Results *Results `json:"results,omitempty"`
	// Requests counts the requests answers have returned (max_requests).
	Requests int `json:"requests"`
	// Usage sums the upstream usage of every request run so far.
	Usage Usage `json:"usage"`
	// Fallback is set once a fallback model served one of the requests.
	Fallback bool `json:"fallback,omitempty"`
	// WaitUntil (Unix milliseconds) is when a wait answer lets the next
	// event go; zero when not waiting.
	WaitUntil int64 `json:"wait_until,omitempty"`
}

// Usage is a record's token usage, in the names of a chat completion's.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Kind is how a run of a record ended.
type Kind int

const (
	// Completed: the callback answered completed; Output is the row's body.
	Completed Kind = iota + 1
	// Failed: the record ends with Err as its error line.
	Failed
	// Waiting: the record may go on at Until; it holds nothing meanwhile.
	Waiting
	// Yielded: the invocation is nearly out of time; the record goes on in
	// another one.
	Yielded
)

// Outcome is where a run of a record stopped.
type Outcome struct {
	Kind   Kind
	Output json.RawMessage // Completed: the callback's output with the summed usage
	Err    *Error          // Failed
	Until  time.Time       // Waiting
	// EventID is the event whose answer ended the run (Completed, Failed).
	EventID string
	// State is the record's state at the end: its usage is what the
	// record's line counts.
	State State
}

// Runner is the step machine of a record: from its checkpoint, send the
// next event, read the answer, run the step's requests, checkpoint, until
// the record ends, waits or yields. Its functions are the engine's side of
// the work; Driver sets them from its Host.
type Runner struct {
	Spec       Spec
	WorkflowID string // "<batch>:<custom_id>"
	RecordID   string // custom_id
	Model      string // the only model a step's requests may name

	// Call delivers an event and returns the answer (Caller.Call).
	Call func(ctx context.Context, spec Spec, ev Event) (Answer, error)
	// Policy is the callback's address policy, which a step request's
	// tool endpoint passes too.
	Policy egress.Policy
	// Exec runs a step's admitted requests concurrently within the
	// model's capacity, each with its tool rounds, handing each answer to
	// done (by the call's position) as it comes, before it returns.
	Exec func(ctx context.Context, calls []Call, done func(i int, r inference.Result))
	// Save checkpoints the state after a step.
	Save func(ctx context.Context, st State) error
	// Stop, checked before every event, fails the record when the batch
	// was cancelled or expired, or it may no longer spend; nil means go on.
	Stop func(ctx context.Context) (*Error, error)
	// Yield reports whether the invocation should hand the record over
	// rather than start another event; nil means never.
	Yield func() bool
	Now   func() time.Time // the clock (required)

	// Saved counts the checkpoints this run wrote: a run cut short after
	// one made progress, which the next invocation keeps.
	Saved int
}

// Run drives the record from st until it completes, fails, waits or
// yields. An error (the context ended, a checkpoint could not be written)
// leaves the record at its last checkpoint.
func (r *Runner) Run(ctx context.Context, st State) (Outcome, error) {
	sent := false
	for {
		o, err := r.halt(ctx, st, sent)
		if err != nil {
			return Outcome{State: st}, err
		}
		if o != nil {
			return *o, nil
		}
		ev := r.event(st)
		a, err := r.Call(ctx, r.Spec, ev)
		var failure *Error
		if errors.As(err, &failure) {
			return failed(failure, ev.EventID, st), nil
		}
		if err != nil {
			return Outcome{State: st}, err
		}
		sent = true
		next, end, err := r.answer(ctx, st, ev, a)
		switch {
		case err != nil:
			return Outcome{State: st}, err
		case end != nil:
			return *end, nil
		}
		if err := r.Save(ctx, next); err != nil {
			next.Results.Close()
			return Outcome{State: st}, err
		}
		r.Saved++
		st.Results.Close() // its event was answered and the step after it saved
		st = next
	}
}

func failed(e *Error, eventID string, st State) Outcome {
	return Outcome{Kind: Failed, Err: e, EventID: eventID, State: st}
}

// halt is where the record stops before its next event, if it does: its
// batch stopped it, it is over its token budget, it waits, or (after
// sending an event, so an invocation too short for one event still makes
// its attempt instead of yielding forever) the invocation hands it over.
func (r *Runner) halt(ctx context.Context, st State, sent bool) (*Outcome, error) {
	if r.Stop != nil {
		e, err := r.Stop(ctx)
		if err != nil {
			return nil, err
		}
		if e != nil {
			o := failed(e, "", st)
			return &o, nil
		}
	}
	if overBudget(st.Usage, r.Spec) {
		o := failed(errorf(CodeBudgetExceeded, "the record used %d tokens, over its max_tokens of %d", st.Usage.TotalTokens, r.Spec.MaxTokens), "", st)
		return &o, nil
	}
	if until := time.UnixMilli(st.WaitUntil); st.WaitUntil > 0 && r.Now().Before(until) {
		return &Outcome{Kind: Waiting, Until: until, State: st}, nil
	}
	if sent && r.Yield != nil && r.Yield() {
		return &Outcome{Kind: Yielded, State: st}, nil
	}
	return nil, nil
}

// answer acts on the callback's answer a to ev: the record ends (end), or
// the answer is a step (continue or wait), and next is the state to
// checkpoint after it. An error means a step was cut short: none of it is
// kept.
func (r *Runner) answer(ctx context.Context, st State, ev Event, a Answer) (next State, end *Outcome, err error) {
	switch a.State {
	case StateCompleted:
		out, err := withUsage(a.Output, st.Usage)
		if err != nil {
			o := failed(errorf(CodeInvalidResponse, "the callback's output: %v", err), ev.EventID, st)
			return st, &o, nil
		}
		return st, &Outcome{Kind: Completed, Output: out, EventID: ev.EventID, State: st}, nil
	case StateFailed:
		o := failed(a.Failure, ev.EventID, st)
		return st, &o, nil
	}
	// continue and wait: each is a step.
	if st.Step+1 > r.Spec.MaxSteps {
		o := failed(errorf(CodeBudgetExceeded, "the callback answered %s after step %d; max_steps is %d", a.State, st.Step, r.Spec.MaxSteps), ev.EventID, st)
		return st, &o, nil
	}
	next = State{Step: st.Step + 1, Requests: st.Requests, Usage: st.Usage, Fallback: st.Fallback}
	switch a.State {
	case StateWait:
		next.WaitUntil = r.Now().Add(a.Wait).UnixMilli()
	case StateContinue:
		if n := st.Requests + len(a.Requests); n > r.Spec.MaxRequests {
			o := failed(errorf(CodeBudgetExceeded, "step %d asks for %d requests, %d in all; max_requests is %d", next.Step, len(a.Requests), n, r.Spec.MaxRequests), ev.EventID, st)
			return st, &o, nil
		}
		err := r.step(ctx, a.Requests, &next)
		if err == nil {
			err = ctx.Err() // some requests were cut short
		}
		if err != nil {
			// None of the step is kept.
			next.Results.Close()
			return st, nil, err
		}
	}
	return next, nil, nil
}

// event is the event st says comes next.
func (r *Runner) event(st State) Event {
	ev := Event{EventID: EventID(r.WorkflowID, st.Step), Event: EventStart, WorkflowID: r.WorkflowID,
		RecordID: r.RecordID, Step: st.Step, Context: r.Spec.Context}
	if st.Step > 0 {
		ev.Event, ev.Results = EventResults, st.Results
	}
	return ev
}

// step runs a continue answer's requests into next: the admitted ones
// upstream, concurrently; the others answered 400 here. Each result goes
// to next's spooled Results as it comes (docs/design.md "Memory").
func (r *Runner) step(ctx context.Context, reqs []Request, next *State) error {
	results := NewResults(len(reqs))
	next.Results = results
	var calls []Call
	var sent []int
	stage := StageID(next.Step)
	for i, q := range reqs {
		call, rejected := Admit(q, r.Model, r.Policy)
		if rejected != nil {
			rejected.StageID = stage
			if err := results.Set(i, *rejected); err != nil {
				return err
			}
			continue
		}
		calls = append(calls, call)
		sent = append(sent, i)
	}
	var mu sync.Mutex
	var err error
	if len(calls) > 0 {
		// A finished request that takes the record past max_tokens cancels
		// the step's others: they are not billed, and the step, kept with
		// what finished, ends the record (halt) once checkpointed.
		sctx, over := context.WithCancel(ctx)
		defer over()
		r.Exec(sctx, calls, func(j int, res inference.Result) {
			i := sent[j]
			out := resultOf(reqs[i], res)
			out.StageID = stage
			serr := results.Set(i, out)
			mu.Lock()
			defer mu.Unlock()
			err = cmp.Or(err, serr)
			next.Usage.PromptTokens += res.Usage.InputTokens
			next.Usage.CompletionTokens += res.Usage.OutputTokens
			next.Usage.TotalTokens += res.Usage.TotalTokens
			next.Fallback = next.Fallback || res.Fallback
			if overBudget(next.Usage, r.Spec) {
				over()
			}
		})
	}
	next.Requests += len(reqs)
	return err
}

// overBudget says whether usage u is past the record's max_tokens.
func overBudget(u Usage, s Spec) bool { return u.TotalTokens > s.MaxTokens }

// withUsage puts the record's summed usage into its output, replacing any
// usage the callback wrote there.
func withUsage(output json.RawMessage, u Usage) (json.RawMessage, error) {
	b, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	return sjson.SetRawBytes([]byte(output), "usage", b)
}
