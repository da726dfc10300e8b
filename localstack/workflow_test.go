package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/govern"
	"github.com/relaybatch/relay/internal/lambdasqs"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// Workflow records (docs/api.md "Workflow records") against a callback server in the test, on
// loopback (the local runtime's webhook policy allows it).

// wfEvent is an event as the callback received it.
type wfEvent struct {
	EventID    string          `json:"event_id"`
	Event      string          `json:"event"`
	WorkflowID string          `json:"workflow_id"`
	RecordID   string          `json:"record_id"`
	Step       int             `json:"step"`
	Attempt    int             `json:"attempt"`
	Context    json.RawMessage `json:"context"`
	Results    *[]wfResult     `json:"results"`
	auth       string
}

type wfResult struct {
	ID         string          `json:"id"`
	CustomID   string          `json:"custom_id"`
	StageID    *string         `json:"stage_id"`
	Attempt    *int            `json:"attempt"`
	StatusCode int             `json:"status_code"`
	Body       json.RawMessage `json:"body"`
	Usage      struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

func (e wfEvent) results() []wfResult {
	if e.Results == nil {
		return nil
	}
	return *e.Results
}

// wfCallback is a workflow callback: answer says what to reply to each event.
type wfCallback struct {
	*httptest.Server
	mu     sync.Mutex
	events []wfEvent
}

func newWFCallback(t *testing.T, answer func(ev wfEvent) (int, string)) *wfCallback {
	t.Helper()
	cb := &wfCallback{}
	cb.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var ev wfEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Errorf("undecodable event %s: %v", data, err)
		}
		ev.auth = r.Header.Get("Authorization")
		cb.mu.Lock()
		cb.events = append(cb.events, ev)
		cb.mu.Unlock()
		status, body := answer(ev)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(cb.Close)
	return cb
}

// of returns the events of one record, in the order they arrived.
func (cb *wfCallback) of(record string) []wfEvent {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	var evs []wfEvent
	for _, ev := range cb.events {
		if ev.RecordID == record {
			evs = append(evs, ev)
		}
	}
	return evs
}

// tokens sums the upstream usage the callback was told about.
func (cb *wfCallback) tokens() (in, out int64) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	seen := map[string]bool{} // a re-sent event carries the same results
	for _, ev := range cb.events {
		if seen[ev.EventID] {
			continue
		}
		seen[ev.EventID] = true
		for _, r := range ev.results() {
			in += r.Usage.InputTokens
			out += r.Usage.OutputTokens
		}
	}
	return in, out
}

type wfReq struct{ id, content, model string }

// wfContinue is a continue answer running chat completions.
func wfContinue(reqs ...wfReq) string {
	var rs []map[string]any
	for _, q := range reqs {
		body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": q.content}}}
		if q.model != "-" {
			body["model"] = "gpt-4o-mini"
			if q.model != "" {
				body["model"] = q.model
			}
		}
		rs = append(rs, map[string]any{"id": q.id, "custom_id": q.id, "body": body})
	}
	b, _ := json.Marshal(map[string]any{"state": "continue", "requests": rs})
	return string(b)
}

// wfLine is an input row carrying relay.workflow, with an authorization
// unless wf names its own (nil: none).
func wfLine(id string, wf map[string]any) []byte {
	if _, ok := wf["authorization"]; !ok {
		wf = maps.Clone(wf)
		wf["authorization"] = "Bearer wf-test"
	}
	line, _ := json.Marshal(map[string]any{"custom_id": id, "method": "POST", "url": "/v1/chat/completions",
		"body": map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": "workflow " + id}},
			"relay": map[string]any{"workflow": wf}}})
	return append(line, '\n')
}

