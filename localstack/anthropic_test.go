package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/pagination"
	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/mockup"
)

// anthropicClient is an official Anthropic client for tenant on rt.
func anthropicClient(t *testing.T, rt *localrun.Runtime, tenant string) (anthropic.Client, string) {
	t.Helper()
	key, err := rt.Key(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return anthropic.NewClient(aoption.WithBaseURL(rt.URL), aoption.WithAPIKey(key), aoption.WithMaxRetries(0)), key
}

// msgRequest is one request of a message batch sent to model with text.
func msgRequest(id, model, text string) anthropic.MessageBatchNewParamsRequest {
	return anthropic.MessageBatchNewParamsRequest{CustomID: id, Params: anthropic.MessageBatchNewParamsRequestParams{
		Model: anthropic.Model(model), MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
	}}
}

func newMessageBatch(t *testing.T, c anthropic.Client, reqs ...anthropic.MessageBatchNewParamsRequest) *anthropic.MessageBatch {
	t.Helper()
	b, err := c.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: reqs})
	if err != nil {
		t.Fatalf("create message batch: %v", err)
	}
	return b
}

func waitEnded(t *testing.T, c anthropic.Client, id string) *anthropic.MessageBatch {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, err := c.Messages.Batches.Get(context.Background(), id, anthropic.MessageBatchGetParams{})
		if err != nil {
			t.Fatalf("get message batch: %v", err)
		}
		if b.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("message batch %s still %s (%s) after 3 minutes", id, b.ProcessingStatus, b.RequestCounts.RawJSON())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// messageResults reads a batch's results with the SDK and checks the
// accounting invariant: every request exactly once, and the counts of each
// result type equal to request_counts, which add up to the requests.
func messageResults(t *testing.T, c anthropic.Client, b *anthropic.MessageBatch, ids []string) map[string]anthropic.MessageBatchIndividualResponse {
	t.Helper()
	stream := c.Messages.Batches.ResultsStreaming(context.Background(), b.ID, anthropic.MessageBatchResultsParams{})
	defer stream.Close()
	got := map[string]anthropic.MessageBatchIndividualResponse{}
	seen := map[string]int{}
	byType := map[string]int64{}
	for stream.Next() {
		r := stream.Current()
		got[r.CustomID] = r
		seen[r.CustomID]++
		byType[r.Result.Type]++
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("results of %s: %v", b.ID, err)
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("request %s appears %d times in the results, want exactly once", id, seen[id])
		}
	}
	if len(seen) != len(ids) {
		t.Errorf("results hold %d distinct requests, the batch has %d", len(seen), len(ids))
	}
	rc := b.RequestCounts
	if rc.Processing != 0 || rc.Succeeded+rc.Errored+rc.Canceled+rc.Expired != int64(len(ids)) {
		t.Errorf("request_counts %s: want processing 0 and the rest adding up to %d", rc.RawJSON(), len(ids))
	}
	want := map[string]int64{"succeeded": rc.Succeeded, "errored": rc.Errored, "canceled": rc.Canceled, "expired": rc.Expired}
	for typ, n := range want {
		if byType[typ] != n {
			t.Errorf("%d %s results, request_counts says %d", byType[typ], typ, n)
		}
	}
	return got
}

// anthropicDo sends a raw request authenticated with x-api-key, as the
// Anthropic SDKs in other languages do.
func anthropicDo(t *testing.T, rt *localrun.Runtime, key, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, rt.URL+path, body)
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	req.Header.Set("anthropic-version", "2023-06-01")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// anthropicError decodes an Anthropic error body, failing on any other shape.
func anthropicError(t *testing.T, body []byte) (typ, message string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error == nil || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("not an Anthropic error body: %s", body)
	}
	return e.Error.Type, e.Error.Message
}

func sdkStatus(t *testing.T, err error) int {
	t.Helper()
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("got %v, want an *anthropic.Error", err)
	}
	return apiErr.StatusCode
}

