package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/aws/aws-lambda-go/lambdacontext"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func TestBatchMixedStatuses(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	rows := []row{
		{id: "ok-1", content: "fine"},
		{id: "bad-1", content: "[[mock:400]] nope"},
		{id: "flaky-1", content: "[[mock:429x=2]] later"},
		{id: "ok-2", content: "fine again"},
		{id: "fallback-1", content: "through the backup", model: "flaky-broken"},
	}
	f := upload(t, c, "mixed.jsonl", jsonlRows(rows))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status: got %s", b.Status)
	}
	out, errs := checkInvariant(t, c, b, idsOf(rows))
	// A 4xx keeps the upstream's answer and error: null, as OpenAI does.
	bad := errs["bad-1"]
	if bad.Response == nil || bad.Response.StatusCode != 400 || bad.Error != nil || !bytes.Contains(bad.Response.Body, []byte("invalid_request_error")) {
		t.Fatalf("4xx line: got %+v", bad)
	}
	// 429 twice, then a success on the same model.
	if l := out["flaky-1"]; l.Response == nil || l.Response.StatusCode != 200 || l.Fallback {
		t.Fatalf("429-then-200 line: got %+v", l)
	}
	// Every retry on flaky-broken fails; its fallback serves the row.
	fb := out["fallback-1"]
	var body struct{ Model string }
	json.Unmarshal(fb.Response.Body, &body)
	if !fb.Fallback || body.Model != "gpt-4o-mini" {
		t.Fatalf("fallback line: got fallback=%v model=%q", fb.Fallback, body.Model)
	}
	if b.RequestCounts.Completed != 4 || b.RequestCounts.Failed != 1 {
		t.Fatalf("counts: got %+v", b.RequestCounts)
	}
}

func TestBatchValidationFailure(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	data := string(jsonlRows(nRows(2, "x"))) +
		`{"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"}}` + "\n" +
		"\n" +
		`{"custom_id":"z","method":"POST","url":"/v1/chat/completions","body":{"model":"no-such-model"}}` + "\n" +
		`{"custom_id":"r0000","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"}}` + "\n"
	f := upload(t, c, "bad.jsonl", []byte(data))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != "failed" || b.FailedAt == 0 {
		t.Fatalf("status: got %s", b.Status)
	}
	want := map[int64]string{3: "missing_custom_id", 5: "model_not_found", 6: "duplicate_custom_id"}
	got := map[int64]string{}
	for _, e := range b.Errors.Data {
		got[e.Line] = e.Code
	}
	for line, code := range want {
		if got[line] != code {
			t.Errorf("line %d: got %q, want %q (errors: %+v)", line, got[line], code, b.Errors.Data)
		}
	}
	if n := rt.Mock.Stats().Requests; n != 0 {
		t.Fatalf("upstream got %d requests for an invalid batch, want 0", n)
	}
}