func TestWorkflowContractSummary(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		switch ev.Step {
		case 0:
			return 200, wfContinue(wfReq{id: "payment", content: "extract the payment terms"},
				wfReq{id: "shipping", content: "extract the shipping address"}, wfReq{id: "refund", content: "extract the refund policy"})
		case 1:
			return 200, wfContinue(wfReq{id: "summary", content: "summarize payment shipping and refund"})
		}
		return 200, `{"state":"completed","output":{"summary":"terms, address and policy","usage":{"bogus":1}}}`
	})
	var in bytes.Buffer
	in.Write(jsonlRows([]row{{id: "before", content: "a plain row"}}))
	in.Write(wfLine("contract-7", map[string]any{"url": cb.URL + "/hook", "authorization": "Bearer wf-secret", "context": map[string]any{"ticket": 7}}))
	in.Write(jsonlRows([]row{{id: "after", content: "another plain row"}}))
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf.jsonl", in.Bytes()).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	out, _ := checkAccounting(t, rt, c, key, b, []string{"before", "contract-7", "after"})

	evs := cb.of("contract-7")
	if len(evs) != 3 {
		t.Fatalf("the callback got %d events, want start and two results: %+v", len(evs), evs)
	}
	start, first, second := evs[0], evs[1], evs[2]
	if start.Event != "start" || start.Step != 0 || start.Attempt != 1 || start.WorkflowID != b.ID+":contract-7" ||
		string(start.Context) != `{"ticket":7}` || start.auth != "Bearer wf-secret" || !strings.HasPrefix(start.EventID, "wf_evt_") || start.Results != nil {
		t.Errorf("start event: got %+v", start)
	}
	if first.Event != "results" || first.Step != 1 || len(first.results()) != 3 || second.Step != 2 || len(second.results()) != 1 {
		t.Fatalf("results events: got %+v then %+v", first, second)
	}
	for i, id := range []string{"payment", "shipping", "refund"} {
		r := first.results()[i]
		if r.ID != id || r.CustomID != id || r.StatusCode != 200 || !strings.Contains(string(r.Body), "echo: extract the") || r.Usage.InputTokens == 0 {
			t.Errorf("result %d: got %+v, want %s answered, in the order asked", i, r, id)
		}
		if r.StageID == nil || *r.StageID != "step-1" || r.Attempt == nil || *r.Attempt != 1 {
			t.Errorf("result %d: stage_id %v, attempt %v; want step-1, 1", i, r.StageID, r.Attempt)
		}
	}
	if r := second.results()[0]; r.ID != "summary" || r.StatusCode != 200 || r.StageID == nil || *r.StageID != "step-2" || r.Attempt == nil || *r.Attempt != 1 {
		t.Errorf("summary result: got %+v, want stage_id step-2, attempt 1", r)
	}
	if ids := map[string]bool{start.EventID: true, first.EventID: true, second.EventID: true}; len(ids) != 3 {
		t.Errorf("event ids are not distinct per step: %s %s %s", start.EventID, first.EventID, second.EventID)
	}

	// The output is the row's body, with the usage of its four requests.
	l := out["contract-7"]
	var body struct {
		Summary string `json:"summary"`
		Usage   struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			TotalTokens      int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	json.Unmarshal(l.Response.Body, &body)
	wantIn, wantOut := cb.tokens()
	if l.Response.StatusCode != 200 || l.Error != nil || body.Summary != "terms, address and policy" || body.Usage.PromptTokens != wantIn ||
		body.Usage.CompletionTokens != wantOut || body.Usage.TotalTokens != wantIn+wantOut {
		t.Fatalf("output line: got %+v %s, want usage %d+%d", l, l.Response.Body, wantIn, wantOut)
	}
	if n := rt.Mock.Stats().Requests; n != 4+2 {
		t.Fatalf("upstream requests: got %d, want 4 for the workflow and 2 plain rows", n)
	}
	// The record had a chunk of its own; the plain rows on either side of
	// it share one (docs/design.md "Chunks").
	chunks, err := rt.App.Store.Chunks(context.Background(), b.ID)
	if err != nil || len(chunks) != 2 || chunks[1].Rows != 1 || chunks[1].FirstRow != 1 || chunks[0].Rows != 2 || chunks[0].Row(1) != 2 {
		t.Fatalf("chunks: got %+v, %v", chunks, err)
	}
}