func TestAnthropicBatchLifecycle(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := anthropicClient(t, rt, "acme")
	ctx := context.Background()

	b := newMessageBatch(t, c,
		msgRequest("ok-1", "claude-haiku-4-5", "hello there"),
		msgRequest("bad-1", "claude-haiku-4-5", "[[mock:400]] refused"),
		msgRequest("cross-1", "gpt-4o-mini", "an openai model"),
		msgRequest("ok-2", "claude-haiku-4-5", "hello again"),
	)
	if !strings.HasPrefix(b.ID, "msgbatch_") || b.Type != "message_batch" || b.ProcessingStatus != anthropic.MessageBatchProcessingStatusInProgress {
		t.Fatalf("created batch: %s", b.RawJSON())
	}
	if b.RequestCounts.Processing != 4 || b.CreatedAt.IsZero() || b.ExpiresAt.Sub(b.CreatedAt) != 24*time.Hour || b.ResultsURL != "" || !b.EndedAt.IsZero() {
		t.Fatalf("created batch: %s", b.RawJSON())
	}
	for _, field := range []string{`"results_url":null`, `"ended_at":null`, `"cancel_initiated_at":null`, `"archived_at":null`} {
		if !strings.Contains(b.RawJSON(), field) {
			t.Errorf("created batch lacks %s: %s", field, b.RawJSON())
		}
	}
	// Results are refused until the batch ends (checked while it may still
	// run; once it has ended the answer is 200 and says nothing).
	if status, body := anthropicDo(t, rt, key, "GET", "/v1/messages/batches/"+b.ID+"/results", nil); status != 200 {
		if typ, _ := anthropicError(t, body); status != 400 || typ != "invalid_request_error" {
			t.Fatalf("results before the end: got %d %s", status, body)
		}
	}

	b = waitEnded(t, c, b.ID)
	if b.EndedAt.IsZero() || b.ResultsURL != rt.URL+"/v1/messages/batches/"+b.ID+"/results" {
		t.Fatalf("ended batch: %s", b.RawJSON())
	}
	if rc := b.RequestCounts; rc.Succeeded != 2 || rc.Errored != 2 || rc.Canceled != 0 || rc.Expired != 0 {
		t.Fatalf("request_counts: %s", rc.RawJSON())
	}
	got := messageResults(t, c, b, []string{"ok-1", "bad-1", "cross-1", "ok-2"})
	ok := got["ok-1"].Result.AsSucceeded()
	if got["ok-1"].Result.Type != "succeeded" || ok.Message.Model != "claude-haiku-4-5" || len(ok.Message.Content) == 0 ||
		ok.Message.Content[0].Text != "echo: hello there" || ok.Message.Usage.InputTokens == 0 {
		t.Fatalf("succeeded result: %s", got["ok-1"].RawJSON())
	}
	// The upstream's own error, not a translation of it.
	bad := got["bad-1"].Result.AsErrored()
	if got["bad-1"].Result.Type != "errored" || bad.Error.Type != "error" || bad.Error.Error.Type != "invalid_request_error" || bad.Error.Error.Message == "" {
		t.Fatalf("errored result: %s", got["bad-1"].RawJSON())
	}
	// An OpenAI-shaped model is never sent a translated request.
	cross := got["cross-1"].Result.AsErrored()
	if got["cross-1"].Result.Type != "errored" || cross.Error.Error.Type != "invalid_request_error" || !strings.Contains(cross.Error.Error.Message, "cross_shape_dispatch") {
		t.Fatalf("cross-shape result: %s", got["cross-1"].RawJSON())
	}
	if n := rt.Mock.Stats().ByPath["/v1/chat/completions"]; n != 0 {
		t.Fatalf("the OpenAI route got %d requests from a message batch", n)
	}

	// x-api-key works as well as the bearer token the Go SDK sends.
	status, body := anthropicDo(t, rt, key, "GET", "/v1/messages/batches/"+b.ID, nil)
	if status != 200 || !strings.Contains(string(body), `"processing_status":"ended"`) {
		t.Fatalf("get with x-api-key: %d %s", status, body)
	}
	status, body = anthropicDo(t, rt, key, "GET", "/v1/messages/batches/"+b.ID+"/results", nil)
	if status != 200 || bytes.Count(body, []byte("\n")) != 4 {
		t.Fatalf("results with x-api-key: %d %s", status, body)
	}

	// Deleting removes the batch and its records; a second delete finds nothing.
	del, err := c.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{})
	if err != nil || del.ID != b.ID || del.Type != "message_batch_deleted" {
		t.Fatalf("delete: %+v, %v", del, err)
	}
	if _, err := c.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{}); sdkStatus(t, err) != 404 {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := c.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{}); sdkStatus(t, err) != 404 {
		t.Fatalf("second delete: %v", err)
	}
	if chunks, err := rt.App.Store.Chunks(ctx, b.ID); err != nil || len(chunks) != 0 {
		t.Fatalf("chunks after delete: %d, %v", len(chunks), err)
	}
	if parts, err := rt.App.Blobs.List(ctx, "parts/acme/"+b.ID+"/"); err != nil || len(parts) != 0 {
		t.Fatalf("parts after delete: %v, %v", parts, err)
	}
}

