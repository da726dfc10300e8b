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

// fakeRecord is the engine's side of a Runner, in memory: a scripted
// callback, an upstream that echoes, and a checkpoint store.
type fakeRecord struct {
	mu       sync.Mutex
	script   func(ev Event) string // the answer to an event
	events   []Event
	upstream []string // bodies run, in the order they ran
	saved    []State
	now      time.Time
}

func (f *fakeRecord) runner(spec Spec) *Runner {
	if spec.MaxSteps == 0 {
		spec.MaxSteps, spec.MaxRequests, spec.MaxTokens = DefaultMaxSteps, DefaultMaxRequests, DefaultMaxTokens
	}
	return &Runner{
		Spec: spec, WorkflowID: "batch_1:rec", RecordID: "rec", Model: "m",
		Call: func(_ context.Context, _ Spec, ev Event) (Answer, error) {
			f.mu.Lock()
			f.events = append(f.events, keepEvent(ev))
			f.mu.Unlock()
			return ParseAnswer([]byte(f.script(ev)))
		},
		Exec: func(_ context.Context, calls []Call, done func(int, inference.Result)) {
			for i, c := range calls {
				b := c.Body
				f.mu.Lock()
				f.upstream = append(f.upstream, string(b))
				f.mu.Unlock()
				done(i, inference.Result{StatusCode: 200, Body: json.RawMessage(fmt.Sprintf(`{"echo":%s}`, b)),
					Usage: inference.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15}, Model: "m"})
			}
		},
		Save: func(_ context.Context, st State) error {
			st.Results = cloneResults(st.Results) // as the table's item: the run closes its spool
			f.saved = append(f.saved, st)
			return nil
		},
		Now: func() time.Time { return f.now },
	}
}

// mustResults is rs spooled.
func mustResults(rs []Result) *Results {
	r, err := ResultsOf(rs)
	if err != nil {
		panic(err)
	}
	return r
}

// listResults decodes r.
func listResults(r *Results) []Result {
	rs, err := r.List()
	if err != nil {
		panic(err)
	}
	return rs
}

// cloneResults is a copy of r, nil for nil.
func cloneResults(r *Results) *Results {
	if r == nil {
		return nil
	}
	return mustResults(listResults(r))
}

// keepEvent is ev with a copy of its results, which outlives the run's
// spool.
func keepEvent(ev Event) Event {
	ev.Results = cloneResults(ev.Results)
	return ev
}

func req(id string) string {
	return fmt.Sprintf(`{"id":%q,"custom_id":%q,"body":{"model":"m","messages":[{"role":"user","content":%q}]}}`, id, id, id)
}

func cont(ids ...string) string {
	rs := make([]string, len(ids))
	for i, id := range ids {
		rs[i] = req(id)
	}
	return `{"state":"continue","requests":[` + strings.Join(rs, ",") + `]}`
}