func TestWorkflowFailures(t *testing.T) {
	t.Parallel()
	rt := runtime(t, func(o *localrun.Options) {
		o.Wire = func(a *app.App) {
			a.Workflows.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
		}
	})
	c, key := client(t, rt, "acme")
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		n := ev.Step
		switch ev.RecordID {
		case "steps": // one request per step, for ever
			return 200, wfContinue(wfReq{id: fmt.Sprint("s", n), content: fmt.Sprint("steps step ", n)})
		case "requests": // two per step
			return 200, wfContinue(wfReq{id: fmt.Sprint("a", n), content: fmt.Sprint("requests a ", n)}, wfReq{id: fmt.Sprint("b", n), content: fmt.Sprint("requests b ", n)})
		case "tokens":
			return 200, wfContinue(wfReq{id: fmt.Sprint("t", n), content: fmt.Sprint("a request of many many words ", n)})
		case "unreachable":
			return 500, `{"error":"down"}`
		case "invalid-answer":
			return 200, `{"state":"done","output":{}}`
		case "rejected":
			return 401, `{"error":"who are you"}`
		case "failed-with-code":
			return 200, `{"state":"failed","error":{"message":"the order is gone","code":"order_missing"}}`
		case "failed":
			return 200, `{"state":"failed","error":{"message":"cannot proceed"}}`
		}
		return 500, ""
	})
	wf := func(extra map[string]any) map[string]any {
		m := map[string]any{"url": cb.URL}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	want := []struct {
		id       string
		wf       map[string]any
		code     string
		messages string
		results  int // results the callback got back, in all
	}{
		{"steps", wf(map[string]any{"max_steps": 2}), "workflow_budget_exceeded", "max_steps is 2", 2},
		{"requests", wf(map[string]any{"max_requests": 3}), "workflow_budget_exceeded", "max_requests is 3", 2},
		{"tokens", wf(map[string]any{"max_tokens": 5}), "workflow_budget_exceeded", "max_tokens of 5", 0},
		{"unreachable", wf(nil), "workflow_callback_unreachable", "after 4 attempts", 0},
		{"invalid-answer", wf(nil), "workflow_invalid_response", `state "done"`, 0},
		{"rejected", wf(nil), "workflow_callback_rejected", "401", 0},
		{"failed-with-code", wf(nil), "workflow_failed", "order_missing: the order is gone", 0},
		{"failed", wf(nil), "workflow_failed", "cannot proceed", 0},
		{"bad-url", map[string]any{"url": "ftp://" + strings.TrimPrefix(cb.URL, "http://")}, "invalid_workflow", "http(s)", 0},
		{"bad-budget", wf(map[string]any{"max_steps": "many"}), "invalid_workflow", "max_steps", 0},
		{"no-auth", wf(map[string]any{"authorization": nil}), "invalid_workflow", "relay.workflow.authorization is required", 0},
		{"empty-auth", wf(map[string]any{"authorization": ""}), "invalid_workflow", "relay.workflow.authorization is required", 0},
	}
	var in bytes.Buffer
	var ids []string
	for _, w := range want {
		in.Write(wfLine(w.id, w.wf))
		ids = append(ids, w.id)
	}
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-fail.jsonl", in.Bytes()).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	_, errs := checkInvariant(t, c, b, ids)
	for _, w := range want {
		l := errs[w.id]
		if l.Response != nil || l.Error == nil || l.Error.Code != w.code || !strings.Contains(l.Error.Message, w.messages) {
			t.Errorf("%s: got %+v, want error %s containing %q", w.id, l.Error, w.code, w.messages)
		}
		got := 0
		for _, ev := range cb.of(w.id) {
			got += len(ev.results())
		}
		if got != w.results {
			t.Errorf("%s: the callback got %d results, want %d", w.id, got, w.results)
		}
	}
	// Exactly four attempts of the one start event.
	un := cb.of("unreachable")
	if len(un) != 4 {
		t.Fatalf("unreachable callback: got %d attempts, want 4", len(un))
	}
	for i, ev := range un {
		if ev.Attempt != i+1 || ev.EventID != un[0].EventID || ev.Event != "start" {
			t.Errorf("attempt %d: got %+v", i+1, ev)
		}
	}
	if n := len(cb.of("bad-url")) + len(cb.of("bad-budget")) + len(cb.of("no-auth")) + len(cb.of("empty-auth")); n != 0 {
		t.Errorf("invalid workflows reached the callback %d times", n)
	}
	// Requests of failed records were billed, once: the batch's usage is
	// what the callback saw plus the tokens record's last step (which broke
	// the budget, so no results event carried it), the daily aggregates say
	// the same, and the upstream saw each request once.
	var got struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+b.ID), &got)
	var agg struct {
		Data []struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"data"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/usage?source=batch"), &agg)
	seenIn, seenOut := cb.tokens()
	if got.Usage.TotalTokens <= seenIn+seenOut || len(agg.Data) != 1 || agg.Data[0].TotalTokens != got.Usage.TotalTokens {
		t.Errorf("usage: batch %d, aggregates %+v; want more than the %d the callback saw, and the same in both",
			got.Usage.TotalTokens, agg.Data, seenIn+seenOut)
	}
	if n := rt.Mock.Stats().Requests; n != 2+2+1 {
		t.Errorf("upstream requests: got %d, want 5 (steps 2, requests 2, tokens 1)", n)
	}
	// Each failed record's error line carries what its requests used, and
	// the batch's usage is theirs summed.
	var lines int64
	for _, w := range want {
		l := errs[w.id]
		spent := w.id == "steps" || w.id == "requests" || w.id == "tokens"
		switch {
		case spent && (l.Usage == nil || l.Usage.TotalTokens == 0 || l.Usage.TotalTokens != l.Usage.PromptTokens+l.Usage.CompletionTokens):
			t.Errorf("%s: error line usage %+v, want the tokens its requests used", w.id, l.Usage)
		case !spent && l.Usage != nil && l.Usage.TotalTokens != 0:
			t.Errorf("%s: error line usage %+v, want none: it ran no request", w.id, l.Usage)
		}
		if l.Usage != nil {
			lines += l.Usage.TotalTokens
		}
	}
	if lines != got.Usage.TotalTokens {
		t.Errorf("usage: the error lines carry %d tokens, the batch counts %d", lines, got.Usage.TotalTokens)
	}
}

