package anthropic

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/batches"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/provider"
)

func testService(t *testing.T) *Service {
	t.Helper()
	models, err := config.ParseModels([]byte(`
models:
  - {name: claude-haiku-4-5, provider: anthropic, base_url: http://127.0.0.1:1, api_key_env: K}
  - {name: gpt-4o-mini, provider: openai, base_url: http://127.0.0.1:1/v1, api_key_env: K}
`))
	if err != nil {
		t.Fatal(err)
	}
	return &Service{Batches: &batches.Service{Models: models}}
}

func TestMessageRows(t *testing.T) {
	t.Parallel()
	s := testService(t)
	good := `{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"<b> & é"}]}`
	req := func(id, params string) string { return `{"custom_id":"` + id + `","params":` + params + `}` }
	tests := []struct {
		name    string
		reqs    []string
		wantErr string // empty: valid
		// refused holds, for a request recorded as a refused row, what its
		// error says; "" for a request recorded as sent.
		refused []string
	}{
		{"valid", []string{req("a-1", good), req("B_2", `{"model":"gpt-4o-mini"}`)}, "", nil},
		{"none", nil, "at least one request", nil},
		{"not an object", []string{`[]`}, "requests.0: must be an object", nil},
		{"null", []string{`null`}, "requests.0: must be an object", nil},
		{"unknown field", []string{`{"custom_id":"a","params":` + good + `,"x":1}`}, "requests.0.x: unknown field", nil},
		{"no custom_id", []string{`{"params":` + good + `}`}, "requests.0.custom_id: a string is required", nil},
		{"empty custom_id", []string{req("", good)}, "requests.0.custom_id", nil},
		{"long custom_id", []string{req(strings.Repeat("x", 65), good)}, "requests.0.custom_id", nil},
		{"64 characters", []string{req(strings.Repeat("x", 64), good)}, "", nil},
		{"dot in custom_id", []string{req("a.b", good)}, "requests.0.custom_id", nil},
		{"duplicate", []string{req("a", good), req("b", good), req("a", good)}, "requests.2.custom_id: \"a\" is also the custom_id of requests.0", nil},
		{"no params", []string{`{"custom_id":"a"}`}, "requests.0.params: an object", nil},
		{"params null", []string{req("a", `null`)}, "requests.0.params: an object", nil},
		{"no model", []string{req("a", `{"max_tokens":1}`)}, "requests.0.params.model: a model name is required", nil},
		{"model not a string", []string{req("a", `{"model":5}`)}, "requests.0.params.model: a model name is required", nil},
		// Anthropic refuses max_tokens below 1 in a batch (docs/api.md
		// "Anthropic Message Batches").
		{"max_tokens 0", []string{req("a", good), req("b", `{"model":"claude-haiku-4-5","max_tokens":0}`)}, "requests.1.params.max_tokens: must be at least 1", nil},
		{"max_tokens negative", []string{req("a", `{"model":"claude-haiku-4-5","max_tokens":-3}`)}, "requests.0.params.max_tokens: must be at least 1", nil},
		{"max_tokens 1", []string{req("a", `{"model":"claude-haiku-4-5","max_tokens":1}`)}, "", nil},
		// Anthropic accepts these and answers the request errored.
		{"unknown model", []string{req("a", `{"model":"claude-9"}`), req("b", good)}, "", []string{`params.model: "claude-9" is not a configured model`, ""}},
		{"stream", []string{req("a", good), req("b", `{"model":"gpt-4o-mini","stream":true}`)}, "", []string{"", "params.stream: streaming is not supported"}},
		{"stream false", []string{req("a", `{"model":"claude-haiku-4-5","stream":false}`)}, "", nil},
		{"invalid utf-8", []string{"{\"custom_id\":\"a\",\"params\":{\"model\":\"claude-haiku-4-5\",\"x\":\"\xff\"}}"}, "requests.0: not valid UTF-8", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raws := make([]json.RawMessage, len(tt.reqs))
			for i, r := range tt.reqs {
				raws[i] = json.RawMessage(r)
			}
			data, err := s.messageRows(raws, func(string) bool { return true })
			if tt.wantErr != "" {
				if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an invalid request error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The rows are what planning validates and the executor reads.
			res, err := jsonl.Scan(strings.NewReader(string(data)), jsonl.Options{Endpoint: endpoint.Messages, KnownModel: func(m string) bool {
				_, ok := s.Batches.Models.Lookup(m)
				return ok
			}}, nil)
			if err != nil || len(res.Errors) > 0 || res.Rows != len(raws) {
				t.Fatalf("scan of the rows: %+v, %v\n%s", res, err, data)
			}
			reqs, err := jsonl.ParseRequests(data)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range reqs {
				var in struct {
					CustomID string          `json:"custom_id"`
					Params   json.RawMessage `json:"params"`
				}
				json.Unmarshal(raws[i], &in)
				if r.CustomID != in.CustomID || r.Method != "POST" || r.URL != endpoint.Messages {
					t.Errorf("row %d: got %+v, want the request's custom_id", i, r)
				}
				if i >= len(tt.refused) || tt.refused[i] == "" {
					if string(r.Body) != string(in.Params) {
						t.Errorf("row %d: got body %s, want the request's params", i, r.Body)
					}
					continue
				}
				// A refused row runs in a configured model's chunk, the
				// previous request's or else an Anthropic one, and fails
				// unsent with its reason.
				var body struct {
					Model string            `json:"model"`
					Relay map[string]string `json:"relay"`
				}
				json.Unmarshal(r.Body, &body)
				if body.Model != "claude-haiku-4-5" || !strings.Contains(body.Relay[provider.RefusedKey], tt.refused[i]) {
					t.Errorf("row %d: got body %s, want a refused row saying %q", i, r.Body, tt.refused[i])
				}
				res := (&provider.Client{Models: s.Batches.Models}).Do(t.Context(), endpoint.Messages, r.Body, provider.Route{})
				if got := MessageResultOf(part.Line{CustomID: r.CustomID, Error: &part.LineError{Code: res.ErrCode, Message: res.ErrMessage}}); got.Result.Type != "errored" ||
					got.Result.Error.Error.Type != "invalid_request_error" || !strings.Contains(got.Result.Error.Error.Message, tt.refused[i]) {
					t.Errorf("row %d: got result %+v, want errored invalid_request_error", i, got.Result.Error)
				}
			}
		})
	}
}

