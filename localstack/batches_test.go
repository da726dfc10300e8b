package localstack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/local/localrun"
)

type row struct {
	id, content, model string
}

func jsonlRows(rows []row) []byte {
	var b bytes.Buffer
	for _, r := range rows {
		model := r.model
		if model == "" {
			model = "gpt-4o-mini"
		}
		line, _ := json.Marshal(map[string]any{"custom_id": r.id, "method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": r.content}}}})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func nRows(n int, content string) []row {
	rows := make([]row, n)
	for i := range rows {
		rows[i] = row{id: fmt.Sprintf("r%04d", i), content: fmt.Sprintf("%s %d", content, i)}
	}
	return rows
}

func createBatch(t testing.TB, c openai.Client, fileID string, opts ...option.RequestOption) *openai.Batch {
	t.Helper()
	b, err := c.Batches.New(context.Background(), openai.BatchNewParams{
		InputFileID: fileID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
	}, opts...)
	if err != nil {
		t.Fatalf("create batch: %v", err)
	}
	return b
}

var terminal = map[openai.BatchStatus]bool{"completed": true, "failed": true, "expired": true, "cancelled": true}

func waitBatch(t testing.TB, c openai.Client, id string) *openai.Batch {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, err := c.Batches.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get batch: %v", err)
		}
		if terminal[b.Status] {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s still %s (%+v) after 3 minutes", id, b.Status, b.RequestCounts)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// resultLine is a line of an output or error file.
type resultLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Fallback bool `json:"fallback"`
	// Usage is on the error lines of workflow records that ran requests.
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

func readLines(t testing.TB, data []byte) []resultLine {
	t.Helper()
	var ls []resultLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l resultLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		ls = append(ls, l)
	}
	return ls
}

// files returns the output and error lines of a finished batch.
func outputs(t testing.TB, c openai.Client, b *openai.Batch) (out, errs []resultLine) {
	t.Helper()
	if b.OutputFileID != "" {
		out = readLines(t, content(t, c, b.OutputFileID))
	}
	if b.ErrorFileID != "" {
		errs = readLines(t, content(t, c, b.ErrorFileID))
	}
	return out, errs
}

// checkInvariant asserts the accounting invariant (docs/api.md "Batches"): every input row
// exactly once in output ∪ error, and completed + failed == total.
func checkInvariant(t testing.TB, c openai.Client, b *openai.Batch, ids []string) (out, errs map[string]resultLine) {
	t.Helper()
	o, e := outputs(t, c, b)
	out, errs = map[string]resultLine{}, map[string]resultLine{}
	seen := map[string]int{}
	for _, l := range o {
		out[l.CustomID] = l
		seen[l.CustomID]++
	}
	for _, l := range e {
		errs[l.CustomID] = l
		seen[l.CustomID]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("row %s appears %d times in output ∪ error, want exactly once", id, seen[id])
		}
	}
	if len(seen) != len(ids) {
		t.Errorf("output ∪ error hold %d distinct rows, input has %d", len(seen), len(ids))
	}
	rc := b.RequestCounts
	if rc.Completed+rc.Failed != rc.Total || rc.Total != int64(len(ids)) || rc.Completed != int64(len(o)) || rc.Failed != int64(len(e)) {
		t.Errorf("request_counts %+v: want completed(%d)+failed(%d) == total(%d)", rc, len(o), len(e), len(ids))
	}
	return out, errs
}

func idsOf(rows []row) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	return ids
}

