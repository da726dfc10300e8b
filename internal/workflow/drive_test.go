package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/inference"
)

// fakeHost is the engine's side of a record in memory: a checkpoint that
// outlives a run (as the DynamoDB item does), a model's slots, an
// upstream that echoes, and a record of how each run ended.
type fakeHost struct {
	mu         sync.Mutex
	checkpoint *State    // what Load returns; nil: a record not started
	busyUntil  time.Time // set: another executor holds the lease
	full       bool      // the model has no free slot
	stop       *Error    // the batch was cancelled or expired
	lifted     bool      // stop answers the first Stop only (a refusal the next read no longer sees)
	crashAt    int       // Save of this step writes, then the executor dies
	held       bool      // the record holds its slots
	upstream   []string  // bodies run, in the order they ran
	saves      []int     // steps checkpointed
	requeues   []time.Duration
	finished   *Outcome
}

func (h *fakeHost) Load(context.Context) (State, error) {
	if !h.busyUntil.IsZero() {
		return State{}, &BusyError{Until: h.busyUntil}
	}
	if h.checkpoint == nil {
		return State{}, nil
	}
	return *h.checkpoint, nil
}

func (h *fakeHost) TakeSlots(context.Context) (bool, error) {
	h.held = !h.full
	return h.held, nil
}

func (h *fakeHost) ReturnSlots(context.Context) error {
	h.held = false
	return nil
}

func (h *fakeHost) Exec(_ context.Context, calls []Call, done func(int, inference.Result)) {
	for i, c := range calls {
		b := c.Body
		h.mu.Lock()
		h.upstream = append(h.upstream, string(b))
		h.mu.Unlock()
		done(i, inference.Result{StatusCode: 200, Body: json.RawMessage(fmt.Sprintf(`{"echo":%s}`, b)),
			Usage: inference.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15}, Model: "m"})
	}
}

// Save keeps a copy of st, as the table's item is: the run closes its
// results' spool once the next step is saved.
func (h *fakeHost) Save(_ context.Context, st State) error {
	st.Results = cloneResults(st.Results)
	h.checkpoint = &st
	h.saves = append(h.saves, st.Step)
	if st.Step == h.crashAt {
		return errors.New("the executor died after the checkpoint")
	}
	return nil
}

func (h *fakeHost) Stop(context.Context) (*Error, error) {
	e := h.stop
	if h.lifted {
		h.stop = nil
	}
	return e, nil
}

func (h *fakeHost) Requeue(_ context.Context, delay time.Duration) error {
	h.requeues = append(h.requeues, delay)
	return nil
}

func (h *fakeHost) Finish(_ context.Context, o Outcome) error {
	h.finished = &o
	return nil
}

// callback is a scripted callback service: it answers each event with
// script(event) and keeps the events it got.
type callback struct {
	script func(ev Event) string
	events []Event
}

func (cb *callback) call(ctx context.Context, _ Spec, ev Event) (Answer, error) {
	if ctx.Err() != nil {
		return Answer{}, ctx.Err()
	}
	cb.events = append(cb.events, keepEvent(ev))
	return ParseAnswer([]byte(cb.script(ev)))
}

var driveNow = time.Unix(1000, 0)

func driver(h *fakeHost, cb *callback) *Driver {
	return &Driver{
		Spec: Spec{MaxSteps: DefaultMaxSteps, MaxRequests: DefaultMaxRequests, MaxTokens: DefaultMaxTokens,
			CallbackTimeout: DefaultCallbackTimeout, Context: json.RawMessage(`{}`)},
		WorkflowID: "batch_1:rec", RecordID: "rec", Model: "m",
		Call: cb.call, Host: h, Now: func() time.Time { return driveNow },
	}
}

// twoSteps runs two steps ("a" and "b", then "c") and completes.
func twoSteps(ev Event) string {
	switch ev.Step {
	case 0:
		return cont("a", "b")
	case 1:
		return cont("c")
	}
	return `{"state":"completed","output":{"answer":42}}`
}