func TestAnthropicBatchCancel(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := anthropicClient(t, rt, "acme")
	ctx := context.Background()
	var reqs []anthropic.MessageBatchNewParamsRequest
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("slow-%02d", i)
		reqs = append(reqs, msgRequest(id, "claude-haiku-4-5", fmt.Sprintf("[[mock:sleep=400ms]] slow %d", i)))
		ids = append(ids, id)
	}
	b := newMessageBatch(t, c, reqs...)
	// Once rows are done (the OpenAI-shaped counts of the same batch are
	// live), Anthropic's still say every request is processing: the
	// others stay 0 until processing of the whole batch has ended.
	oc, _ := client(t, rt, "acme")
	for {
		ob, err := oc.Batches.Get(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ob.RequestCounts.Completed > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	running, err := c.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if rc := running.RequestCounts; rc.Processing != 60 || rc.Succeeded+rc.Errored+rc.Canceled+rc.Expired != 0 {
		t.Fatalf("counts while running: %s; want processing 60 and the rest 0", rc.RawJSON())
	}
	// Results wait for the end, and only an ended batch can be deleted.
	status, body := anthropicDo(t, rt, key, "GET", "/v1/messages/batches/"+b.ID+"/results", nil)
	if typ, msg := anthropicError(t, body); status != 400 || typ != "invalid_request_error" || !strings.Contains(msg, "ended") {
		t.Fatalf("results of a running batch: %d %s", status, body)
	}
	if _, err := c.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{}); sdkStatus(t, err) != 400 {
		t.Fatalf("delete of a running batch: %v", err)
	}
	status, body = anthropicDo(t, rt, key, "DELETE", "/v1/messages/batches/"+b.ID, nil)
	if typ, msg := anthropicError(t, body); status != 400 || typ != "invalid_request_error" || !strings.Contains(msg, "cancel") {
		t.Fatalf("delete of a running batch: %d %s", status, body)
	}

	cb, err := c.Messages.Batches.Cancel(ctx, b.ID, anthropic.MessageBatchCancelParams{})
	if err != nil || cb.ProcessingStatus != anthropic.MessageBatchProcessingStatusCanceling || cb.CancelInitiatedAt.IsZero() {
		t.Fatalf("cancel: %+v, %v", cb, err)
	}
	b = waitEnded(t, c, b.ID)
	got := messageResults(t, c, b, ids)
	rc := b.RequestCounts
	if rc.Succeeded == 0 || rc.Canceled == 0 || rc.Errored != 0 || rc.Expired != 0 {
		t.Fatalf("request_counts after a cancel: %s, want some succeeded and some canceled", rc.RawJSON())
	}
	for id, r := range got {
		if r.Result.Type != "succeeded" && r.Result.Type != "canceled" {
			t.Errorf("%s: %s", id, r.RawJSON())
		}
	}
	if b.CancelInitiatedAt.IsZero() || b.EndedAt.Before(b.CancelInitiatedAt) {
		t.Fatalf("ended batch: %s", b.RawJSON())
	}
	// Once the bucket's lifecycle removed the chunk parts, the batch and
	// its counts still read (they never come from the parts).
	parts, err := rt.App.Blobs.List(ctx, batch.PartsPrefix("acme", b.ID))
	if err != nil || len(parts) == 0 {
		t.Fatalf("parts of %s: %v, %v", b.ID, parts, err)
	}
	if err := rt.App.Blobs.Delete(ctx, parts...); err != nil {
		t.Fatal(err)
	}
	again, err := c.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})
	if err != nil || again.RequestCounts.Canceled != rc.Canceled || again.RequestCounts.Succeeded != rc.Succeeded {
		t.Fatalf("get after the parts expired: %v, %+v", err, again)
	}
	if _, err := c.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{}); err != nil {
		t.Fatalf("list after the parts expired: %v", err)
	}
	// An ended batch has nothing left to cancel; now it can be deleted.
	if _, err := c.Messages.Batches.Cancel(ctx, b.ID, anthropic.MessageBatchCancelParams{}); sdkStatus(t, err) != 400 {
		t.Fatalf("cancel of an ended batch: %v", err)
	}
	if _, err := c.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{}); err != nil {
		t.Fatalf("delete after the end: %v", err)
	}
}