func TestMessageRowsLimit(t *testing.T) {
	t.Parallel()
	raws := make([]json.RawMessage, MaxMessageRequests+1)
	_, err := testService(t).messageRows(raws, func(string) bool { return true })
	if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "at most 100000 requests") {
		t.Fatalf("got %v", err)
	}
}

func TestMessageResultOf(t *testing.T) {
	t.Parallel()
	msg := `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}]}`
	tests := []struct {
		name string
		line part.Line
		want string
	}{
		{"succeeded", part.Line{CustomID: "a", Response: &part.LineResponse{StatusCode: 200, RequestID: "req_1", Body: json.RawMessage(msg)}},
			`{"custom_id":"a","result":{"type":"succeeded","message":` + msg + `}}`},
		{"upstream error", part.Line{CustomID: "a", Response: &part.LineResponse{StatusCode: 400, RequestID: "req_2",
			Body: json.RawMessage(`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`)}},
			`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_2"}}}`},
		{"upstream error of another shape", part.Line{CustomID: "a", Response: &part.LineResponse{StatusCode: 529, Body: json.RawMessage(`"busy"`)}},
			`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"the upstream answered HTTP 529"},"request_id":null}}}`},
		{"cancelled", part.Line{CustomID: "a", Error: &part.LineError{Code: part.CodeCancelled, Message: "x"}},
			`{"custom_id":"a","result":{"type":"canceled"}}`},
		{"expired", part.Line{CustomID: "a", Error: &part.LineError{Code: part.CodeExpired, Message: "x"}},
			`{"custom_id":"a","result":{"type":"expired"}}`},
		{"cross shape", part.Line{CustomID: "a", Error: &part.LineError{Code: "cross_shape_dispatch", Message: "not an anthropic model"}},
			`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"cross_shape_dispatch: not an anthropic model"},"request_id":null}}}`},
		{"dead letter", part.Line{CustomID: "a", Error: &part.LineError{Code: part.CodeDeadLetter, Message: "gone"}},
			`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"dead_letter: gone"},"request_id":null}}}`},
		{"timeout", part.Line{CustomID: "a", Error: &part.LineError{Code: "request_timeout", Message: "slow"}},
			`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"timeout_error","message":"request_timeout: slow"},"request_id":null}}}`},
		{"model not found", part.Line{CustomID: "a", Error: &part.LineError{Code: "model_not_found", Message: "no"}},
			`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"not_found_error","message":"model_not_found: no"},"request_id":null}}}`},
		// A retry's row of a model the retrying key may not use: as the
		// same row refused at create.
		{"model not allowed", part.Line{CustomID: "a", Error: &part.LineError{Code: "model_not_allowed", Message: "no"}},
			`{"custom_id":"a","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"model_not_allowed: no"},"request_id":null}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(MessageResultOf(tt.line))
			if err != nil || string(got) != tt.want {
				t.Fatalf("got  %s (%v)\nwant %s", got, err, tt.want)
			}
		})
	}
}

func TestMessageBatchOf(t *testing.T) {
	t.Parallel()
	at := func(n int64) *int64 { return &n }
	const created = 1_700_000_000
	tests := []struct {
		name       string
		b          batch.Batch
		canceled   int64
		wantStatus string
		want       wire.MessageRequestCounts
	}{
		{"just created", batch.Batch{Status: batch.Validating, RequestCounts: batch.Counts{Total: 5}},
			0, wire.ProcessingInProgress, wire.MessageRequestCounts{Processing: 5}},
		{"running", batch.Batch{Status: batch.InProgress, RequestCounts: batch.Counts{Total: 5, Completed: 2, Failed: 1}},
			0, wire.ProcessingInProgress, wire.MessageRequestCounts{Processing: 5}},
		{"canceling", batch.Batch{Status: batch.Cancelling, CancellingAt: at(created + 1), RequestCounts: batch.Counts{Total: 5, Completed: 2, Failed: 2}},
			2, wire.ProcessingCanceling, wire.MessageRequestCounts{Processing: 5}},
		{"finalizing after a cancel", batch.Batch{Status: batch.Finalizing, CancellingAt: at(created + 1), RequestCounts: batch.Counts{Total: 5, Completed: 2, Failed: 3}},
			3, wire.ProcessingCanceling, wire.MessageRequestCounts{Processing: 5}},
		{"cancelled", batch.Batch{Status: batch.Cancelled, CancellingAt: at(created + 1), CancelledAt: at(created + 2), RequestCounts: batch.Counts{Total: 5, Completed: 1, Failed: 4}, ExpiredRows: 1},
			2, wire.ProcessingEnded, wire.MessageRequestCounts{Succeeded: 1, Errored: 1, Canceled: 2, Expired: 1}},
		{"expired", batch.Batch{Status: batch.Expired, ExpiredAt: at(created + 2), RequestCounts: batch.Counts{Total: 5, Completed: 1, Failed: 4}, ExpiredRows: 3},
			0, wire.ProcessingEnded, wire.MessageRequestCounts{Succeeded: 1, Errored: 1, Expired: 3}},
		{"failed before planning", batch.Batch{Status: batch.Failed, FailedAt: at(created + 2), RequestCounts: batch.Counts{Total: 5}},
			0, wire.ProcessingEnded, wire.MessageRequestCounts{Errored: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.b.ID, tt.b.CreatedAt, tt.b.ExpiresAt = "msgbatch_1", created, at(created+86400)
			m := messageBatchOf(tt.b, tt.canceled, time.Unix(created+3, 0))
			if m.ProcessingStatus != tt.wantStatus || m.RequestCounts != tt.want {
				t.Fatalf("got %s %+v, want %s %+v", m.ProcessingStatus, m.RequestCounts, tt.wantStatus, tt.want)
			}
			c := m.RequestCounts
			if sum := c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired; sum != tt.b.RequestCounts.Total {
				t.Fatalf("counts add up to %d, want %d", sum, tt.b.RequestCounts.Total)
			}
			if m.CreatedAt != "2023-11-14T22:13:20Z" || *m.ExpiresAt != "2023-11-15T22:13:20Z" || m.Type != "message_batch" || m.ArchivedAt != nil {
				t.Fatalf("object: %+v", m)
			}
			if ended := m.EndedAt != nil; ended != (tt.wantStatus == wire.ProcessingEnded) {
				t.Fatalf("ended_at %v with status %s", m.EndedAt, m.ProcessingStatus)
			}
			if (m.CancelInitiatedAt != nil) != (tt.b.CancellingAt != nil) {
				t.Fatalf("cancel_initiated_at %v", m.CancelInitiatedAt)
			}
		})
	}
}

// Results are kept 29 days after a batch ended, as at Anthropic: then the
// batch shows archived_at (and its results are refused, see
// localstack.TestAnthropicResultsArchived).
func TestArchivedAt(t *testing.T) {
	t.Parallel()
	ended := time.Unix(1_700_000_000, 0)
	end := ended.Unix()
	b := batch.Batch{ID: "msgbatch_1", Status: batch.Completed, CompletedAt: &end, RequestCounts: batch.Counts{Total: 1, Completed: 1}}
	for _, tt := range []struct {
		name string
		now  time.Time
		want string
	}{
		{"just ended", ended, ""},
		{"a second before 29 days", ended.Add(ResultsKept - time.Second), ""},
		{"29 days after", ended.Add(ResultsKept), "2023-12-13T22:13:20Z"},
		{"a year after", ended.Add(365 * 24 * time.Hour), "2023-12-13T22:13:20Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := messageBatchOf(b, 0, tt.now)
			got := ""
			if m.ArchivedAt != nil {
				got = *m.ArchivedAt
			}
			if got != tt.want {
				t.Fatalf("archived_at = %q, want %q (ended_at %s)", got, tt.want, *m.EndedAt)
			}
		})
	}
	running := batch.Batch{ID: "msgbatch_1", Status: batch.InProgress, RequestCounts: batch.Counts{Total: 1}}
	if m := messageBatchOf(running, 0, ended.Add(365*24*time.Hour)); m.ArchivedAt != nil {
		t.Fatalf("a running batch has archived_at %s", *m.ArchivedAt)
	}
}

// A request naming a configured model its key may not use comes back as
// that request's errored result, the others run.
func TestMessageRowsAllowList(t *testing.T) {
	t.Parallel()
	s := testService(t)
	raws := []json.RawMessage{
		json.RawMessage(`{"custom_id":"a","params":{"model":"claude-haiku-4-5","max_tokens":1}}`),
		json.RawMessage(`{"custom_id":"b","params":{"model":"gpt-4o-mini","max_tokens":1}}`),
	}
	data, err := s.messageRows(raws, func(m string) bool { return m == "claude-haiku-4-5" })
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := jsonl.ParseRequests(data)
	if err != nil || len(reqs) != 2 {
		t.Fatalf("rows %d, %v", len(reqs), err)
	}
	if string(reqs[0].Body) != string(`{"model":"claude-haiku-4-5","max_tokens":1}`) {
		t.Fatalf("allowed request's body %s", reqs[0].Body)
	}
	res := (&provider.Client{Models: s.Batches.Models}).Do(t.Context(), endpoint.Messages, reqs[1].Body, provider.Route{})
	if res.ErrCode != inference.CodeInvalidRequest || !strings.Contains(res.ErrMessage, "model_not_allowed") {
		t.Fatalf("request b: %s %q, want refused unsent with model_not_allowed", res.ErrCode, res.ErrMessage)
	}
}

// A message batch in progress carries Relay's estimated_completion_at, from
// the rate its rows settle at, though its counts stay "processing".
func TestMessageBatchETA(t *testing.T) {
	t.Parallel()
	started := int64(1_700_000_000)
	b := batch.Batch{ID: "msgbatch_1", Status: batch.InProgress, CreatedAt: started, InProgressAt: &started,
		RequestCounts: batch.Counts{Total: 40, Completed: 10}}
	m := messageBatchOf(b, 0, time.Unix(started+10, 0))
	if m.EstimatedCompletionAt == nil || *m.EstimatedCompletionAt != rfc3339(started+40) || m.RequestCounts.Processing != 40 {
		t.Fatalf("got %v, counts %+v; want %s", m.EstimatedCompletionAt, m.RequestCounts, rfc3339(started+40))
	}
	b.RequestCounts.Completed = 0
	if m := messageBatchOf(b, 0, time.Unix(started+10, 0)); m.EstimatedCompletionAt != nil {
		t.Fatalf("no row settled: got %s", *m.EstimatedCompletionAt)
	}
}