func TestRunContractSummary(t *testing.T) {
	t.Parallel()
	f := &fakeRecord{now: time.Unix(1000, 0)}
	f.script = func(ev Event) string {
		switch ev.Step {
		case 0:
			return cont("payment", "shipping", "refund")
		case 1:
			return cont("summary")
		}
		return `{"state":"completed","output":{"summary":"all good"}}`
	}
	r := f.runner(Spec{Context: json.RawMessage(`{"ticket":7}`)})
	o, err := r.Run(context.Background(), State{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != Completed || r.Saved != 2 {
		t.Fatalf("got kind %v after %d checkpoints, want Completed after 2", o.Kind, r.Saved)
	}
	var out struct {
		Summary string `json:"summary"`
		Usage   Usage  `json:"usage"`
	}
	json.Unmarshal(o.Output, &out)
	if out.Summary != "all good" || out.Usage != (Usage{40, 20, 60}) {
		t.Fatalf("output: got %s", o.Output)
	}
	if len(f.events) != 3 {
		t.Fatalf("events: got %d, want start and two results", len(f.events))
	}
	start, first, second := f.events[0], f.events[1], f.events[2]
	if start.Event != EventStart || start.Step != 0 || string(start.Context) != `{"ticket":7}` || start.EventID != EventID("batch_1:rec", 0) {
		t.Errorf("start: got %+v", start)
	}
	if first.Event != EventResults || first.Step != 1 || first.Results.Len() != 3 || second.Step != 2 || second.Results.Len() != 1 {
		t.Fatalf("results events: got %+v and %+v", first, second)
	}
	for i, id := range []string{"payment", "shipping", "refund"} {
		if res := listResults(first.Results)[i]; res.ID != id || res.CustomID != id || res.StatusCode != 200 || !strings.Contains(string(res.Body), id) || res.Usage != (ResultUsage{10, 5}) {
			t.Errorf("result %d: got %+v", i, res)
		}
	}
	if o.EventID != EventID("batch_1:rec", 2) {
		t.Errorf("the completing event: got %s", o.EventID)
	}
}

func TestRunBudgets(t *testing.T) {
	t.Parallel()
	always := func(ids ...string) func(Event) string { return func(Event) string { return cont(ids...) } }
	tests := []struct {
		name         string
		spec         Spec
		script       func(Event) string
		wantUpstream int
		wantIn       string
	}{
		{"steps", Spec{MaxSteps: 2, MaxRequests: 64, MaxTokens: 1e6}, always("a"), 2, "max_steps is 2"},
		{"steps counts waits", Spec{MaxSteps: 1, MaxRequests: 64, MaxTokens: 1e6}, func(Event) string { return `{"state":"wait","seconds":0}` }, 0, "max_steps is 1"},
		{"requests", Spec{MaxSteps: 16, MaxRequests: 3, MaxTokens: 1e6}, always("a", "b"), 2, "max_requests is 3"},
		{"tokens", Spec{MaxSteps: 16, MaxRequests: 64, MaxTokens: 20}, always("a"), 2, "max_tokens of 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeRecord{script: tt.script, now: time.Unix(1000, 0)}
			o, err := f.runner(tt.spec).Run(context.Background(), State{})
			if err != nil {
				t.Fatal(err)
			}
			if o.Kind != Failed || o.Err.Code != CodeBudgetExceeded || !strings.Contains(o.Err.Message, tt.wantIn) {
				t.Fatalf("got %+v (%v), want %s containing %q", o, o.Err, CodeBudgetExceeded, tt.wantIn)
			}
			if len(f.upstream) != tt.wantUpstream {
				t.Fatalf("upstream requests: got %d, want %d", len(f.upstream), tt.wantUpstream)
			}
			if o.State.Usage.TotalTokens != int64(15*tt.wantUpstream) {
				t.Fatalf("usage kept for the line: got %+v", o.State.Usage)
			}
		})
	}
}

func TestRunRejectedRequestsComeBackAs400(t *testing.T) {
	t.Parallel()
	f := &fakeRecord{now: time.Unix(1000, 0)}
	f.script = func(ev Event) string {
		if ev.Step == 0 {
			return `{"state":"continue","requests":[` + req("ok") + `,{"id":"other","body":{"model":"gpt-5"}},{"id":"s","body":{"model":"m","stream":true}}]}`
		}
		return `{"state":"completed","output":{}}`
	}
	o, err := f.runner(Spec{}).Run(context.Background(), State{})
	if err != nil || o.Kind != Completed {
		t.Fatalf("got %+v, %v", o, err)
	}
	rs := listResults(f.events[1].Results)
	if len(rs) != 3 || rs[0].StatusCode != 200 || rs[1].StatusCode != 400 || rs[1].ID != "other" || rs[2].StatusCode != 400 || len(f.upstream) != 1 {
		t.Fatalf("results: got %+v, upstream %v", rs, f.upstream)
	}
	if o.State.Requests != 3 {
		t.Fatalf("requests counted: got %d, want 3 (rejected ones count against max_requests)", o.State.Requests)
	}
}

func TestRunWaitAndResume(t *testing.T) {
	t.Parallel()
	f := &fakeRecord{now: time.Unix(1000, 0)}
	f.script = func(ev Event) string {
		switch ev.Step {
		case 0:
			return `{"state":"wait","seconds":30}`
		case 1:
			if ev.Event != EventResults {
				return `{"state":"failed"}`
			}
			return cont("a")
		}
		return `{"state":"completed","output":{"n":1}}`
	}
	r := f.runner(Spec{})
	o, err := r.Run(context.Background(), State{})
	if err != nil || o.Kind != Waiting || !o.Until.Equal(time.Unix(1030, 0)) || r.Saved != 1 {
		t.Fatalf("got %+v, %v; want Waiting until +30 s after one checkpoint", o, err)
	}
	// Delivered early: still waiting, nothing sent.
	f.now = time.Unix(1010, 0)
	if o, err = f.runner(Spec{}).Run(context.Background(), f.saved[0]); err != nil || o.Kind != Waiting || len(f.events) != 1 {
		t.Fatalf("early: got %+v, %v after %d events", o, err, len(f.events))
	}
	f.now = time.Unix(1031, 0)
	o, err = f.runner(Spec{}).Run(context.Background(), f.saved[0])
	if err != nil || o.Kind != Completed {
		t.Fatalf("resumed: got %+v, %v", o, err)
	}
	if ev := f.events[1]; ev.Step != 1 || ev.Event != EventResults || ev.Results.Len() != 0 {
		t.Fatalf("the event after a wait: got %+v", ev)
	}
}

func TestRunResumesAtItsCheckpoint(t *testing.T) {
	t.Parallel()
	f := &fakeRecord{now: time.Unix(1000, 0)}
	f.script = func(ev Event) string {
		if ev.Step == 1 {
			return cont("summary")
		}
		return `{"state":"completed","output":{}}`
	}
	// Saved after step 1 by an executor that then died.
	cp := State{Step: 1, Requests: 3, Usage: Usage{30, 15, 45}, Results: mustResults([]Result{{ID: "a", CustomID: "a", StatusCode: 200, Body: json.RawMessage(`{}`)}})}
	o, err := f.runner(Spec{}).Run(context.Background(), cp)
	if err != nil || o.Kind != Completed {
		t.Fatalf("got %+v, %v", o, err)
	}
	if first := f.events[0]; first.Step != 1 || first.EventID != EventID("batch_1:rec", 1) || first.Results.Len() != 1 {
		t.Fatalf("the first event on resume: got %+v, want step 1's results again with its event id", first)
	}
	if len(f.upstream) != 1 || o.State.Usage != (Usage{40, 20, 60}) || o.State.Requests != 4 {
		t.Fatalf("upstream %v, state %+v: only the new step may run, usage counted once", f.upstream, o.State)
	}
}

func TestRunStopsYieldsAndKeepsCutSteps(t *testing.T) {
	t.Parallel()
	t.Run("stop before any event", func(t *testing.T) {
		t.Parallel()
		f := &fakeRecord{script: func(Event) string { return cont("a") }}
		r := f.runner(Spec{})
		r.Stop = func(context.Context) (*Error, error) {
			return &Error{Code: "batch_cancelled", Message: "cancelled"}, nil
		}
		o, err := r.Run(context.Background(), State{})
		if err != nil || o.Kind != Failed || o.Err.Code != "batch_cancelled" || len(f.events) != 0 {
			t.Fatalf("got %+v, %v after %d events", o, err, len(f.events))
		}
	})
	t.Run("a stop that cannot be read sends nothing", func(t *testing.T) {
		t.Parallel()
		f := &fakeRecord{script: func(Event) string { return cont("a") }}
		r := f.runner(Spec{})
		r.Stop = func(context.Context) (*Error, error) { return nil, errors.New("budget unreadable") }
		if _, err := r.Run(context.Background(), State{}); err == nil || len(f.events) != 0 {
			t.Fatalf("got %v after %d events; want the error, no event sent", err, len(f.events))
		}
	})
	t.Run("yield after progress only", func(t *testing.T) {
		t.Parallel()
		f := &fakeRecord{script: func(Event) string { return cont("a") }}
		r := f.runner(Spec{})
		r.Yield = func() bool { return true }
		o, err := r.Run(context.Background(), State{})
		if err != nil || o.Kind != Yielded || len(f.events) != 1 || r.Saved != 1 || o.State.Step != 1 {
			t.Fatalf("got %+v, %v after %d events", o, err, len(f.events))
		}
	})
	t.Run("a step cut short is not saved", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		f := &fakeRecord{script: func(Event) string { return cont("a") }}
		r := f.runner(Spec{})
		r.Exec = func(_ context.Context, _ []Call, done func(int, inference.Result)) {
			cancel()
			done(0, inference.Result{ErrCode: inference.CodeRequestCancelled})
		}
		_, err := r.Run(ctx, State{})
		if !errors.Is(err, context.Canceled) || r.Saved != 0 || len(f.saved) != 0 {
			t.Fatalf("got %v with %d checkpoints", err, len(f.saved))
		}
	})
	t.Run("a callback failure ends the record", func(t *testing.T) {
		t.Parallel()
		f := &fakeRecord{}
		r := f.runner(Spec{})
		r.Call = func(context.Context, Spec, Event) (Answer, error) {
			return Answer{}, &Error{Code: CodeCallbackUnreachable, Message: "down"}
		}
		o, err := r.Run(context.Background(), State{})
		if err != nil || o.Kind != Failed || o.Err.Code != CodeCallbackUnreachable {
			t.Fatalf("got %+v, %v", o, err)
		}
	})
}