func TestWorkflowOtherModelAndWait(t *testing.T) {
	t.Parallel()
	var rt *localrun.Runtime
	var invocations atomic.Int64
	var parkedInflight, parkedSlots atomic.Int64
	parkedInflight.Store(-1)
	rt = runtime(t, func(o *localrun.Options) {
		o.OnInvoke = func(fn string, ev events.SQSEvent) error {
			if fn != "executor" {
				return nil
			}
			if invocations.Add(1) == 2 {
				// The record answered wait: its message came back after the
				// delay, and until now it held no capacity.
				m := chunkOf(ev)
				ctx := context.Background()
				n, _ := rt.App.Store.InFlight(ctx, "gpt-4o-mini")
				ch, _ := rt.App.Store.GetChunk(ctx, m.Batch, m.Chunk)
				parkedInflight.Store(int64(n))
				parkedSlots.Store(int64(ch.Slots))
			}
			return nil
		}
	})
	c, key := client(t, rt, "acme")
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		switch ev.Step {
		case 0:
			return 200, wfContinue(wfReq{id: "mine", content: "on the record's model"},
				wfReq{id: "theirs", content: "on another model", model: "gpt-4o-mini-backup"},
				wfReq{id: "default", content: "no model given", model: "-"})
		case 1:
			return 200, `{"state":"wait","seconds":1}`
		}
		return 200, `{"state":"completed","output":{"done":true}}`
	})
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-wait.jsonl", wfLine("waiter", map[string]any{"url": cb.URL})).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	out, _ := checkAccounting(t, rt, c, key, b, []string{"waiter"})
	if l := out["waiter"]; l.Response == nil || l.Response.StatusCode != 200 || !strings.Contains(string(l.Response.Body), `"done":true`) {
		t.Fatalf("output line: got %+v", l)
	}
	evs := cb.of("waiter")
	if len(evs) != 3 {
		t.Fatalf("events: got %+v, want start, results, results after the wait", evs)
	}
	rs := evs[1].results()
	if len(rs) != 3 || rs[0].StatusCode != 200 || rs[1].StatusCode != 400 || rs[1].ID != "theirs" ||
		!strings.Contains(string(rs[1].Body), "model_not_allowed") || rs[2].StatusCode != 200 {
		t.Fatalf("step 1 results: got %+v", rs)
	}
	if r := rs[1]; r.StageID == nil || *r.StageID != "step-1" || r.Attempt == nil || *r.Attempt != 0 {
		t.Fatalf("the request not sent: stage_id %v, attempt %v; want step-1, 0", r.StageID, r.Attempt)
	}
	if after := evs[2]; after.Step != 2 || after.Event != "results" || after.Results == nil || len(after.results()) != 0 {
		t.Fatalf("the event after the wait: got %+v", after)
	}
	if n := rt.Mock.Stats().Requests; n != 2 {
		t.Fatalf("upstream requests: got %d, want 2 (the other model's request is not sent)", n)
	}
	if invocations.Load() < 2 || parkedInflight.Load() != 0 || parkedSlots.Load() != 0 {
		t.Fatalf("the waiting record: %d invocations, in-flight %d and slots %d while parked; want ≥ 2 invocations, nothing held",
			invocations.Load(), parkedInflight.Load(), parkedSlots.Load())
	}
	if n, _ := rt.App.Store.InFlight(context.Background(), "gpt-4o-mini"); n != 0 {
		t.Fatalf("capacity left taken after the batch: %d", n)
	}
}

// quickWorkRetry makes a failed work message come back within seconds,
// with room enough in one invocation for a few steps.
func quickWorkRetry(o *localrun.Options) {
	queueTimes(o, resources.Work, 12*time.Second, 10*time.Second)
}