func TestBatchHappyPath(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	rows := nRows(35, "hello")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	b := createBatch(t, c, f.ID, option.WithJSONSet("metadata", map[string]string{"job": "nightly"}))
	if b.Status != "validating" || b.Endpoint != "/v1/chat/completions" || b.InputFileID != f.ID || b.Metadata["job"] != "nightly" {
		t.Fatalf("created batch: got %+v", b)
	}
	b = waitBatch(t, c, b.ID)
	if b.Status != "completed" || b.InProgressAt == 0 || b.FinalizingAt == 0 || b.CompletedAt == 0 || b.ExpiresAt == 0 {
		t.Fatalf("finished batch: got status %s, timestamps in_progress=%d finalizing=%d completed=%d", b.Status, b.InProgressAt, b.FinalizingAt, b.CompletedAt)
	}
	out, errs := checkInvariant(t, c, b, idsOf(rows))
	if len(errs) != 0 || b.ErrorFileID != "" {
		t.Fatalf("error lines: %v", errs)
	}
	l := out["r0007"]
	var body struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	json.Unmarshal(l.Response.Body, &body)
	if l.Response.StatusCode != 200 || body.Choices[0].Message.Content != "echo: hello 7" || !strings.HasPrefix(l.ID, "batch_req_") || l.Error != nil {
		t.Fatalf("output line: got %+v body %s", l, l.Response.Body)
	}
	if b.Usage.TotalTokens == 0 || b.Usage.InputTokens+b.Usage.OutputTokens != b.Usage.TotalTokens {
		t.Fatalf("usage: got %+v", b.Usage)
	}
	// The details are the sums of the upstream answers' own.
	var cached, reasoning int64
	for _, l := range out {
		var u struct {
			Usage struct {
				Prompt struct {
					CachedTokens int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
				Completion struct {
					ReasoningTokens int64 `json:"reasoning_tokens"`
				} `json:"completion_tokens_details"`
			} `json:"usage"`
		}
		json.Unmarshal(l.Response.Body, &u)
		cached += u.Usage.Prompt.CachedTokens
		reasoning += u.Usage.Completion.ReasoningTokens
	}
	if !b.Usage.JSON.InputTokensDetails.Valid() || !b.Usage.JSON.OutputTokensDetails.Valid() || cached == 0 ||
		b.Usage.InputTokensDetails.CachedTokens != cached || b.Usage.OutputTokensDetails.ReasoningTokens != reasoning {
		t.Fatalf("usage details: got cached %d reasoning %d (valid %v %v), want %d and %d", b.Usage.InputTokensDetails.CachedTokens,
			b.Usage.OutputTokensDetails.ReasoningTokens, b.Usage.JSON.InputTokensDetails.Valid(), b.Usage.JSON.OutputTokensDetails.Valid(), cached, reasoning)
	}

	// /results: every row, in input order.
	resp := rawGet(t, rt, key, "/v1/batches/"+b.ID+"/results")
	res := readLines(t, resp)
	if len(res) != len(rows) {
		t.Fatalf("results: got %d lines, want %d", len(res), len(rows))
	}
	for i, l := range res {
		if l.CustomID != rows[i].id {
			t.Fatalf("results line %d: got %s, want %s (input order)", i, l.CustomID, rows[i].id)
		}
	}
	// The list shows it, newest first.
	page, err := c.Batches.List(context.Background(), openai.BatchListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != b.ID {
		t.Fatalf("list: got %+v, %v", page, err)
	}
	// Usage is recorded per tenant, model and day.
	var usage struct {
		Data []struct {
			Model       string `json:"model"`
			Requests    int64  `json:"requests"`
			TotalTokens int64  `json:"total_tokens"`
		} `json:"data"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/usage?source=batch"), &usage)
	if len(usage.Data) != 1 || usage.Data[0].Requests != int64(len(rows)) || usage.Data[0].TotalTokens != b.Usage.TotalTokens {
		t.Fatalf("usage aggregates: got %+v, want %d requests and %d tokens", usage.Data, len(rows), b.Usage.TotalTokens)
	}
}

// rawGet GETs path with key (for routes the SDK lacks).
func rawGet(t testing.TB, rt *localrun.Runtime, key, path string) []byte {
	t.Helper()
	status, body := rawDo(t, rt, key, "GET", path, nil)
	if status != 200 {
		t.Fatalf("GET %s: %d %s", path, status, body)
	}
	return body
}

func rawDo(t testing.TB, rt *localrun.Runtime, key, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, rt.URL+path, body)
	req.Header.Set("Authorization", "Bearer "+key)
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

// TestResultsExpireWithTheOutput: /results serves a batch's lines only as
// long as its output file lives (output_expires_after); after that it is
// 404, as the file is, and the bytes go (docs/api.md "Output and error files").
func TestResultsExpireWithTheOutput(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	ctx := context.Background()
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(nRows(2, "x"))).ID).ID)
	if b.OutputFileID == "" {
		t.Fatalf("no output file: %+v", b)
	}
	if status, body := rawDo(t, rt, key, "GET", "/v1/batches/"+b.ID+"/results", nil); status != 200 || bytes.Count(body, []byte("\n")) != 2 {
		t.Fatalf("results before the expiry: %d %s", status, body)
	}
	past := time.Now().Add(-time.Second).Unix()
	if _, err := rt.App.Store.UpdateFile(ctx, "acme", b.OutputFileID, func(f *file.File) error { f.ExpiresAt = &past; return nil }); err != nil {
		t.Fatal(err)
	}
	if status, body := rawDo(t, rt, key, "GET", "/v1/batches/"+b.ID+"/results", nil); status != 404 || !strings.Contains(string(body), "expired") {
		t.Fatalf("results after the output expired: %d %s, want 404", status, body)
	}
}

// TestResultsGoWithEitherFile: /results interleaves the output and the
// error file's lines, so a batch whose error file was deleted answers 404,
// never a 200 cut short (docs/api.md "Output and error files"). Before,
// only the output file was checked.
func TestResultsGoWithEitherFile(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	ctx := context.Background()
	rows := append(nRows(2, "x"), row{id: "bad", content: "[[mock:400]] no"})
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.OutputFileID == "" || b.ErrorFileID == "" {
		t.Fatalf("want an output and an error file: %+v", b)
	}
	if status, body := rawDo(t, rt, key, "GET", "/v1/batches/"+b.ID+"/results", nil); status != 200 || bytes.Count(body, []byte("\n")) != 3 {
		t.Fatalf("results: %d %s", status, body)
	}
	if _, err := c.Files.Delete(ctx, b.ErrorFileID); err != nil {
		t.Fatal(err)
	}
	if status, body := rawDo(t, rt, key, "GET", "/v1/batches/"+b.ID+"/results", nil); status != 404 || !strings.Contains(string(body), "deleted") {
		t.Fatalf("results after the error file was deleted: %d %s, want 404", status, body)
	}
}

// TestOutputExpiresFromItsCreation: output_expires_after of 30 days (the
// most OpenAI takes) is counted from the output file's own creation, as
// OpenAI anchors it, for a batch that ran a while; before, the file never
// outlived the batch's creation + 30 days (docs/api.md "Output and error
// files").
func TestOutputExpiresFromItsCreation(t *testing.T) {
	t.Parallel()
	rt := shippedRuntime(t)
	c, _ := client(t, rt, "acme")
	ctx := context.Background()
	f := upload(t, c, "in.jsonl", jsonlRows(slowRows("e", "small-8", 2, 2*time.Second)))
	const month = 30 * 24 * 3600
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, OutputExpiresAfter: openai.BatchNewParamsOutputExpiresAfter{Seconds: month}})
	if err != nil {
		t.Fatal(err)
	}
	b = waitBatch(t, c, b.ID)
	out, err := c.Files.Get(ctx, b.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	if out.CreatedAt <= b.CreatedAt || out.ExpiresAt != out.CreatedAt+month {
		t.Fatalf("output file created %d (batch %d), expires %d: want its created_at + %d", out.CreatedAt, b.CreatedAt, out.ExpiresAt, month)
	}
}