func TestDriveTwoStepRecordCompletes(t *testing.T) {
	t.Parallel()
	h, cb := &fakeHost{}, &callback{script: twoSteps}
	if err := driver(h, cb).Drive(context.Background(), context.Background()); err != nil {
		t.Fatal(err)
	}
	o := h.finished
	if o == nil || o.Kind != Completed || len(h.requeues) != 0 {
		t.Fatalf("finished %+v, requeued %v; want Completed and no requeue", o, h.requeues)
	}
	if !h.held {
		t.Fatalf("the record ran without taking its slots")
	}
	var out struct {
		Answer int   `json:"answer"`
		Usage  Usage `json:"usage"`
	}
	if err := json.Unmarshal(o.Output, &out); err != nil || out.Answer != 42 || out.Usage != (Usage{30, 15, 45}) {
		t.Fatalf("output %s (%v): want the callback's with the usage of 3 requests", o.Output, err)
	}
	if o.EventID != EventID("batch_1:rec", 2) || o.State.Requests != 3 {
		t.Fatalf("event %s, state %+v", o.EventID, o.State)
	}
	if fmt.Sprint(h.saves) != "[1 2]" || len(h.upstream) != 3 {
		t.Fatalf("checkpoints %v, upstream %d: want steps 1 and 2, 3 requests", h.saves, len(h.upstream))
	}
	if len(cb.events) != 3 {
		t.Fatalf("events: got %d, want start and two results", len(cb.events))
	}
	for i, ev := range cb.events {
		kind := EventResults
		if i == 0 {
			kind = EventStart
		}
		if ev.Step != i || ev.Event != kind || ev.EventID != EventID("batch_1:rec", i) {
			t.Errorf("event %d: got %+v", i, ev)
		}
	}
	if rs := listResults(cb.events[1].Results); len(rs) != 2 || rs[0].ID != "a" || rs[1].ID != "b" || rs[0].StatusCode != 200 {
		t.Errorf("step 1's results: got %+v", rs)
	}
}

func TestDriveResumesAfterCrashWithoutRerunningTheStep(t *testing.T) {
	t.Parallel()
	h, cb := &fakeHost{crashAt: 1}, &callback{script: twoSteps}
	err := driver(h, cb).Drive(context.Background(), context.Background())
	if err == nil || !strings.Contains(err.Error(), "died") || h.finished != nil {
		t.Fatalf("the crashed run: got %v, finished %+v", err, h.finished)
	}
	if h.checkpoint == nil || h.checkpoint.Step != 1 || len(h.upstream) != 2 {
		t.Fatalf("checkpoint %+v after %d requests: want step 1's, after a and b", h.checkpoint, len(h.upstream))
	}

	// The message comes back to another executor.
	h.crashAt = 0
	cb2 := &callback{script: twoSteps}
	if err := driver(h, cb2).Drive(context.Background(), context.Background()); err != nil {
		t.Fatal(err)
	}
	if first := cb2.events[0]; first.Step != 1 || first.Event != EventResults || first.EventID != EventID("batch_1:rec", 1) || first.Results.Len() != 2 {
		t.Fatalf("the first event on resume: got %+v, want step 1's results again, same event id", first)
	}
	if len(h.upstream) != 3 || !strings.Contains(h.upstream[2], `"c"`) {
		t.Fatalf("upstream %v: step 1 must not run again", h.upstream)
	}
	if o := h.finished; o == nil || o.Kind != Completed || o.State.Usage != (Usage{30, 15, 45}) || o.State.Requests != 3 {
		t.Fatalf("finished %+v: want Completed, each request counted once", o)
	}
}

func TestDriveCallbackFailedEndsTheRecord(t *testing.T) {
	t.Parallel()
	h := &fakeHost{}
	cb := &callback{script: func(ev Event) string {
		if ev.Step == 0 {
			return cont("a")
		}
		return `{"state":"failed","error":{"code":"ticket_closed","message":"the ticket was closed meanwhile"}}`
	}}
	if err := driver(h, cb).Drive(context.Background(), context.Background()); err != nil {
		t.Fatal(err)
	}
	o := h.finished
	if o == nil || o.Kind != Failed || o.Err.Code != CodeFailed || o.Err.Message != "ticket_closed: the ticket was closed meanwhile" {
		t.Fatalf("finished %+v: want Failed with the callback's error", o)
	}
	if o.EventID != EventID("batch_1:rec", 1) || o.State.Usage.TotalTokens != 15 || len(h.requeues) != 0 {
		t.Fatalf("event %s, usage %+v, requeues %v", o.EventID, o.State.Usage, h.requeues)
	}
}