func TestWorkflowCrashBetweenStepsResumes(t *testing.T) {
	t.Parallel()
	var crashed, offloaded atomic.Bool
	rt := runtime(t, quickWorkRetry, func(o *localrun.Options) {
		o.Wire = func(a *app.App) {
			a.Workflows.AfterCheckpoint = func(c batch.Chunk, step int) error {
				if step == 1 && crashed.CompareAndSwap(false, true) {
					keys, _ := a.Blobs.List(context.Background(), batch.PartsPrefix(c.Tenant, c.Batch))
					offloaded.Store(len(keys) == 1 && strings.Contains(keys[0], "step-0001"))
					return errors.New("simulated crash after step 1's checkpoint")
				}
				return nil
			}
		}
	})
	c, key := client(t, rt, "acme")
	// Step 1's results are bigger than a DynamoDB item: the checkpoint
	// keeps them in S3, and the resumed executor reads them back.
	big := strings.Repeat("word ", 25_000)
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		switch ev.Step {
		case 0:
			return 200, wfContinue(wfReq{id: "one", content: "one " + big}, wfReq{id: "two", content: "two " + big}, wfReq{id: "three", content: "three " + big})
		case 1:
			return 200, wfContinue(wfReq{id: "summary", content: "sum it up"})
		}
		return 200, `{"state":"completed","output":{"ok":true}}`
	})
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-crash.jsonl", wfLine("crashy", map[string]any{"url": cb.URL})).ID).ID)
	if !crashed.Load() || !offloaded.Load() || b.Status != "completed" {
		t.Fatalf("crashed=%v results in S3=%v status=%s", crashed.Load(), offloaded.Load(), b.Status)
	}
	out, _ := checkAccounting(t, rt, c, key, b, []string{"crashy"})
	if n := rt.Mock.Stats().Requests; n != 4 {
		t.Fatalf("upstream requests: got %d, want 4: the resumed record must not re-run step 1", n)
	}
	evs := cb.of("crashy")
	steps := map[int]string{}
	for _, ev := range evs {
		if id, ok := steps[ev.Step]; ok && id != ev.EventID {
			t.Fatalf("step %d was sent as two different events (%s, %s)", ev.Step, id, ev.EventID)
		}
		steps[ev.Step] = ev.EventID
	}
	if len(evs) != 3 || len(steps) != 3 {
		t.Fatalf("events: got %d for steps %v, want each of start, results 1, results 2 once", len(evs), steps)
	}
	if rs := evs[1].results(); len(rs) != 3 || rs[2].ID != "three" || !strings.Contains(string(rs[2].Body), "echo: three word") {
		t.Fatalf("step 1 results after the resume: got %d results", len(rs))
	}
	var body struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	json.Unmarshal(out["crashy"].Response.Body, &body)
	in, o := cb.tokens()
	if body.Usage.TotalTokens != in+o || b.Usage.TotalTokens != in+o {
		t.Fatalf("usage: line %d, batch %d; want %d, counted once", body.Usage.TotalTokens, b.Usage.TotalTokens, in+o)
	}
}

func TestWorkflowDuplicateDelivery(t *testing.T) {
	t.Parallel()
	var rt *localrun.Runtime
	var once sync.Once
	var wg sync.WaitGroup
	rt = runtime(t, func(o *localrun.Options) {
		o.OnInvoke = func(fn string, ev events.SQSEvent) error {
			if fn == "executor" {
				// The record's work message, delivered twice at once: the
				// lease lets one executor drive it; the other steps aside.
				once.Do(func() {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if failed, _ := rt.App.Engine.Execute(context.Background(), lambdasqs.Deliveries(ev)); len(failed) > 0 {
							t.Errorf("duplicate run failed: %v", failed)
						}
					}()
				})
			}
			return nil
		}
	})
	c, key := client(t, rt, "acme")
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		switch ev.Step {
		case 0:
			return 200, wfContinue(wfReq{id: "x", content: "dup x"}, wfReq{id: "y", content: "dup y"})
		case 1:
			return 200, wfContinue(wfReq{id: "z", content: "dup z"})
		}
		return 200, `{"state":"completed","output":{}}`
	})
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-dup.jsonl", wfLine("dup", map[string]any{"url": cb.URL})).ID).ID)
	wg.Wait()
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	checkAccounting(t, rt, c, key, b, []string{"dup"})
	if n := rt.Mock.Stats().Requests; n != 3 {
		t.Fatalf("upstream requests: got %d, want 3: two executors must not both run a step", n)
	}
	if evs := cb.of("dup"); len(evs) != 3 {
		t.Fatalf("events: got %d, want each of the 3 once", len(evs))
	}
}