func TestBatchCSVAndInlineRows(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	ctx := context.Background()

	csv := upload(t, c, "prompts.csv", []byte("prompt\nfirst question\n\"second, with a comma\"\n"))
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: csv.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, option.WithJSONSet("model", "gpt-4o-mini"))
	if err != nil {
		t.Fatal(err)
	}
	b = waitBatch(t, c, b.ID)
	out, _ := checkInvariant(t, c, b, []string{"row-1", "row-2"})
	if !bytes.Contains(out["row-2"].Response.Body, []byte("echo: second, with a comma")) {
		t.Fatalf("csv row 2: got %s", out["row-2"].Response.Body)
	}

	// Inline rows; custom_id defaults to request-<index>, method and url to
	// POST and the batch's endpoint.
	reqs := []map[string]any{
		{"method": "POST", "url": "/v1/chat/completions", "body": map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": "a"}}}},
		{"custom_id": "named", "body": map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": "b"}}}},
	}
	body, _ := json.Marshal(map[string]any{"endpoint": "/v1/chat/completions", "completion_window": "24h", "requests": reqs})
	status, resp := rawDo(t, rt, key, "POST", "/v1/batches", bytes.NewReader(body))
	if status != 200 {
		t.Fatalf("inline create: %d %s", status, resp)
	}
	var created openai.Batch
	json.Unmarshal(resp, &created)
	b = waitBatch(t, c, created.ID)
	checkInvariant(t, c, b, []string{"request-0", "named"})

	// A CSV without a model is refused up front.
	_, err = c.Batches.New(ctx, openai.BatchNewParams{InputFileID: csv.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if status, body := apiErr(t, err); status != 400 || !strings.Contains(body, `"param":"model"`) {
		t.Fatalf("csv without model: got %d %s", status, body)
	}
}

func TestBatchCancelMidRun(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	rows := nRows(60, "[[mock:sleep=400ms]] slow")
	f := upload(t, c, "slow.jsonl", jsonlRows(rows))
	b := createBatch(t, c, f.ID)
	ctx := context.Background()
	for {
		got, err := c.Batches.Get(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.RequestCounts.Completed > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cb, err := c.Batches.Cancel(ctx, b.ID)
	if err != nil || cb.Status != "cancelling" || cb.CancellingAt == 0 {
		t.Fatalf("cancel: got %+v, %v", cb, err)
	}
	b = waitBatch(t, c, b.ID)
	if b.Status != "cancelled" || b.CancelledAt == 0 {
		t.Fatalf("status: got %s", b.Status)
	}
	out, errs := checkInvariant(t, c, b, idsOf(rows))
	cancelled := 0
	for _, l := range errs {
		if l.Error != nil && l.Error.Code == "batch_cancelled" {
			cancelled++
		}
	}
	if len(out) == 0 || cancelled == 0 {
		t.Fatalf("got %d finished and %d cancelled rows, want some of each", len(out), cancelled)
	}
	if _, err := c.Batches.Cancel(ctx, b.ID); apiStatus(t, err) != http.StatusConflict {
		t.Fatalf("cancel of a cancelled batch: got %v, want 409", err)
	}
}

func TestBatchPriorityAndSharedCapacity(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	ctx := context.Background()
	slow := func(name string, n int) string {
		return upload(t, c, name, jsonlRows(nRows(n, "[[mock:sleep=250ms]] "+name))).ID
	}
	withPriority := func(fileID string, p int) *openai.Batch {
		return createBatch(t, c, fileID, option.WithJSONSet("priority", p))
	}
	// gpt-4o-mini has max_concurrency 8 and a chunk takes 8 slots: one chunk
	// of this model runs at a time, so order is visible. The low batch is
	// 30 rounds of 250 ms, so on a loaded machine the high one's upload,
	// create and plan still come well before its end (at 60 rows, 2 s, it
	// once ended first in make test).
	low := withPriority(slow("low.jsonl", 240), 0)
	waitRunning(t, c, low.ID)
	high := withPriority(slow("high.jsonl", 10), 5)
	h := waitBatch(t, c, high.ID)
	l, err := c.Batches.Get(ctx, low.ID)
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != "completed" || terminal[l.Status] {
		t.Fatalf("the high-priority batch should finish while the low one still runs: high %s, low %s %+v", h.Status, l.Status, l.RequestCounts)
	}

	// Two batches of the same priority share the model: the second starts
	// before the first ends (round robin, not first come first served).
	first := withPriority(slow("a.jsonl", 50), 0)
	second := withPriority(slow("b.jsonl", 50), 0)
	// The first is read before the second: a row of the second done while
	// the first, read earlier, still ran is the proof; the first ended with
	// none of the second's rows done disproves it.
	for {
		f, _ := c.Batches.Get(ctx, first.ID)
		s, _ := c.Batches.Get(ctx, second.ID)
		if s.RequestCounts.Completed > 0 && !terminal[f.Status] {
			break
		}
		if terminal[f.Status] && s.RequestCounts.Completed == 0 {
			t.Fatalf("the first batch ended before the second started")
		}
		if terminal[f.Status] {
			break // both between two polls (a slow machine): inconclusive, let pass
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range []string{low.ID, first.ID, second.ID} {
		b := waitBatch(t, c, id)
		if b.Status != "completed" || b.RequestCounts.Completed != b.RequestCounts.Total {
			t.Fatalf("batch %s: %s %+v", id, b.Status, b.RequestCounts)
		}
	}
	if peak := rt.Mock.Stats().PeakInFlight["gpt-4o-mini"]; peak > 8 {
		t.Fatalf("peak in-flight requests to gpt-4o-mini: %d, max_concurrency is 8", peak)
	}
}

// waitRunning waits until a batch has finished at least one row.
func waitRunning(t testing.TB, c openai.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		b, err := c.Batches.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if b.RequestCounts.Completed > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("batch %s did not start", id)
}

func TestBatchRetryAndIdempotency(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	ctx := context.Background()
	rows := []row{{id: "a", content: "ok"}, {id: "b", content: "[[mock:400]] no"}, {id: "c", content: "ok too"}, {id: "d", content: "[[mock:400]] no"}}
	f := upload(t, c, "retry.jsonl", jsonlRows(rows))

	idem := option.WithHeader("Idempotency-Key", "create-once")
	b1 := createBatch(t, c, f.ID, idem)
	b2 := createBatch(t, c, f.ID, idem)
	if b1.ID != b2.ID {
		t.Fatalf("idempotent create: got %s then %s", b1.ID, b2.ID)
	}
	if page, _ := c.Batches.List(ctx, openai.BatchListParams{}); len(page.Data) != 1 {
		t.Fatalf("idempotent create made %d batches", len(page.Data))
	}
	b := waitBatch(t, c, b1.ID)
	checkInvariant(t, c, b, idsOf(rows))

	status, resp := rawDo(t, rt, key, "POST", "/v1/batches/"+b.ID+"/retry", nil)
	if status != 200 {
		t.Fatalf("retry: %d %s", status, resp)
	}
	var r struct {
		ID      string `json:"id"`
		RetryOf string `json:"retry_of"`
	}
	json.Unmarshal(resp, &r)
	if r.RetryOf != b.ID {
		t.Fatalf("retry_of: got %q", r.RetryOf)
	}
	rb := waitBatch(t, c, r.ID)
	_, errs := checkInvariant(t, c, rb, []string{"b", "d"})
	if len(errs) != 2 {
		t.Fatalf("retried batch: got %d error lines, want the 2 failed rows again", len(errs))
	}
}

func TestBatchBadRequests(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	other, _ := client(t, rt, "globex")
	ctx := context.Background()
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(3, "x")))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)

	tests := []struct {
		name, body string
		want       int
		wantIn     string
	}{
		{"malformed json", `{"input_file_id":`, 400, "malformed JSON"},
		{"wrong type", `{"input_file_id": 5, "endpoint": "/v1/chat/completions"}`, 400, "input_file_id"},
		{"bad endpoint", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/images"}`, 400, "endpoint"},
		{"bad window", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","completion_window":"48h"}`, 400, "completion_window"},
		{"unknown file", `{"input_file_id":"file-nope","endpoint":"/v1/chat/completions"}`, 400, "no such file"},
		{"too much metadata", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","metadata":{"` + strings.Repeat("k", 65) + `":"v"}}`, 400, "metadata"},
		{"bad priority", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","priority":100000}`, 400, "priority"},
		{"unknown fallback", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","fallback_model":"nope"}`, 400, "fallback_model"},
		{"both inputs", `{"input_file_id":"` + f.ID + `","endpoint":"/v1/chat/completions","requests":[{}]}`, 400, "not both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := rawDo(t, rt, key, "POST", "/v1/batches", strings.NewReader(tt.body))
			if status != tt.want || !strings.Contains(string(body), tt.wantIn) {
				t.Fatalf("got %d %s, want %d containing %q", status, body, tt.want, tt.wantIn)
			}
		})
	}
	// Another tenant cannot see, cancel or read the batch.
	if _, err := other.Batches.Get(ctx, b.ID); apiStatus(t, err) != 404 {
		t.Fatalf("other tenant's get: %v", err)
	}
	if _, err := other.Batches.Cancel(ctx, b.ID); apiStatus(t, err) != 404 {
		t.Fatalf("other tenant's cancel: %v", err)
	}
	if page, _ := other.Batches.List(ctx, openai.BatchListParams{}); len(page.Data) != 0 {
		t.Fatalf("other tenant lists %d batches", len(page.Data))
	}
	if _, err := other.Files.Content(ctx, b.OutputFileID); apiStatus(t, err) != 404 {
		t.Fatalf("other tenant's output file: %v", err)
	}
}

// s3Outside counts the S3 requests made outside any Lambda invocation:
// the local API front's (it makes no Lambda context), not the functions'.
type s3Outside struct{ n atomic.Int64 }

func (c *s3Outside) option(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("countS3Outside",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			// The audit trail's one small write per call (docs/runbook.md
			// "Audit trail") is not the call's data.
			req, _ := in.Request.(*smithyhttp.Request)
			audit := req != nil && strings.Contains(req.URL.Path, "/audit/")
			if _, ok := lambdacontext.FromContext(ctx); !ok && awsmiddleware.GetServiceID(ctx) == "S3" && !audit {
				c.n.Add(1)
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

// TestRetryAnswersAtOnce: POST /retry reads and writes no object inside
// the API call (it once re-read and rewrote up to 200 MB there, past API
// Gateway's 29 s, so a client retrying the call got a second retry batch):
// it answers with the new batch in validating, and the batch's plan writes
// its input, the failed rows, in the background.
func TestRetryAnswersAtOnce(t *testing.T) {
	t.Parallel()
	var s3 s3Outside
	rt := runtime(t, withAPIOption(s3.option))
	c, key := client(t, rt, "acme")
	rows := []row{{id: "a", content: "ok"}, {id: "b", content: "[[mock:400]] no"}, {id: "c", content: "[[mock:400]] no"}}
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)

	before := s3.n.Load()
	status, resp := rawDo(t, rt, key, "POST", "/v1/batches/"+b.ID+"/retry", nil)
	if n := s3.n.Load() - before; n != 0 {
		t.Errorf("POST /retry made %d S3 requests, want none", n)
	}
	var r struct {
		ID, Status, InputFileID string
	}
	if status != 200 || json.Unmarshal(resp, &r) != nil || r.Status != "validating" {
		t.Fatalf("retry: %d %s", status, resp)
	}
	rb := waitBatch(t, c, r.ID)
	_, errs := checkInvariant(t, c, rb, []string{"b", "c"})
	if len(errs) != 2 {
		t.Fatalf("retry batch: %d error lines, want the 2 failed rows", len(errs))
	}
	if f, err := c.Files.Get(context.Background(), rb.InputFileID); err != nil || f.Bytes == 0 {
		t.Fatalf("the retry's input file: %+v %v", f, err)
	}
}