func TestDriveHandsOver(t *testing.T) {
	t.Parallel()
	t.Run("busy: look again after the other lease", func(t *testing.T) {
		t.Parallel()
		h, cb := &fakeHost{busyUntil: driveNow.Add(20 * time.Second)}, &callback{script: twoSteps}
		if err := driver(h, cb).Drive(context.Background(), context.Background()); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(h.requeues) != "[21s]" || len(cb.events) != 0 || h.held {
			t.Fatalf("requeues %v after %d events", h.requeues, len(cb.events))
		}
	})
	t.Run("the model is full", func(t *testing.T) {
		t.Parallel()
		h, cb := &fakeHost{full: true}, &callback{script: twoSteps}
		if err := driver(h, cb).Drive(context.Background(), context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(h.requeues) != 1 || h.requeues[0] != capacityRetry || len(cb.events) != 0 {
			t.Fatalf("requeues %v after %d events", h.requeues, len(cb.events))
		}
	})
	t.Run("a wait gives the slots back", func(t *testing.T) {
		t.Parallel()
		h, cb := &fakeHost{}, &callback{script: func(Event) string { return `{"state":"wait","seconds":30}` }}
		if err := driver(h, cb).Drive(context.Background(), context.Background()); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(h.requeues) != "[30s]" || h.held || fmt.Sprint(h.saves) != "[1]" {
			t.Fatalf("requeues %v, held %v, checkpoints %v", h.requeues, h.held, h.saves)
		}
		// Delivered early: waits on without taking slots or sending.
		if err := driver(h, cb).Drive(context.Background(), context.Background()); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(h.requeues) != "[30s 30s]" || h.held || len(cb.events) != 1 {
			t.Fatalf("early: requeues %v, held %v, %d events", h.requeues, h.held, len(cb.events))
		}
	})
	t.Run("a cancelled batch ends the record without capacity", func(t *testing.T) {
		t.Parallel()
		h, cb := &fakeHost{stop: &Error{Code: "batch_cancelled", Message: "cancelled"}}, &callback{script: twoSteps}
		if err := driver(h, cb).Drive(context.Background(), context.Background()); err != nil {
			t.Fatal(err)
		}
		if h.finished == nil || h.finished.Err.Code != "batch_cancelled" || h.held || len(cb.events) != 0 {
			t.Fatalf("finished %+v, held %v, %d events", h.finished, h.held, len(cb.events))
		}
	})
	// The run stops on the refusal it took its capacity by: a record
	// refused when it resumes (it holds no slots) ends, even when the
	// governor's next answer would let it go (its key's cached read
	// renewed, a budget raised). Before, Stop was asked again before the
	// first event: the record then sent it and ran its step's requests
	// holding none of its model's slots.
	t.Run("a record refused at resume ends on that refusal", func(t *testing.T) {
		t.Parallel()
		h := &fakeHost{stop: &Error{Code: "budget_exceeded", Message: "spent"}, lifted: true}
		cb := &callback{script: twoSteps}
		if err := driver(h, cb).Drive(context.Background(), context.Background()); err != nil {
			t.Fatal(err)
		}
		if h.finished == nil || h.finished.Err == nil || h.finished.Err.Code != "budget_exceeded" || len(cb.events) != 0 || len(h.upstream) != 0 {
			t.Fatalf("finished %+v, %d events, %d requests run holding slots %v; want the record ended budget_exceeded, nothing sent",
				h.finished, len(cb.events), len(h.upstream), h.held)
		}
	})
	t.Run("out of time before progress", func(t *testing.T) {
		t.Parallel()
		h, cb := &fakeHost{}, &callback{script: twoSteps}
		runCtx, cancel := context.WithCancel(context.Background())
		cancel()
		err := driver(h, cb).Drive(context.Background(), runCtx)
		if !errors.Is(err, ErrOutOfTime) || len(h.requeues) != 0 || h.finished != nil {
			t.Fatalf("got %v, requeues %v", err, h.requeues)
		}
	})
}