// A finished request that takes the record past max_tokens cancels the
// step's others: they come back unbilled, the step is checkpointed with
// what finished, and the record fails before its next event.
func TestRunTokenBudgetCancelsTheStep(t *testing.T) {
	t.Parallel()
	f := &fakeRecord{now: time.Unix(1000, 0)}
	f.script = func(ev Event) string { return cont("a", "b", "c", "d") }
	r := f.runner(Spec{MaxSteps: DefaultMaxSteps, MaxRequests: DefaultMaxRequests, MaxTokens: 10})
	cancelled := 0
	r.Exec = func(ctx context.Context, calls []Call, done func(int, inference.Result)) {
		for i := range calls {
			if ctx.Err() != nil {
				cancelled++
				done(i, inference.Result{ErrCode: inference.CodeRequestCancelled, Model: "m"})
				continue
			}
			done(i, inference.Result{StatusCode: 200, Body: json.RawMessage(`{}`), Model: "m",
				Usage: inference.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15}})
		}
	}
	o, err := r.Run(context.Background(), State{})
	if err != nil || o.Kind != Failed || o.Err.Code != CodeBudgetExceeded {
		t.Fatalf("got %+v, %v; want workflow_budget_exceeded", o, err)
	}
	if cancelled != 3 || o.State.Usage.TotalTokens != 15 || len(f.saved) != 1 || f.saved[0].Usage.TotalTokens != 15 || len(f.events) != 1 {
		t.Fatalf("cancelled %d, usage %+v, saved %d, events %d; want 3 cancelled, the first's 15 tokens saved, the start event only",
			cancelled, o.State.Usage, len(f.saved), len(f.events))
	}
}