// A record's spend counts against its tenant's budget as each step is
// checkpointed (docs/design.md "Governance"): with a budget of three tokens,
// the record's first step spends past it, so the record never sends its
// next event and fails budget_exceeded, whether it goes on in the same
// invocation or resumes in another after a crash; either way the step's
// tokens are in the tenant's usage and the batch's, once.
func TestWorkflowSpendCountsAgainstTheBudget(t *testing.T) {
	t.Parallel()
	var crashed atomic.Bool
	rt := runtime(t, quickWorkRetry, func(o *localrun.Options) {
		o.Wire = func(a *app.App) {
			a.Workflows.AfterCheckpoint = func(c batch.Chunk, step int) error {
				if c.Tenant == "wf-resumed" && crashed.CompareAndSwap(false, true) {
					return errors.New("simulated crash after step 1's checkpoint")
				}
				return nil
			}
		}
	})
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		if ev.Step == 0 {
			return 200, wfContinue(wfReq{id: "q", content: "a step that spends the budget " + ev.RecordID})
		}
		return 200, `{"state":"completed","output":{"ok":true}}`
	})
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, tenant := range []string{"wf-same-run", "wf-resumed"} {
		wg.Go(func() {
			// 3 tokens: the record's estimate (its first request's 3 words at
			// the mock) fits, so the create is not refused (docs/api.md
			// "Budgets, revocation and allow-lists", reservations).
			if err := rt.App.Store.PutBudget(ctx, tenant, store.Budget{MonthlyTokens: 3}); err != nil {
				t.Error(err)
				return
			}
			c, key := client(t, rt, tenant)
			b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-spend.jsonl", wfLine(tenant, map[string]any{"url": cb.URL})).ID).ID)
			_, errs := checkInvariant(t, c, b, []string{tenant})
			if l := errs[tenant]; l.Error == nil || l.Error.Code != govern.CodeBudgetExceeded {
				t.Errorf("%s: line %+v, want budget_exceeded", tenant, l.Error)
			}
			if evs := cb.of(tenant); len(evs) != 1 || evs[0].Event != "start" {
				t.Errorf("%s: the callback got %d events, want the start event only: the spent budget stops the next one", tenant, len(evs))
			}
			var agg struct {
				Data []struct {
					TotalTokens int64 `json:"total_tokens"`
				} `json:"data"`
			}
			json.Unmarshal(rawGet(t, rt, key, "/v1/usage"), &agg)
			var spent int64
			for _, d := range agg.Data {
				spent += d.TotalTokens
			}
			if spent == 0 || spent != b.Usage.TotalTokens {
				t.Errorf("%s: usage %d tokens, batch %d; want the step's tokens in both", tenant, spent, b.Usage.TotalTokens)
			}
		})
	}
	wg.Wait()
	if !crashed.Load() {
		t.Fatal("the resumed record never crashed")
	}
	if n := rt.Mock.Stats().Requests; n != 2 {
		t.Fatalf("upstream requests: got %d, want 2 (one step of each record, never re-run)", n)
	}
}

// A record whose relay.workflow is invalid is refused by the plan, before
// any capacity is taken (docs/api.md "Workflow records"): its chunk runs
// alone, holding no slot of its model, to its invalid_workflow line; the
// callback and the upstream never hear of it, and the model's other rows,
// a valid record among them, run as ever.
func TestWorkflowInvalidRecordHoldsNoCapacity(t *testing.T) {
	t.Parallel()
	var rt *localrun.Runtime
	var mu sync.Mutex
	slots := map[int][]int{} // first row → slots its chunk held when its message came
	rt = runtime(t, func(o *localrun.Options) {
		o.OnInvoke = func(fn string, ev events.SQSEvent) error {
			if fn != "executor" {
				return nil
			}
			for _, m := range messagesOf(ev) {
				ch, err := rt.App.Store.GetChunk(context.Background(), m.Batch, m.Chunk)
				if err == nil && ch.Rows == 1 {
					mu.Lock()
					slots[ch.FirstRow] = append(slots[ch.FirstRow], ch.Slots)
					mu.Unlock()
				}
			}
			return nil
		}
	})
	c, key := client(t, rt, "acme")
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		if ev.Step == 0 {
			return 200, wfContinue(wfReq{id: "q", content: "the valid record's request"})
		}
		return 200, `{"state":"completed","output":{"ok":true}}`
	})
	var in bytes.Buffer
	in.Write(jsonlRows([]row{{id: "plain-a", content: "plain row a"}}))
	in.Write(wfLine("no-auth", map[string]any{"url": cb.URL, "authorization": nil})) // row 1
	in.Write(wfLine("valid", map[string]any{"url": cb.URL}))                         // row 2
	in.Write(jsonlRows([]row{{id: "plain-b", content: "plain row b"}}))              // row 3
	in.Write(wfLine("bad-range", map[string]any{"url": cb.URL, "max_steps": 0}))     // row 4
	in.Write(wfLine("bad-url", map[string]any{"url": "ftp://cb.example.com/x"}))     // row 5
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-invalid.jsonl", in.Bytes()).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	out, errs := checkAccounting(t, rt, c, key, b, []string{"plain-a", "no-auth", "valid", "plain-b", "bad-range", "bad-url"})
	for id, want := range map[string]string{"no-auth": "authorization is required", "bad-range": "max_steps", "bad-url": "http(s)"} {
		if l := errs[id]; l.Error == nil || l.Error.Code != "invalid_workflow" || !strings.Contains(l.Error.Message, want) {
			t.Errorf("%s: got %+v, want invalid_workflow containing %q", id, l.Error, want)
		}
		if n := len(cb.of(id)); n != 0 {
			t.Errorf("%s: the callback got %d events, want none", id, n)
		}
	}
	if l := out["valid"]; l.Response == nil || l.Response.StatusCode != 200 {
		t.Errorf("valid record: got %+v", l)
	}
	if n := rt.Mock.Stats().Requests; n != 3 {
		t.Errorf("upstream requests: got %d, want 3 (two plain rows, the valid record's one)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, row := range []int{1, 4, 5} {
		if len(slots[row]) == 0 || slices.Max(slots[row]) != 0 {
			t.Errorf("row %d: its chunk held %v slots when its messages came, want none", row, slots[row])
		}
	}
}