func TestAnthropicBatchList(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := anthropicClient(t, rt, "acme")
	other, _ := anthropicClient(t, rt, "globex")
	oc, _ := client(t, rt, "acme")
	ctx := context.Background()

	var made []string // oldest first
	for i := range 3 {
		b := newMessageBatch(t, c, msgRequest("only", "claude-haiku-4-5", fmt.Sprintf("batch %d", i)))
		made = append(made, b.ID)
		time.Sleep(5 * time.Millisecond) // ids order by the millisecond
	}
	// An OpenAI batch of the same tenant is not a message batch.
	createBatch(t, oc, upload(t, oc, "in.jsonl", jsonlRows(nRows(1, "x"))).ID)
	newest, middle, oldest := made[2], made[1], made[0]

	ids := func(p *pagination.Page[anthropic.MessageBatch]) []string {
		var out []string
		for _, b := range p.Data {
			out = append(out, b.ID)
		}
		return out
	}
	list := func(params anthropic.MessageBatchListParams) *pagination.Page[anthropic.MessageBatch] {
		t.Helper()
		p, err := c.Messages.Batches.List(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name     string
		params   anthropic.MessageBatchListParams
		want     []string
		wantMore bool
	}{
		{"all", anthropic.MessageBatchListParams{}, []string{newest, middle, oldest}, false},
		{"first page", anthropic.MessageBatchListParams{Limit: anthropic.Int(2)}, []string{newest, middle}, true},
		{"after", anthropic.MessageBatchListParams{AfterID: anthropic.String(middle)}, []string{oldest}, false},
		{"after the last", anthropic.MessageBatchListParams{AfterID: anthropic.String(oldest)}, nil, false},
		{"before", anthropic.MessageBatchListParams{BeforeID: anthropic.String(oldest), Limit: anthropic.Int(1)}, []string{middle}, true},
		{"before, all", anthropic.MessageBatchListParams{BeforeID: anthropic.String(oldest)}, []string{newest, middle}, false},
		{"before the first", anthropic.MessageBatchListParams{BeforeID: anthropic.String(newest)}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := list(tt.params)
			if got := ids(p); fmt.Sprint(got) != fmt.Sprint(tt.want) || p.HasMore != tt.wantMore {
				t.Fatalf("got %v has_more=%v, want %v has_more=%v", got, p.HasMore, tt.want, tt.wantMore)
			}
			if len(tt.want) > 0 && (p.FirstID != tt.want[0] || p.LastID != tt.want[len(tt.want)-1]) {
				t.Fatalf("first_id %s last_id %s, want %s and %s", p.FirstID, p.LastID, tt.want[0], tt.want[len(tt.want)-1])
			}
		})
	}
	// The SDK's pager walks the pages with after_id.
	var walked []string
	for it := c.Messages.Batches.ListAutoPaging(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(1)}); it.Next(); {
		walked = append(walked, it.Current().ID)
		if len(walked) > 5 {
			t.Fatal("pager does not stop")
		}
	}
	if fmt.Sprint(walked) != fmt.Sprint([]string{newest, middle, oldest}) {
		t.Fatalf("auto-paging: got %v", walked)
	}
	if p, err := other.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{}); err != nil || len(p.Data) != 0 {
		t.Fatalf("another tenant lists %d batches (%v)", len(p.Data), err)
	}
}