// A token budget passed mid-step (docs/api.md "Workflow records"): the
// step's first answer takes the record past max_tokens, so the seven
// requests still running are cancelled (the upstream sees each client go)
// and not billed, and the record fails workflow_budget_exceeded with the
// usage of the one that finished, well before the slow ones would end.
func TestWorkflowTokenBudgetCancelsTheStep(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		if ev.Step > 0 {
			return 200, `{"state":"completed","output":{}}`
		}
		// The first answer comes after a second, the seven slow requests in flight.
		reqs := []wfReq{{id: "first", content: "a first answer of several words [[mock:sleep=1s]]"}}
		for i := range 7 {
			reqs = append(reqs, wfReq{id: fmt.Sprint("slow-", i), content: fmt.Sprintf("slow request %d [[mock:sleep=60s]]", i)})
		}
		return 200, wfContinue(reqs...)
	})
	start := time.Now()
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-budget.jsonl", wfLine("budget", map[string]any{"url": cb.URL, "max_tokens": 5})).ID).ID)
	if took := time.Since(start); b.Status != "completed" || took > 40*time.Second {
		t.Fatalf("status %s after %s; want completed before the slow requests end", b.Status, took)
	}
	_, errs := checkInvariant(t, c, b, []string{"budget"})
	l := errs["budget"]
	if l.Error == nil || l.Error.Code != "workflow_budget_exceeded" || !strings.Contains(l.Error.Message, "max_tokens of 5") {
		t.Fatalf("line: got %+v, want workflow_budget_exceeded", l.Error)
	}
	// The mock counts a request whose client went as 499, once it sees it go.
	deadline := time.Now().Add(10 * time.Second)
	for rt.Mock.Stats().ByStatus[499] < 7 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	st := rt.Mock.Stats()
	if st.ByStatus[200] != 1 || st.ByStatus[499] != 7 {
		t.Fatalf("upstream statuses %v: want the first request answered and the 7 slow ones cancelled", st.ByStatus)
	}
	// The first request's prompt is 7 words and 1 for its message.
	if l.Usage == nil || l.Usage.PromptTokens != 8 || l.Usage.TotalTokens != 8+l.Usage.CompletionTokens || b.Usage.TotalTokens != l.Usage.TotalTokens {
		t.Fatalf("usage: line %+v, batch %d; want the first request's only", l.Usage, b.Usage.TotalTokens)
	}
	if evs := cb.of("budget"); len(evs) != 1 {
		t.Fatalf("events: got %d, want the start only", len(evs))
	}
}

// A step request past its model's call_time_limit is stopped, not retried
// and not billed, and comes back to the callback as 500 request_time_limit
// (docs/api.md "Workflow records"); a 5xx before any answer is retried.
func TestWorkflowCallTimeLimit(t *testing.T) {
	t.Parallel()
	rt := runtime(t, withModels(t, `
models:
  - {name: gpt-4o-mini, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 8, call_time_limit: 1s}
`))
	c, key := client(t, rt, "acme")
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		if ev.Step == 0 {
			return 200, wfContinue(wfReq{id: "slow", content: "a call past its limit [[mock:sleep=5s]]"},
				wfReq{id: "flaky", content: "a call failing once [[mock:fail=1]]"})
		}
		return 200, `{"state":"completed","output":{"done":true}}`
	})
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-limit.jsonl", wfLine("limited", map[string]any{"url": cb.URL})).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	checkAccounting(t, rt, c, key, b, []string{"limited"})
	evs := cb.of("limited")
	if len(evs) != 2 || len(evs[1].results()) != 2 {
		t.Fatalf("events: got %+v, want start and one results event of 2", evs)
	}
	slow, flaky := evs[1].results()[0], evs[1].results()[1]
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(slow.Body, &body)
	if slow.StatusCode != 500 || body.Error.Code != "request_time_limit" || !strings.HasPrefix(body.Error.Message, "request_time_limit") ||
		slow.Attempt == nil || *slow.Attempt != 1 || slow.Usage.InputTokens+slow.Usage.OutputTokens != 0 {
		t.Fatalf("the slow request: got %+v %s, want 500 request_time_limit after 1 attempt, no usage", slow, slow.Body)
	}
	if flaky.StatusCode != 200 || flaky.Attempt == nil || *flaky.Attempt != 2 {
		t.Fatalf("the flaky request: got %+v, want 200 after 2 attempts", flaky)
	}
	deadline := time.Now().Add(10 * time.Second)
	for rt.Mock.Stats().ByStatus[499] < 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if st := rt.Mock.Stats(); st.ByStatus[499] != 1 || st.ByStatus[500] != 1 || st.ByStatus[200] != 1 {
		t.Fatalf("upstream statuses %v: want the slow call stopped once, never again, and the flaky one's 500 then 200", st.ByStatus)
	}
	in, out := cb.tokens()
	if b.Usage.TotalTokens != in+out {
		t.Fatalf("batch usage %d, want the flaky request's %d only", b.Usage.TotalTokens, in+out)
	}
}

// A step request with relay.tool_config (docs/api.md "Workflow records"):
// the model asks for its two tools one round each, the service answers
// both from the caller's tool endpoint (with its authorization) inside the
// request's slot, and the callback gets one result: the last answer, with
// the three rounds' usage summed.
func TestWorkflowToolRoundsAreOneRequest(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	var mu sync.Mutex
	var toolCalls []string
	tools := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		mu.Lock()
		toolCalls = append(toolCalls, r.Header.Get("Authorization")+" "+string(data))
		mu.Unlock()
		io.WriteString(w, `"sunny and mild"`)
	}))
	t.Cleanup(tools.Close)
	cb := newWFCallback(t, func(ev wfEvent) (int, string) {
		if ev.Step > 0 {
			return 200, `{"state":"completed","output":{"ok":true}}`
		}
		body := map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": "plan the trip"}},
			"tools": []any{
				map[string]any{"type": "function", "function": map[string]any{"name": "weather"}},
				map[string]any{"type": "function", "function": map[string]any{"name": "traffic"}},
			},
			"relay": map[string]any{"tool_config": map[string]any{"url": tools.URL, "authorization": "Bearer tools"}}}
		b, _ := json.Marshal(map[string]any{"state": "continue", "requests": []any{map[string]any{"id": "trip", "body": body}}})
		return 200, string(b)
	})
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "wf-tools.jsonl", wfLine("tools", map[string]any{"url": cb.URL})).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	checkAccounting(t, rt, c, key, b, []string{"tools"})
	mu.Lock()
	calls := append([]string(nil), toolCalls...)
	mu.Unlock()
	if len(calls) != 2 || !strings.HasPrefix(calls[0], "Bearer tools ") || !strings.Contains(calls[0], `"weather"`) || !strings.Contains(calls[1], `"traffic"`) {
		t.Fatalf("tool endpoint calls: got %q, want weather then traffic, authorized", calls)
	}
	evs := cb.of("tools")
	if len(evs) != 2 || len(evs[1].results()) != 1 {
		t.Fatalf("events: got %+v, want start and one result", evs)
	}
	r := evs[1].results()[0]
	if r.StatusCode != 200 || !strings.Contains(string(r.Body), "echo: plan the trip") || r.Attempt == nil || *r.Attempt != 3 {
		t.Fatalf("result: got %+v %s, want the final answer after 3 rounds", r, r.Body)
	}
	if n := rt.Mock.Stats().Requests; n != 3 {
		t.Fatalf("upstream requests: got %d, want 3 rounds", n)
	}
	in, out := cb.tokens()
	if b.Usage.TotalTokens != in+out || out < 2 || b.RequestCounts.Total != 1 {
		t.Fatalf("usage: batch %d, result %d+%d, rows %d; want the rounds summed in one request", b.Usage.TotalTokens, in, out, b.RequestCounts.Total)
	}
}