func TestAnthropicBatchBadRequests(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := anthropicClient(t, rt, "acme")
	other, otherKey := anthropicClient(t, rt, "globex")
	oc, _ := client(t, rt, "acme")
	ctx := context.Background()
	b := waitEnded(t, c, newMessageBatch(t, c, msgRequest("a", "claude-haiku-4-5", "hi")).ID)
	openaiBatch := createBatch(t, oc, upload(t, oc, "in.jsonl", jsonlRows(nRows(1, "x"))).ID)

	req := func(id, params string) string { return `{"custom_id":"` + id + `","params":` + params + `}` }
	good := `{"model":"claude-haiku-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, body string
		wantIn     string
	}{
		{"malformed json", `{"requests":[`, "malformed JSON"},
		{"not an object", `[1,2]`, "JSON object"},
		{"no requests", `{}`, "requests"},
		{"empty requests", `{"requests":[]}`, "at least one request"},
		{"requests not an array", `{"requests":{"custom_id":"a"}}`, "requests"},
		{"unknown field", `{"requests":[` + req("a", good) + `],"model":"x"}`, "model: unknown field"},
		{"request not an object", `{"requests":["a"]}`, "requests.0"},
		{"missing custom_id", `{"requests":[{"params":` + good + `}]}`, "requests.0.custom_id"},
		{"custom_id not a string", `{"requests":[{"custom_id":5,"params":` + good + `}]}`, "requests.0.custom_id"},
		{"custom_id too long", `{"requests":[` + req(strings.Repeat("a", 65), good) + `]}`, "requests.0.custom_id"},
		{"custom_id with a space", `{"requests":[` + req("a b", good) + `]}`, "requests.0.custom_id"},
		{"duplicate custom_id", `{"requests":[` + req("a", good) + `,` + req("a", good) + `]}`, "requests.1.custom_id"},
		{"params not an object", `{"requests":[` + req("a", `"hi"`) + `]}`, "requests.0.params"},
		{"missing model", `{"requests":[` + req("a", `{"max_tokens":1}`) + `]}`, "requests.0.params.model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := anthropicDo(t, rt, key, "POST", "/v1/messages/batches", strings.NewReader(tt.body))
			typ, msg := anthropicError(t, body)
			if status != 400 || typ != "invalid_request_error" || !strings.Contains(msg, tt.wantIn) {
				t.Fatalf("got %d %s, want 400 invalid_request_error naming %q", status, body, tt.wantIn)
			}
		})
	}

	// Through the SDK, which sends max_tokens even when it is 0: refused as
	// Anthropic refuses it in a batch, naming the request.
	t.Run("max_tokens 0", func(t *testing.T) {
		zero := msgRequest("z", "claude-haiku-4-5", "hi")
		zero.Params.MaxTokens = 0
		_, err := c.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{msgRequest("a", "claude-haiku-4-5", "hi"), zero}})
		var aerr *anthropic.Error
		if !errors.As(err, &aerr) || aerr.StatusCode != 400 {
			t.Fatalf("create with max_tokens 0: %v, want a 400", err)
		}
		if typ, msg := anthropicError(t, []byte(aerr.RawJSON())); typ != "invalid_request_error" || !strings.Contains(msg, "requests.1.params.max_tokens") {
			t.Fatalf("got %s %q, want invalid_request_error naming requests.1.params.max_tokens", typ, msg)
		}
	})

	t.Run("too large", func(t *testing.T) {
		big := `{"requests":[` + req("a", `{"model":"claude-haiku-4-5","max_tokens":1,"messages":[{"role":"user","content":"`+strings.Repeat("x", 4<<20+100<<10)+`"}]}`) + `]}`
		status, body := anthropicDo(t, rt, key, "POST", "/v1/messages/batches", strings.NewReader(big))
		typ, msg := anthropicError(t, body)
		if status != 413 || typ != "request_too_large" || !strings.Contains(msg, "4 MiB") {
			t.Fatalf("got %d %s", status, body)
		}
	})

	t.Run("no key", func(t *testing.T) {
		status, body := anthropicDo(t, rt, "", "GET", "/v1/messages/batches", nil)
		if typ, _ := anthropicError(t, body); status != 401 || typ != "authentication_error" {
			t.Fatalf("got %d %s", status, body)
		}
	})

	// Another tenant's batch, and an OpenAI batch, do not exist here.
	for _, tc := range []struct{ who, key, id string }{{"other tenant", otherKey, b.ID}, {"openai batch", key, openaiBatch.ID}, {"bad id", key, "msgbatch_../x"}} {
		for _, route := range []struct{ method, path string }{
			{"GET", "/v1/messages/batches/" + tc.id},
			{"GET", "/v1/messages/batches/" + tc.id + "/results"},
			{"POST", "/v1/messages/batches/" + tc.id + "/cancel"},
			{"DELETE", "/v1/messages/batches/" + tc.id},
		} {
			status, body := anthropicDo(t, rt, tc.key, route.method, route.path, nil)
			if typ, _ := anthropicError(t, body); status != 404 || typ != "not_found_error" {
				t.Errorf("%s: %s %s: got %d %s", tc.who, route.method, route.path, status, body)
			}
		}
	}
	if _, err := other.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{}); sdkStatus(t, err) != 404 {
		t.Fatalf("other tenant's get: %v", err)
	}
	stream := other.Messages.Batches.ResultsStreaming(ctx, b.ID, anthropic.MessageBatchResultsParams{})
	if stream.Next() || sdkStatus(t, stream.Err()) != 404 {
		t.Fatalf("other tenant's results: %v", stream.Err())
	}
	stream.Close()

	for _, q := range []string{"limit=0", "limit=1001", "after_id=batch_x", "before_id=nope", "after_id=msgbatch_a&before_id=msgbatch_b"} {
		status, body := anthropicDo(t, rt, key, "GET", "/v1/messages/batches?"+q, nil)
		if typ, _ := anthropicError(t, body); status != 400 || typ != "invalid_request_error" {
			t.Errorf("list ?%s: got %d %s", q, status, body)
		}
	}
}

func TestAnthropicBatchExpiry(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := anthropicClient(t, rt, "acme")
	// 30 requests, 3 chunks of 10; claude-haiku-4-5 takes one chunk at a
	// time (max_concurrency 8, a chunk holds 8), and the first one is slow.
	var reqs []anthropic.MessageBatchNewParamsRequest
	var ids []string
	for i := range 30 {
		text := fmt.Sprintf("row %d", i)
		if i < 10 {
			text += " [[mock:sleep=3s]]"
		}
		id := fmt.Sprintf("r%02d", i)
		reqs = append(reqs, msgRequest(id, "claude-haiku-4-5", text))
		ids = append(ids, id)
	}
	b := newMessageBatch(t, c, reqs...)
	expireWhileRunning(t, rt, "acme", b.ID, "claude-haiku-4-5")
	b = waitEnded(t, c, b.ID)
	if rc := b.RequestCounts; rc.Succeeded != 10 || rc.Expired != 20 || rc.Errored != 0 || rc.Canceled != 0 {
		t.Fatalf("request_counts: %s, want 10 succeeded and 20 expired", rc.RawJSON())
	}
	got := messageResults(t, c, b, ids)
	for i, id := range ids {
		want := "succeeded"
		if i >= 10 {
			want = "expired"
		}
		if got[id].Result.Type != want {
			t.Errorf("%s: got %s, want %s", id, got[id].RawJSON(), want)
		}
	}
}

func TestAnthropicBatchIdempotency(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := anthropicClient(t, rt, "acme")
	oc, _ := client(t, rt, "acme")
	ctx := context.Background()
	params := anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{msgRequest("a", "claude-haiku-4-5", "once")}}
	key := aoption.WithHeader("Idempotency-Key", "create-once")
	first, err := c.Messages.Batches.New(ctx, params, key)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Messages.Batches.New(ctx, params, key)
	if err != nil || again.ID != first.ID {
		t.Fatalf("retried create: got %v (%v), want %s", again, err, first.ID)
	}
	// The retry's input file was not kept.
	page, err := oc.Files.List(ctx, openai.FileListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page.Data); n != 1 {
		t.Fatalf("%d input files after a retried create, want 1", n)
	}
	// A key is scoped to its route: the same key on the OpenAI create makes
	// its own batch, and does not take the message batch's.
	body := strings.NewReader(`{"endpoint":"/v1/chat/completions","requests":[{"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"}}]}`)
	req, _ := http.NewRequest("POST", rt.URL+"/v1/batches", body)
	req.Header.Set("Authorization", "Bearer "+mustKey(t, rt, "acme"))
	req.Header.Set("Idempotency-Key", "create-twice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if m, err := c.Messages.Batches.New(ctx, params, aoption.WithHeader("Idempotency-Key", "create-twice")); err != nil || m.ID == first.ID {
		t.Fatalf("a key that made an OpenAI batch: %v, %v", m, err)
	}
}

func mustKey(t *testing.T, rt *localrun.Runtime, tenant string) string {
	t.Helper()
	key, err := rt.Key(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// GET /v1/models lists the configured models to both official SDKs: in
// OpenAI's shape, and in Anthropic's when the request carries
// anthropic-version (the Anthropic SDK sends it).
func TestModelsListedToBothSDKs(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	want := rt.App.Models.Names()
	oc, _ := client(t, rt, "acme")
	page, err := oc.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range page.Data {
		if m.Object != "model" || m.Created == 0 {
			t.Errorf("OpenAI model %+v", m)
		}
		got = append(got, m.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("OpenAI SDK lists %v, want %v", got, want)
	}
	ac, _ := anthropicClient(t, rt, "acme")
	apage, err := ac.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, m := range apage.Data {
		if m.Type != "model" || m.CreatedAt.IsZero() || m.DisplayName == "" {
			t.Errorf("Anthropic model %+v", m)
		}
		got = append(got, m.ID)
	}
	if !slices.Equal(got, want) || apage.HasMore || apage.FirstID != want[0] || apage.LastID != want[len(want)-1] {
		t.Fatalf("Anthropic SDK lists %v (has_more %v, first %s, last %s), want %v", got, apage.HasMore, apage.FirstID, apage.LastID, want)
	}
}

// GET /v1/models/{id} answers each official SDK's Models.Get for a
// configured model, and 404 in the caller's error shape for a model not
// configured or outside the key's allow-list (docs/api.md "Overview").
func TestModelRetrievedByBothSDKs(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	oc, _ := client(t, rt, "acme")
	m, err := oc.Models.Get(ctx, "gpt-4o-mini")
	if err != nil {
		t.Fatalf("OpenAI Models.Get: %v", err)
	}
	if m.ID != "gpt-4o-mini" || m.Object != "model" || m.Created == 0 || m.OwnedBy != "relay" {
		t.Errorf("OpenAI model %s", m.RawJSON())
	}
	ac, _ := anthropicClient(t, rt, "acme")
	am, err := ac.Models.Get(ctx, "claude-haiku-4-5", anthropic.ModelGetParams{})
	if err != nil {
		t.Fatalf("Anthropic Models.Get: %v", err)
	}
	if am.ID != "claude-haiku-4-5" || am.Type != "model" || am.DisplayName == "" || am.CreatedAt.IsZero() {
		t.Errorf("Anthropic model %s", am.RawJSON())
	}

	limited, _, err := auth.Create(ctx, rt.App.Store, auth.NewKey{Tenant: "acme", Models: []string{"gpt-4o-mini"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, key, model string }{
		{"unknown", mustKey(t, rt, "acme"), "gpt-nope"},
		{"not allowed", limited, "gpt-4o-mini-backup"},
	} {
		oc := clientWithKey(rt, tc.key)
		_, err := oc.Models.Get(ctx, tc.model)
		var oerr *openai.Error
		if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusNotFound || oerr.Type != "invalid_request_error" || oerr.Code != "model_not_found" {
			t.Errorf("%s: OpenAI Models.Get(%s) = %v, want 404 model_not_found", tc.name, tc.model, err)
		}
		c := anthropic.NewClient(aoption.WithBaseURL(rt.URL), aoption.WithAPIKey(tc.key), aoption.WithMaxRetries(0))
		_, err = c.Models.Get(ctx, tc.model, anthropic.ModelGetParams{})
		var aerr *anthropic.Error
		if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusNotFound {
			t.Errorf("%s: Anthropic Models.Get(%s) = %v, want 404", tc.name, tc.model, err)
			continue
		}
		if typ, _ := anthropicError(t, []byte(aerr.RawJSON())); typ != "not_found_error" {
			t.Errorf("%s: Anthropic error type %s, want not_found_error", tc.name, typ)
		}
	}
	// Any error of the models routes reaches an Anthropic caller in its
	// shape, a missing key too.
	for _, path := range []string{"/v1/models", "/v1/models/gpt-4o-mini"} {
		status, body := anthropicDo(t, rt, "", http.MethodGet, path, nil)
		if typ, _ := anthropicError(t, body); status != http.StatusUnauthorized || typ != "authentication_error" {
			t.Errorf("GET %s without a key: %d %s, want 401 authentication_error", path, status, typ)
		}
	}
}

// An object that does not exist is 404 with code null, as OpenAI answers
// it (docs/api.md "Errors").
func TestNotFoundCodeIsNull(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	oc, _ := client(t, rt, "acme")
	_, ferr := oc.Files.Get(ctx, "file-nope")
	_, berr := oc.Batches.Get(ctx, "batch_nope")
	for what, err := range map[string]error{"file": ferr, "batch": berr} {
		var oerr *openai.Error
		if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: %v, want a 404", what, err)
		}
		var body struct {
			Error map[string]json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(oerr.RawJSON()), &body.Error); err != nil {
			t.Fatal(err)
		}
		if code, ok := body.Error["code"]; !ok || string(code) != "null" || oerr.Type != "invalid_request_error" {
			t.Errorf("%s: error %s, want type invalid_request_error and code null", what, oerr.RawJSON())
		}
	}
}

// The Anthropic SDK reads a failed request's id from request-id (and the
// body names it too); the OpenAI SDK's raw response carries x-request-id:
// support conversations start from it.
func TestRequestIDsReachBothSDKs(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	ac, _ := anthropicClient(t, rt, "acme")
	_, err := ac.Messages.Batches.Get(ctx, "msgbatch_nope", anthropic.MessageBatchGetParams{})
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusNotFound || aerr.RequestID == "" {
		t.Fatalf("Anthropic SDK error %v: want a 404 with its request id", err)
	}
	var body struct {
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal([]byte(aerr.RawJSON()), &body); body.RequestID != aerr.RequestID {
		t.Fatalf("error body names request %q, header %q", body.RequestID, aerr.RequestID)
	}
	oc, _ := client(t, rt, "acme")
	_, err = oc.Batches.Get(ctx, "batch_nope")
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusNotFound || oerr.Response.Header.Get("x-request-id") == "" {
		t.Fatalf("OpenAI SDK error %v: want a 404 with x-request-id", err)
	}
}

// TestMessageResultsSurviveFileDeletes: a cleanup script that deletes every
// file GET /v1/files lists (with the OpenAI SDK) does not cut a message
// batch's results short: the files that back them are gone for the Files
// API, and their parts stay until the message batch is deleted
// (docs/api.md "Message Batches"). Before, the results answered 200 and
// then ended mid-stream.
func TestMessageResultsSurviveFileDeletes(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	ac, _ := anthropicClient(t, rt, "acme")
	oc, _ := client(t, rt, "acme")
	ids := []string{"ok-1", "ok-2", "bad-1"}
	b := newMessageBatch(t, ac, msgRequest(ids[0], "claude-haiku-4-5", "hello"), msgRequest(ids[1], "claude-haiku-4-5", "hi"),
		msgRequest(ids[2], "claude-haiku-4-5", "[[mock:400]] no"))
	b = waitEnded(t, ac, b.ID)

	deleted := 0
	iter := oc.Files.ListAutoPaging(ctx, openai.FileListParams{})
	for iter.Next() {
		if _, err := oc.Files.Delete(ctx, iter.Current().ID); err != nil {
			t.Fatalf("delete %s: %v", iter.Current().ID, err)
		}
		deleted++
	}
	if iter.Err() != nil || deleted == 0 {
		t.Fatalf("listed and deleted %d files: %v", deleted, iter.Err())
	}
	if page, err := oc.Files.List(ctx, openai.FileListParams{}); err != nil || len(page.Data) != 0 {
		t.Fatalf("files after the cleanup: %v, %v", page, err)
	}
	got := messageResults(t, ac, b, ids)
	if got["bad-1"].Result.Type != "errored" || got["ok-1"].Result.Type != "succeeded" {
		t.Fatalf("results after the cleanup: %+v", got)
	}
	if _, err := ac.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{}); err != nil {
		t.Fatalf("delete the message batch: %v", err)
	}
	parts, err := rt.App.Blobs.List(ctx, batch.PartsPrefix("acme", b.ID))
	if err != nil || len(parts) != 0 {
		t.Fatalf("parts after the message batch's delete: %v, %v", parts, err)
	}
}

// TestMessageBatchBetasReachUpstream: a message batch created with
// betas (the anthropic-beta header, as client.beta.messages.batches.create
// sends it) and a user profile id sends both with each of its rows
// upstream; the mock records them (docs/api.md "Anthropic Message
// Batches"). Before, both were dropped at create.
func TestMessageBatchBetasReachUpstream(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	rt.Mock.SetOptions(mockup.Options{Record: true})
	ctx := context.Background()
	c, _ := anthropicClient(t, rt, "acme")
	var reqs []anthropic.BetaMessageBatchNewParamsRequest
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		reqs = append(reqs, anthropic.BetaMessageBatchNewParamsRequest{CustomID: id, Params: anthropic.BetaMessageBatchNewParamsRequestParams{
			Model: anthropic.Model("claude-haiku-4-5"), MaxTokens: 64,
			Messages: []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("hello " + id))},
		}})
	}
	b, err := c.Beta.Messages.Batches.New(ctx, anthropic.BetaMessageBatchNewParams{Requests: reqs, UserProfileID: anthropic.String("up_123"),
		Betas: []anthropic.AnthropicBeta{anthropic.AnthropicBetaContext1m2025_08_07, "output-128k-2025-02-19"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	waitEnded(t, c, b.ID)
	got := 0
	for _, r := range rt.Mock.Requests() {
		if r.Model != "claude-haiku-4-5" {
			continue
		}
		got++
		if r.Beta != "context-1m-2025-08-07,output-128k-2025-02-19" || r.UserProfile != "up_123" {
			t.Errorf("a row reached the upstream with anthropic-beta %q and anthropic-user-profile-id %q", r.Beta, r.UserProfile)
		}
	}
	if got != 3 {
		t.Fatalf("%d rows at the upstream, want 3", got)
	}
}

// A message batch row refused without an upstream call (it names an
// OpenAI-shape model: cross_shape_dispatch) ends while that model's whole
// capacity is held by another batch's chunk, whose rows take 30 s at the mock:
// such rows are settled in a chunk that holds no slots (docs/design.md
// "Scheduling", rows settled without a call).
func TestRefusedRowWaitsForNoCapacity(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	oc, _ := client(t, rt, "acme")
	var hold bytes.Buffer
	for i := range 8 { // text-embedding-3-small's max_concurrency
		fmt.Fprintf(&hold, `{"custom_id":"h%d","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"[[mock:sleep=30s]] %d"}}`+"\n", i, i)
	}
	held, err := oc.Batches.New(ctx, openai.BatchNewParams{InputFileID: upload(t, oc, "hold.jsonl", hold.Bytes()).ID,
		Endpoint: openai.BatchNewParamsEndpointV1Embeddings, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = oc.Batches.Cancel(context.Background(), held.ID) })
	eventually(t, "text-embedding-3-small's 8 slots held", time.Minute, func() bool {
		n, err := rt.App.Store.InFlight(ctx, "text-embedding-3-small")
		return err == nil && n == 8
	})

	ac, _ := anthropicClient(t, rt, "acme")
	mb := newMessageBatch(t, ac, msgRequest("cross-1", "text-embedding-3-small", "an openai model"))
	eventually(t, "message batch "+mb.ID+" ended", 20*time.Second, func() bool {
		b, err := ac.Messages.Batches.Get(ctx, mb.ID, anthropic.MessageBatchGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		mb = b
		return b.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded
	})
	got := messageResults(t, ac, mb, []string{"cross-1"})
	if e := got["cross-1"].Result.AsErrored(); got["cross-1"].Result.Type != "errored" || !strings.Contains(e.Error.Error.Message, "cross_shape_dispatch") {
		t.Fatalf("cross-shape result: %s", got["cross-1"].RawJSON())
	}
	// The capacity was held throughout: the holding chunk is still its
	// first run's, none of its rows answered.
	c, err := rt.App.Store.GetChunk(ctx, held.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rt.App.Store.InFlight(ctx, "text-embedding-3-small"); err != nil || n != 8 || c.State != batch.ChunkClaimed || c.Attempts != 1 {
		t.Fatalf("when the message batch ended: holding chunk %s (attempt %d), %d slots in use (%v); want it claimed on all 8", c.State, c.Attempts, n, err)
	}
}
