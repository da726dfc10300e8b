package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/ijson"
	"github.com/relaybatch/relay/internal/inference"
)

// request is what the fake upstream saw.
type request struct {
	Path   string
	Header http.Header
	Body   string
}

// step answers one upstream call.
type step func(w http.ResponseWriter, r *http.Request)

func answer(status int, body string, header ...string) step {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// hang answers nothing until the caller gives up.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func times(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// upstream is a fake provider that plays steps in order and records calls.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex
	steps []step
	seen  []request
}

func newUpstream(t *testing.T, steps ...step) *upstream {
	t.Helper()
	u := &upstream{steps: steps}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, request{Path: r.URL.Path, Header: r.Header.Clone(), Body: string(body)})
		n := len(u.seen)
		u.mu.Unlock()
		if n > len(u.steps) {
			t.Errorf("upstream called %d times, only %d answers scripted", n, len(u.steps))
			w.WriteHeader(http.StatusTeapot)
			return
		}
		u.steps[n-1](w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]request(nil), u.seen...)
}

// testModels is a models file whose upstreams all live at baseURL.
func testModels(t *testing.T, baseURL string) *config.Models {
	t.Helper()
	ms, err := config.ParseModels([]byte(strings.ReplaceAll(`
moderation_model: chat
models:
  - name: chat
    provider: openai
    base_url: BASE/v1
    api_key_env: OPENAI_KEY
    upstream_model: chat-upstream
    fallback: chat-backup
  - name: chat-backup
    provider: openai
    base_url: BASE/v1
    api_key_env: OPENAI_KEY
    upstream_model: backup-upstream
  - name: solo
    provider: openai
    base_url: BASE/v1
    api_key_env: OPENAI_KEY
  - name: slow
    provider: openai
    base_url: BASE/v1
    timeout: 250ms
    call_time_limit: 1s # well past the late answer of TestDoTimeLimit (300 ms), on a busy machine too
  - name: claude
    provider: anthropic
    base_url: BASE
    api_key_env: ANTHROPIC_KEY
    upstream_model: claude-upstream
`, "BASE", baseURL)))
	if err != nil {
		t.Fatalf("parse test models: %v", err)
	}
	return ms
}

// mapKeys is a KeySource over a map.
type mapKeys map[string]string

func (m mapKeys) Key(_ context.Context, name string) (string, error) { return m[name], nil }

// sleeps records the delays a Client asked for instead of waiting them.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
	// then runs after recording, e.g. to cancel the row mid-backoff.
	then func()
}

func (s *sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	if s.then != nil {
		s.then()
	}
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

func newClient(t *testing.T, baseURL string, s *sleeps) *Client {
	t.Helper()
	return &Client{
		HTTP:   NewHTTPClient(),
		Models: testModels(t, baseURL),
		Keys:   mapKeys{"OPENAI_KEY": "sk-test", "ANTHROPIC_KEY": "ant-test"},
		Policy: Policy{Sleep: s.Sleep},
	}
}

func upstreamModel(t *testing.T, r request) string {
	t.Helper()
	var b struct{ Model string }
	if err := json.Unmarshal([]byte(r.Body), &b); err != nil {
		t.Fatalf("upstream body %q: %v", r.Body, err)
	}
	return b.Model
}

const (
	chatOK    = `{"id":"chatcmpl-1","model":"chat-upstream","usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`
	rateLimit = `{"error":{"message":"rate limited","type":"rate_limit_error"}}`
	serverErr = `{"error":{"message":"boom"}}`
)

func TestDo(t *testing.T) {
	t.Parallel()
	retryAt := time.Now().Add(60 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name     string
		endpoint string
		body     string
		fallback string
		steps    []step
		want     inference.Result // compared on StatusCode, ErrCode, Model, Fallback, Attempts
		// upstream lists body.model of each upstream call, in order.
		upstream []string
		check    func(t *testing.T, got inference.Result, seen []request, slept []time.Duration)
	}{
		{
			name:     "success",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
			steps:    []step{answer(200, chatOK, "x-request-id", "req_upstream")},
			want:     inference.Result{StatusCode: 200, Model: "chat", Attempts: 1},
			upstream: []string{"chat-upstream"},
			check: func(t *testing.T, got inference.Result, seen []request, _ []time.Duration) {
				if got.RequestID != "req_upstream" {
					t.Errorf("RequestID = %q, want req_upstream", got.RequestID)
				}
				if want := (inference.Usage{InputTokens: 7, OutputTokens: 3, TotalTokens: 10}); got.Usage != want {
					t.Errorf("Usage = %+v, want %+v", got.Usage, want)
				}
				if string(got.Body) != chatOK {
					t.Errorf("Body = %s, want %s", got.Body, chatOK)
				}
				if p := seen[0].Path; p != "/v1/chat/completions" {
					t.Errorf("path = %s, want /v1/chat/completions", p)
				}
				h := seen[0].Header
				if a := h.Get("Authorization"); a != "Bearer sk-test" {
					t.Errorf("Authorization = %q, want Bearer sk-test", a)
				}
				if ct := h.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q, want application/json", ct)
				}
			},
		},
		{
			name:     "upstream_model rename keeps the other fields byte for byte",
			endpoint: "/v1/chat/completions",
			body:     `{"temperature": 1.0, "model":"solo" ,"messages":[{"content":"\u00e9"}],"n":1}`,
			steps:    []step{answer(200, chatOK)},
			want:     inference.Result{StatusCode: 200, Model: "solo", Attempts: 1},
			upstream: []string{"solo"},
			check: func(t *testing.T, got inference.Result, seen []request, _ []time.Duration) {
				// solo has no rename; the same body must arrive untouched.
				if want := `{"temperature": 1.0, "model":"solo" ,"messages":[{"content":"\u00e9"}],"n":1}`; seen[0].Body != want {
					t.Errorf("upstream body = %s, want %s", seen[0].Body, want)
				}
				if !strings.HasPrefix(got.RequestID, "req_") || len(got.RequestID) < 10 {
					t.Errorf("RequestID = %q, want a generated req_…", got.RequestID)
				}
			},
		},
		{
			name:     "upstream_model rename",
			endpoint: "/v1/chat/completions",
			body:     `{"temperature": 1.0, "model":"chat" ,"n":1}`,
			steps:    []step{answer(200, chatOK)},
			want:     inference.Result{StatusCode: 200, Model: "chat", Attempts: 1},
			check: func(t *testing.T, _ inference.Result, seen []request, _ []time.Duration) {
				if want := `{"temperature": 1.0, "model":"chat-upstream" ,"n":1}`; seen[0].Body != want {
					t.Errorf("upstream body = %s, want %s", seen[0].Body, want)
				}
			},
		},
		{
			name:     "anthropic headers",
			endpoint: "/v1/messages",
			body:     `{"model":"claude","max_tokens":10,"messages":[]}`,
			steps: []step{answer(200, `{"id":"msg_1","usage":{"input_tokens":5,"output_tokens":2}}`,
				"request-id", "req_ant")},
			want:     inference.Result{StatusCode: 200, Model: "claude", Attempts: 1},
			upstream: []string{"claude-upstream"},
			check: func(t *testing.T, got inference.Result, seen []request, _ []time.Duration) {
				h := seen[0].Header
				for k, want := range map[string]string{
					"x-api-key":         "ant-test",
					"anthropic-version": "2023-06-01",
					"Content-Type":      "application/json",
					"Authorization":     "",
				} {
					if v := h.Get(k); v != want {
						t.Errorf("header %s = %q, want %q", k, v, want)
					}
				}
				if p := seen[0].Path; p != "/v1/messages" {
					t.Errorf("path = %s, want /v1/messages", p)
				}
				if got.RequestID != "req_ant" {
					t.Errorf("RequestID = %q, want req_ant", got.RequestID)
				}
				if want := (inference.Usage{InputTokens: 5, OutputTokens: 2, TotalTokens: 7}); got.Usage != want {
					t.Errorf("Usage = %+v, want %+v", got.Usage, want)
				}
			},
		},
		{
			name:     "429 with Retry-After, then success",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"solo"}`,
			steps:    []step{answer(429, rateLimit, "Retry-After", "7"), answer(200, chatOK)},
			want:     inference.Result{StatusCode: 200, Model: "solo", Attempts: 2},
			check: func(t *testing.T, _ inference.Result, _ []request, slept []time.Duration) {
				if len(slept) != 1 || slept[0] < 7*time.Second {
					t.Errorf("slept %v, want one sleep ≥ 7s", slept)
				}
			},
		},
		{
			name:     "429 with retry-after-ms",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"solo"}`,
			steps:    []step{answer(429, rateLimit, "retry-after-ms", "40000"), answer(200, chatOK)},
			want:     inference.Result{StatusCode: 200, Model: "solo", Attempts: 2},
			check: func(t *testing.T, _ inference.Result, _ []request, slept []time.Duration) {
				// Larger than MaxDelay: the upstream's wait beats the backoff cap.
				if len(slept) != 1 || slept[0] < 40*time.Second {
					t.Errorf("slept %v, want one sleep ≥ 40s", slept)
				}
			},
		},
		{
			name:     "503 with Retry-After as an HTTP date",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"solo"}`,
			steps:    []step{answer(503, serverErr, "Retry-After", retryAt), answer(200, chatOK)},
			want:     inference.Result{StatusCode: 200, Model: "solo", Attempts: 2},
			check: func(t *testing.T, _ inference.Result, _ []request, slept []time.Duration) {
				// The date has second precision and time passes while the test
				// runs, so only a loose lower bound is meaningful.
				if len(slept) != 1 || slept[0] < 50*time.Second || slept[0] > 60*time.Second {
					t.Errorf("slept %v, want one sleep of about 60s", slept)
				}
			},
		},
		{
			name:     "500 on every attempt, then the model's fallback",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"chat"}`,
			steps:    append(times(4, answer(500, serverErr)), answer(200, chatOK)),
			want:     inference.Result{StatusCode: 200, Model: "chat-backup", Fallback: true, Attempts: 5},
			upstream: []string{"chat-upstream", "chat-upstream", "chat-upstream", "chat-upstream", "backup-upstream"},
			check: func(t *testing.T, _ inference.Result, _ []request, slept []time.Duration) {
				// Three backoffs on the model; none between models.
				if len(slept) != 3 {
					t.Fatalf("slept %v, want 3 sleeps", slept)
				}
				for i, d := range slept {
					if limit := 500 * time.Millisecond << i; d < 0 || d > limit {
						t.Errorf("sleep %d = %v, want within [0, %v]", i, d, limit)
					}
				}
			},
		},
		{
			name:     "the batch fallback when the model has none",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"solo"}`,
			fallback: "chat-backup",
			steps:    append(times(4, answer(502, "<html>bad gateway</html>")), answer(200, chatOK)),
			want:     inference.Result{StatusCode: 200, Model: "chat-backup", Fallback: true, Attempts: 5},
			upstream: []string{"solo", "solo", "solo", "solo", "backup-upstream"},
		},
		{
			name:     "fallback of another shape is skipped",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"solo"}`,
			fallback: "claude",
			steps:    times(4, answer(502, "<html>bad gateway</html>")),
			want:     inference.Result{StatusCode: 502, Model: "solo", Attempts: 4},
			check: func(t *testing.T, got inference.Result, _ []request, _ []time.Duration) {
				// A non-JSON body is wrapped so the output line stays JSON.
				if want := `{"error":{"message":"<html>bad gateway</html>"}}`; string(got.Body) != want {
					t.Errorf("Body = %s, want %s", got.Body, want)
				}
			},
		},
		{
			name:     "fallback to the model itself is skipped",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"solo"}`,
			fallback: "solo",
			steps:    times(4, answer(500, serverErr)),
			want:     inference.Result{StatusCode: 500, Model: "solo", Attempts: 4},
		},
		{
			name:     "permanent 400 is not retried and does not fall back",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"chat"}`,
			steps:    []step{answer(400, `{"error":{"message":"bad field","type":"invalid_request_error"}}`)},
			want:     inference.Result{StatusCode: 400, Model: "chat", Attempts: 1},
			check: func(t *testing.T, got inference.Result, _ []request, slept []time.Duration) {
				if len(slept) != 0 {
					t.Errorf("slept %v, want no sleep", slept)
				}
				if want := `{"error":{"message":"bad field","type":"invalid_request_error"}}`; string(got.Body) != want {
					t.Errorf("Body = %s, want %s", got.Body, want)
				}
			},
		},
		{
			name:     "pretty upstream JSON is compacted for the JSONL line",
			endpoint: "/v1/embeddings",
			body:     `{"model":"solo","input":"x"}`,
			steps:    []step{answer(200, "{\n  \"object\": \"list\",\n  \"usage\": {\"prompt_tokens\": 4, \"total_tokens\": 4}\n}\n")},
			want:     inference.Result{StatusCode: 200, Model: "solo", Attempts: 1},
			check: func(t *testing.T, got inference.Result, seen []request, _ []time.Duration) {
				if want := `{"object":"list","usage":{"prompt_tokens":4,"total_tokens":4}}`; string(got.Body) != want {
					t.Errorf("Body = %s, want %s", got.Body, want)
				}
				if want := (inference.Usage{InputTokens: 4, TotalTokens: 4}); got.Usage != want {
					t.Errorf("Usage = %+v, want %+v", got.Usage, want)
				}
				if p := seen[0].Path; p != "/v1/embeddings" {
					t.Errorf("path = %s, want /v1/embeddings", p)
				}
			},
		},
		{
			name:     "model_not_found makes no call",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"nope"}`,
			want:     inference.Result{ErrCode: inference.CodeModelNotFound},
		},
		{
			name:     "cross_shape_dispatch makes no call",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"claude"}`,
			want:     inference.Result{ErrCode: inference.CodeCrossShapeDispatch, Model: "claude"},
			check: func(t *testing.T, got inference.Result, _ []request, _ []time.Duration) {
				for _, s := range []string{"/v1/chat/completions", "anthropic"} {
					if !strings.Contains(got.ErrMessage, s) {
						t.Errorf("ErrMessage = %q, want it to name %q", got.ErrMessage, s)
					}
				}
			},
		},
		{
			name:     "cross_shape_dispatch the other way",
			endpoint: "/v1/messages",
			body:     `{"model":"chat"}`,
			want:     inference.Result{ErrCode: inference.CodeCrossShapeDispatch, Model: "chat"},
		},
		{
			name:     "body not an object",
			endpoint: "/v1/chat/completions",
			body:     `["model","chat"]`,
			want:     inference.Result{ErrCode: inference.CodeInvalidRequest},
		},
		{
			name:     "model not a string",
			endpoint: "/v1/chat/completions",
			body:     `{"model":3}`,
			want:     inference.Result{ErrCode: inference.CodeInvalidRequest},
		},
		{
			// Routed on the first model, run upstream on the last: a body
			// that never went through validation is refused here too.
			name:     "duplicate model",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"chat","messages":[],"model":"slow"}`,
			want:     inference.Result{ErrCode: inference.CodeInvalidRequest},
		},
		{
			name:     "unsupported endpoint",
			endpoint: "/v1/images/edits",
			body:     `{"model":"chat"}`,
			want:     inference.Result{ErrCode: inference.CodeInvalidRequest},
		},
		{
			name:     "per-call timeout on every attempt",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"slow"}`,
			steps:    times(4, hang),
			want:     inference.Result{ErrCode: inference.CodeRequestTimeout, Model: "slow", Attempts: 4},
		},
		{
			name:     "a timeout then an answer",
			endpoint: "/v1/chat/completions",
			body:     `{"model":"slow"}`,
			steps:    []step{hang, answer(200, chatOK)},
			want:     inference.Result{StatusCode: 200, Model: "slow", Attempts: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, tt.steps...)
			var s sleeps
			c := newClient(t, up.URL, &s)

			got := c.Do(context.Background(), tt.endpoint, json.RawMessage(tt.body), Route{Fallback: tt.fallback})

			checkResult(t, got, tt.want)
			seen := up.requests()
			if len(seen) != len(tt.steps) {
				t.Errorf("upstream saw %d calls, want %d", len(seen), len(tt.steps))
			}
			if tt.upstream != nil {
				var models []string
				for _, r := range seen {
					models = append(models, upstreamModel(t, r))
				}
				if fmt.Sprint(models) != fmt.Sprint(tt.upstream) {
					t.Errorf("upstream body.model = %v, want %v", models, tt.upstream)
				}
			}
			if tt.check != nil {
				tt.check(t, got, seen, s.all())
			}
		})
	}
}

// checkResult compares what identifies an outcome and the invariant that a
// Result is either an answer or an error code.
func checkResult(t *testing.T, got, want inference.Result) {
	t.Helper()
	if got.StatusCode != want.StatusCode || got.ErrCode != want.ErrCode || got.Model != want.Model ||
		got.Fallback != want.Fallback || got.Attempts != want.Attempts {
		t.Errorf("Do = {status %d, code %q, model %q, fallback %v, attempts %d} (%s), want {status %d, code %q, model %q, fallback %v, attempts %d}",
			got.StatusCode, got.ErrCode, got.Model, got.Fallback, got.Attempts, got.ErrMessage,
			want.StatusCode, want.ErrCode, want.Model, want.Fallback, want.Attempts)
	}
	if (got.StatusCode != 0) == (got.ErrCode != "") {
		t.Errorf("Result has status %d and code %q, want exactly one", got.StatusCode, got.ErrCode)
	}
	if got.ErrCode != "" && got.ErrMessage == "" {
		t.Errorf("code %q without a message", got.ErrCode)
	}
	var compact bytes.Buffer
	if got.StatusCode != 0 && (json.Compact(&compact, got.Body) != nil || !bytes.Equal(compact.Bytes(), got.Body) || !got.Compact) {
		t.Errorf("Body %q is not compact JSON, or not said so (Compact %v): a line takes it in as it is", got.Body, got.Compact)
	}
	if got.RequestID == "" {
		t.Error("RequestID is empty")
	}
}

// A row runs, and falls back, only on models its key may use
// (Route.Allowed): a fallback outside the allow-list, the model's own or
// the batch's, is never called, and a row of a model outside it fails
// model_not_allowed unsent (a message batch retried by another key).
func TestDoInsideAllowList(t *testing.T) {
	t.Parallel()
	only := func(models ...string) func(string) bool {
		return func(m string) bool { return slices.Contains(models, m) }
	}
	tests := []struct {
		name     string
		body     string
		route    Route
		steps    []step
		want     inference.Result
		upstream []string // body.model of each upstream call
	}{
		{
			name:     "the batch's fallback outside the allow-list",
			body:     `{"model":"solo"}`,
			route:    Route{Fallback: "chat-backup", Allowed: only("solo")},
			steps:    times(4, answer(500, serverErr)),
			want:     inference.Result{StatusCode: 500, Model: "solo", Attempts: 4},
			upstream: []string{"solo", "solo", "solo", "solo"},
		},
		{
			name:     "the model's own fallback outside the allow-list",
			body:     `{"model":"chat"}`,
			route:    Route{Allowed: only("chat")},
			steps:    times(4, answer(500, serverErr)),
			want:     inference.Result{StatusCode: 500, Model: "chat", Attempts: 4},
			upstream: []string{"chat-upstream", "chat-upstream", "chat-upstream", "chat-upstream"},
		},
		{
			name:     "the model's own fallback refused, the batch's allowed",
			body:     `{"model":"chat"}`,
			route:    Route{Fallback: "solo", Allowed: only("chat", "solo")},
			steps:    append(times(4, answer(500, serverErr)), answer(200, chatOK)),
			want:     inference.Result{StatusCode: 200, Model: "solo", Fallback: true, Attempts: 5},
			upstream: []string{"chat-upstream", "chat-upstream", "chat-upstream", "chat-upstream", "solo"},
		},
		{
			name:     "a fallback inside the allow-list",
			body:     `{"model":"solo"}`,
			route:    Route{Fallback: "chat-backup", Allowed: only("solo", "chat-backup")},
			steps:    append(times(4, answer(500, serverErr)), answer(200, chatOK)),
			want:     inference.Result{StatusCode: 200, Model: "chat-backup", Fallback: true, Attempts: 5},
			upstream: []string{"solo", "solo", "solo", "solo", "backup-upstream"},
		},
		{
			name:  "a row of a model outside the allow-list",
			body:  `{"model":"chat"}`,
			route: Route{Allowed: only("solo")},
			want:  inference.Result{ErrCode: "model_not_allowed", Model: "chat"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, tt.steps...)
			c := newClient(t, up.URL, &sleeps{})

			got := c.Do(context.Background(), "/v1/chat/completions", json.RawMessage(tt.body), tt.route)

			checkResult(t, got, tt.want)
			var models []string
			for _, r := range up.requests() {
				models = append(models, upstreamModel(t, r))
			}
			if fmt.Sprint(models) != fmt.Sprint(tt.upstream) {
				t.Errorf("upstream body.model = %v, want %v", models, tt.upstream)
			}
		})
	}
}

// A /v1/moderations row without model goes to the configured moderation
// model (docs/api.md "Batches"), under the model's upstream name and
// within the allow-list; other endpoints have no default.
func TestDoDefaultModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, endpoint, body string
		route                Route
		want                 inference.Result
		upstream             []string
	}{
		{"moderations without model", "/v1/moderations", `{"input":"hi"}`, Route{},
			inference.Result{StatusCode: 200, Model: "chat", Attempts: 1}, []string{"chat-upstream"}},
		{"moderations with null model", "/v1/moderations", `{"model":null,"input":"hi"}`, Route{},
			inference.Result{StatusCode: 200, Model: "chat", Attempts: 1}, []string{"chat-upstream"}},
		{"the default outside the allow-list", "/v1/moderations", `{"input":"hi"}`, Route{Allowed: func(m string) bool { return m != "chat" }},
			inference.Result{ErrCode: inference.CodeModelNotAllowed, Model: "chat"}, nil},
		{"chat without model", "/v1/chat/completions", `{"messages":[]}`, Route{},
			inference.Result{ErrCode: inference.CodeInvalidRequest}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, answer(200, `{"id":"modr-1","results":[]}`))
			c := newClient(t, up.URL, &sleeps{})
			got := c.Do(context.Background(), tt.endpoint, json.RawMessage(tt.body), tt.route)
			checkResult(t, got, tt.want)
			var models []string
			for _, r := range up.requests() {
				models = append(models, upstreamModel(t, r))
			}
			if fmt.Sprint(models) != fmt.Sprint(tt.upstream) {
				t.Errorf("upstream body.model = %v, want %v", models, tt.upstream)
			}
		})
	}
}

func TestDoConnectionError(t *testing.T) {
	t.Parallel()
	// A port that was listening and no longer is refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var s sleeps
	c := newClient(t, "http://"+addr, &s)

	got := c.Do(context.Background(), "/v1/chat/completions", json.RawMessage(`{"model":"solo"}`), Route{})

	checkResult(t, got, inference.Result{ErrCode: inference.CodeConnectionError, Model: "solo", Attempts: 4})
	if n := len(s.all()); n != 3 {
		t.Errorf("slept %d times, want 3", n)
	}
}

func TestDoStops(t *testing.T) {
	t.Parallel()
	t.Run("cancel during backoff keeps the last answer", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, answer(500, serverErr))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := sleeps{then: cancel}
		c := newClient(t, up.URL, &s)

		got := c.Do(ctx, "/v1/chat/completions", json.RawMessage(`{"model":"chat"}`), Route{})

		checkResult(t, got, inference.Result{StatusCode: 500, Model: "chat", Attempts: 1})
	})
	t.Run("cancel during a call", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			cancel()
			<-r.Context().Done()
		})
		var s sleeps
		c := newClient(t, up.URL, &s)

		got := c.Do(ctx, "/v1/chat/completions", json.RawMessage(`{"model":"chat"}`), Route{})

		checkResult(t, got, inference.Result{ErrCode: inference.CodeRequestCancelled, Model: "chat", Attempts: 1})
		if n := len(s.all()); n != 0 {
			t.Errorf("slept %d times, want 0", n)
		}
	})
	t.Run("already cancelled makes no call", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var s sleeps
		c := newClient(t, up.URL, &s)

		got := c.Do(ctx, "/v1/chat/completions", json.RawMessage(`{"model":"chat"}`), Route{})

		checkResult(t, got, inference.Result{ErrCode: inference.CodeRequestCancelled, Model: "chat"})
	})
	t.Run("Retry-After past the deadline returns the answer at once", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, answer(429, rateLimit, "Retry-After", "120"))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var s sleeps
		c := newClient(t, up.URL, &s)

		got := c.Do(ctx, "/v1/chat/completions", json.RawMessage(`{"model":"chat"}`), Route{})

		// No fallback either: the deadline, not the model, ran out.
		checkResult(t, got, inference.Result{StatusCode: 429, Model: "chat", Attempts: 1})
		if n := len(s.all()); n != 0 {
			t.Errorf("slept %d times, want 0", n)
		}
	})
}

// Each row's body is its own answer's, on one line (kept as it came, or
// compacted from several): the buffers answers are read into serve the
// next answers, which a body must not share.
func TestDoBodiesAreTheirOwn(t *testing.T) {
	t.Parallel()
	answerOf := func(row string) string {
		n, _ := strconv.Atoi(row[1:])
		if n%2 == 0 {
			return fmt.Sprintf(`{"row":%q,"pad":%q}`, row, strings.Repeat(row, 1+n*n))
		}
		return fmt.Sprintf("{\n  \"row\": %q,\n  \"pad\": %q\n}\n", row, strings.Repeat(row, 1+n*n))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct{ Row string }
		json.NewDecoder(r.Body).Decode(&b)
		answer(200, answerOf(b.Row))(w, r)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, &sleeps{})
	const rows = 64
	results := doRows(c, rows)
	for i, got := range results {
		var want bytes.Buffer
		json.Compact(&want, []byte(answerOf(fmt.Sprint("r", i))))
		if !bytes.Equal(got.Body, want.Bytes()) {
			t.Errorf("row %d: body %.80s…, want %.80s…", i, got.Body, want.Bytes())
		}
	}
}

// doRows sends rows chat rows r0, r1, … through c at once and returns
// their results in order.
func doRows(c *Client, rows int) []inference.Result {
	results := make([]inference.Result, rows)
	var wg sync.WaitGroup
	for i := range rows {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":"chat","row":"r%d"}`, i)
			results[i] = c.Do(context.Background(), "/v1/chat/completions", json.RawMessage(body), Route{})
		})
	}
	wg.Wait()
	return results
}

// TestDoConcurrent runs many rows through one Client at once; with -race it
// checks that nothing is shared unsafely and that rows do not affect each other.
func TestDoConcurrent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{} // per row
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct{ Row string }
		json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		calls[b.Row]++
		n := calls[b.Row]
		mu.Unlock()
		if n == 1 { // every row is rate limited once
			answer(429, rateLimit, "Retry-After", "1")(w, r)
			return
		}
		answer(200, chatOK)(w, r)
	}))
	t.Cleanup(srv.Close)
	var s sleeps
	c := newClient(t, srv.URL, &s)

	const rows = 64
	results := doRows(c, rows)
	for i, got := range results {
		if got.StatusCode != 200 || got.Attempts != 2 || got.Fallback {
			t.Errorf("row %d: status %d, attempts %d, fallback %v; want 200, 2, false", i, got.StatusCode, got.Attempts, got.Fallback)
		}
	}
}

func TestShapeOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		endpoint string
		want     config.Provider
		ok       bool
	}{
		{"/v1/chat/completions", config.OpenAI, true},
		{"/v1/embeddings", config.OpenAI, true},
		{"/v1/responses", config.OpenAI, true},
		{"/v1/completions", config.OpenAI, true},
		{"/v1/messages", config.Anthropic, true},
		{"/v1/images/edits", "", false},
		{"/chat/completions", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := ShapeOf(tt.endpoint)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ShapeOf(%q) = %q, %v; want %q, %v", tt.endpoint, got, ok, tt.want, tt.ok)
		}
	}
}

func TestUsageOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		endpoint string
		body     string
		want     inference.Usage
	}{
		{"chat", "/v1/chat/completions",
			`{"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}`, inference.Usage{InputTokens: 11, OutputTokens: 5, TotalTokens: 16, CachedTokens: 0, ReasoningTokens: 0}},
		{"chat with details", "/v1/chat/completions",
			`{"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":3}}}`, inference.Usage{InputTokens: 11, OutputTokens: 5, TotalTokens: 16, CachedTokens: 8, ReasoningTokens: 3}},
		{"completions without total", "/v1/completions",
			`{"usage":{"prompt_tokens":3,"completion_tokens":4}}`, inference.Usage{InputTokens: 3, OutputTokens: 4, TotalTokens: 7, CachedTokens: 0, ReasoningTokens: 0}},
		{"embeddings", "/v1/embeddings",
			`{"usage":{"prompt_tokens":8,"total_tokens":8}}`, inference.Usage{InputTokens: 8, OutputTokens: 0, TotalTokens: 8, CachedTokens: 0, ReasoningTokens: 0}},
		{"responses", "/v1/responses",
			`{"usage":{"input_tokens":20,"output_tokens":9,"total_tokens":29,"input_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":2}}}`, inference.Usage{InputTokens: 20, OutputTokens: 9, TotalTokens: 29, CachedTokens: 4, ReasoningTokens: 2}},
		{"anthropic", "/v1/messages",
			`{"usage":{"input_tokens":12,"output_tokens":6}}`, inference.Usage{InputTokens: 12, OutputTokens: 6, TotalTokens: 18, CachedTokens: 0, ReasoningTokens: 0}},
		{"anthropic with cache", "/v1/messages",
			`{"usage":{"input_tokens":2,"cache_creation_input_tokens":10,"cache_read_input_tokens":30,"output_tokens":6}}`, inference.Usage{InputTokens: 42, OutputTokens: 6, TotalTokens: 48, CachedTokens: 30, ReasoningTokens: 0}},
		{"images", "/v1/images/generations",
			`{"usage":{"input_tokens":7,"output_tokens":272,"total_tokens":279,"input_tokens_details":{"text_tokens":7}}}`, inference.Usage{InputTokens: 7, OutputTokens: 272, TotalTokens: 279, CachedTokens: 0, ReasoningTokens: 0}},
		{"moderations", "/v1/moderations", `{"id":"modr-1","results":[]}`, inference.Usage{}},
		{"error body", "/v1/chat/completions", `{"error":{"message":"x"}}`, inference.Usage{}},
		{"not JSON", "/v1/messages", `oops`, inference.Usage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := UsageOf(tt.endpoint, []byte(tt.body)); got != tt.want {
				t.Errorf("UsageOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDoResponseTooLarge checks the cap on an upstream answer: a row whose
// answer is over it fails with response_too_large on that first answer,
// with no retry and no fallback (the upstream spent its tokens once), and
// an answer of exactly the cap goes through.
func TestDoResponseTooLarge(t *testing.T) {
	t.Parallel()
	const limit = 1 << 10
	pad := func(n int) string { return `{"x":"` + strings.Repeat("a", n-8) + `"}` }
	tests := []struct {
		name   string
		answer step
		want   inference.Result
	}{
		{"2xx over the cap", answer(200, pad(limit+1)), inference.Result{ErrCode: inference.CodeResponseTooLarge, Model: "chat", Attempts: 1}},
		{"5xx over the cap", answer(500, pad(limit+1)), inference.Result{ErrCode: inference.CodeResponseTooLarge, Model: "chat", Attempts: 1}},
		{"at the cap", answer(200, pad(limit)), inference.Result{StatusCode: 200, Model: "chat", Attempts: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, tt.answer, answer(200, chatOK), answer(200, chatOK))
			var s sleeps
			c := newClient(t, u.URL, &s)
			c.MaxResponseBytes = limit

			got := c.Do(context.Background(), "/v1/chat/completions", json.RawMessage(`{"model":"chat"}`), Route{})

			checkResult(t, got, tt.want)
			if n := len(u.requests()); n != 1 {
				t.Errorf("upstream called %d times, want 1", n)
			}
		})
	}
}

// A chunk's run defers a row's fallback (Route.Defer): when its model's
// attempts are spent on transient failures and a usable fallback exists,
// the row comes back failed, naming the fallback (FallbackTo), and nothing
// is sent to the fallback, which runs it later as a chunk of its own under
// its own capacity (docs/design.md "Scheduling", fallback rows).
func TestDoDefer(t *testing.T) {
	t.Parallel()
	only := func(models ...string) func(string) bool {
		return func(m string) bool { return slices.Contains(models, m) }
	}
	tests := []struct {
		name     string
		body     string
		route    Route
		steps    []step
		want     inference.Result
		to       string   // FallbackTo
		upstream []string // body.model of each upstream call
	}{
		{
			name:     "the model's own fallback",
			body:     `{"model":"chat"}`,
			route:    Route{Defer: true},
			steps:    times(4, answer(500, serverErr)),
			want:     inference.Result{StatusCode: 500, Model: "chat", Attempts: 4},
			to:       "chat-backup",
			upstream: []string{"chat-upstream", "chat-upstream", "chat-upstream", "chat-upstream"},
		},
		{
			name:     "the batch's fallback",
			body:     `{"model":"solo"}`,
			route:    Route{Defer: true, Fallback: "chat-backup"},
			steps:    times(4, answer(429, rateLimit)),
			want:     inference.Result{StatusCode: 429, Model: "solo", Attempts: 4},
			to:       "chat-backup",
			upstream: []string{"solo", "solo", "solo", "solo"},
		},
		{
			name:     "no usable fallback",
			body:     `{"model":"solo"}`,
			route:    Route{Defer: true, Fallback: "claude"},
			steps:    times(4, answer(500, serverErr)),
			want:     inference.Result{StatusCode: 500, Model: "solo", Attempts: 4},
			upstream: []string{"solo", "solo", "solo", "solo"},
		},
		{
			name:     "a fallback outside the allow-list",
			body:     `{"model":"chat"}`,
			route:    Route{Defer: true, Allowed: only("chat")},
			steps:    times(4, answer(500, serverErr)),
			want:     inference.Result{StatusCode: 500, Model: "chat", Attempts: 4},
			upstream: []string{"chat-upstream", "chat-upstream", "chat-upstream", "chat-upstream"},
		},
		{
			name:     "a permanent failure never falls back",
			body:     `{"model":"chat"}`,
			route:    Route{Defer: true},
			steps:    []step{answer(400, `{"error":{"message":"bad"}}`)},
			want:     inference.Result{StatusCode: 400, Model: "chat", Attempts: 1},
			upstream: []string{"chat-upstream"},
		},
		{
			name:     "an answer after a retry",
			body:     `{"model":"chat"}`,
			route:    Route{Defer: true},
			steps:    []step{answer(500, serverErr), answer(200, chatOK)},
			want:     inference.Result{StatusCode: 200, Model: "chat", Attempts: 2},
			upstream: []string{"chat-upstream", "chat-upstream"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, tt.steps...)
			c := newClient(t, up.URL, &sleeps{})

			got := c.Do(context.Background(), "/v1/chat/completions", json.RawMessage(tt.body), tt.route)

			checkResult(t, got, tt.want)
			if got.FallbackTo != tt.to {
				t.Errorf("FallbackTo = %q, want %q", got.FallbackTo, tt.to)
			}
			var models []string
			for _, r := range up.requests() {
				models = append(models, upstreamModel(t, r))
			}
			if fmt.Sprint(models) != fmt.Sprint(tt.upstream) {
				t.Errorf("upstream body.model = %v, want %v", models, tt.upstream)
			}
		})
	}
}

// A row of a fallback chunk runs on the chunk's model (Route.On), not its
// body's, which failed already: as a fallback, with no fallback of its
// own, and only on a model its key may use and of its shape.
func TestDoOn(t *testing.T) {
	t.Parallel()
	only := func(models ...string) func(string) bool {
		return func(m string) bool { return slices.Contains(models, m) }
	}
	tests := []struct {
		name     string
		body     string
		route    Route
		steps    []step
		want     inference.Result
		upstream []string // body.model of each upstream call
	}{
		{
			name:     "the fallback answers",
			body:     `{"model":"chat"}`,
			route:    Route{On: "chat-backup"},
			steps:    []step{answer(200, chatOK)},
			want:     inference.Result{StatusCode: 200, Model: "chat-backup", Fallback: true, Attempts: 1},
			upstream: []string{"backup-upstream"},
		},
		{
			name:     "no fallback of the fallback",
			body:     `{"model":"chat"}`,
			route:    Route{On: "chat-backup", Fallback: "solo", Defer: true},
			steps:    times(4, answer(503, serverErr)),
			want:     inference.Result{StatusCode: 503, Model: "chat-backup", Fallback: true, Attempts: 4},
			upstream: []string{"backup-upstream", "backup-upstream", "backup-upstream", "backup-upstream"},
		},
		{
			name:  "a fallback outside the allow-list",
			body:  `{"model":"chat"}`,
			route: Route{On: "chat-backup", Allowed: only("chat")},
			want:  inference.Result{ErrCode: inference.CodeModelNotAllowed, Model: "chat-backup"},
		},
		{
			name:  "a fallback of another shape",
			body:  `{"model":"chat"}`,
			route: Route{On: "claude"},
			want:  inference.Result{ErrCode: inference.CodeCrossShapeDispatch, Model: "claude"},
		},
		{
			name:  "a fallback not configured",
			body:  `{"model":"chat"}`,
			route: Route{On: "gone"},
			want:  inference.Result{ErrCode: inference.CodeModelNotFound},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, tt.steps...)
			c := newClient(t, up.URL, &sleeps{})

			got := c.Do(context.Background(), "/v1/chat/completions", json.RawMessage(tt.body), tt.route)

			checkResult(t, got, tt.want)
			if got.FallbackTo != "" {
				t.Errorf("FallbackTo = %q, want none", got.FallbackTo)
			}
			var models []string
			for _, r := range up.requests() {
				models = append(models, upstreamModel(t, r))
			}
			if fmt.Sprint(models) != fmt.Sprint(tt.upstream) {
				t.Errorf("upstream body.model = %v, want %v", models, tt.upstream)
			}
		})
	}
}

// A workflow step's call (Route.TimeLimit) is bounded by its model's
// call_time_limit, not its timeout, and one past it ends the row with
// request_time_limit, never retried and not billed; a 5xx before it is
// retried as ever.
func TestDoTimeLimit(t *testing.T) {
	t.Parallel()
	late := func(d time.Duration) step {
		return func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(d):
				answer(200, chatOK)(w, r)
			case <-r.Context().Done():
			}
		}
	}
	tests := []struct {
		name  string
		steps []step
		want  inference.Result
	}{
		{"past the limit: stopped once", []step{hang}, inference.Result{ErrCode: inference.CodeRequestTimeLimit, Model: "slow", Attempts: 1}},
		{"a 500, then past the limit", []step{answer(500, serverErr), hang}, inference.Result{ErrCode: inference.CodeRequestTimeLimit, Model: "slow", Attempts: 2}},
		{"longer than timeout, within the limit", []step{late(300 * time.Millisecond)}, inference.Result{StatusCode: 200, Model: "slow", Attempts: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, tt.steps...)
			var s sleeps
			got := newClient(t, up.URL, &s).Do(context.Background(), "/v1/chat/completions", json.RawMessage(`{"model":"slow"}`), Route{TimeLimit: true})
			checkResult(t, got, tt.want)
			if n := len(up.requests()); n != len(tt.steps) {
				t.Errorf("upstream saw %d calls, want %d", n, len(tt.steps))
			}
			if got.ErrCode != "" && (!strings.HasPrefix(got.ErrMessage, "request_time_limit") || got.Usage != (inference.Usage{})) {
				t.Errorf("message %q, usage %+v: want it to start request_time_limit, with no usage", got.ErrMessage, got.Usage)
			}
		})
	}
}

// TestRefusalCopiesNoBody: Refusal, which the plan asks of every row,
// makes no copy of the row's body (a 200 MB input made 200 MB of them,
// gjson.ParseBytes's, to check each body was an object).
func TestRefusalCopiesNoBody(t *testing.T) {
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K}\n"))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(` {"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 64<<10) + `"}]}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if res, refused := Refusal(models, "/v1/chat/completions", body); refused {
			t.Fatalf("refused: %+v", res)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > uint64(len(body))/8 {
		t.Errorf("Refusal allocated %d bytes a call for a body of %d", per, len(body))
	}
	for _, body := range []string{` [1]`, `"s"`, "\n7"} {
		if res, _ := Refusal(models, "/v1/chat/completions", []byte(body)); res.ErrCode != inference.CodeInvalidRequest {
			t.Errorf("%q: %+v, want invalid_request: not an object", body, res)
		}
	}
}

// BenchmarkRefusal is what the plan spends on each row of the large
// bench (a 4 KB chat body) to tell whether it is refused without a call.
func BenchmarkRefusal(b *testing.B) {
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K}\n"))
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet ", 146) + `"}]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if res, refused := Refusal(models, "/v1/chat/completions", body); refused {
			b.Fatalf("refused: %+v", res)
		}
	}
}

// FuzzRefusal: Refusal, which skips the syntax and duplicate-name checks
// for a body internal/jsonl validated, answers every such body as the
// executor's route, which makes them, does: gjson.ValidBytes accepts all
// that encoding/json.Valid does.
func FuzzRefusal(f *testing.F) {
	models, err := config.ParseModels([]byte(`
moderation_model: chat
models:
  - {name: chat, provider: openai, base_url: http://x/v1, api_key_env: K}
  - {name: claude, provider: anthropic, base_url: http://x, api_key_env: K}
`))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"model":"chat","messages":[]}`, `{"model":"claude","max_tokens":1}`, `{"model":null}`, `{"model":"nope"}`,
		`{"model":"chat","relay":{"refused":"no"}}`, ` {"model":"chat","x":[-0.0e-0,1E+2,"\u00e9\ud800\"",true,null,{}]}`,
		"{\"model\":\"chat\",\"x\":\"\xff\x7f\"}", `{"\u006dodel":"chat"}`, `[]`, `{"model":1}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, moderation bool) {
		if !json.Valid(body) || ijson.Check(body) != nil {
			return // jsonl refuses such a row
		}
		path := "/v1/chat/completions"
		if moderation {
			path = "/v1/moderations"
		}
		_, want, wantOK := route(models, path, body, false)
		got, refused := Refusal(models, path, body)
		if refused == wantOK || got.ErrCode != want.ErrCode || got.ErrMessage != want.ErrMessage || got.Model != want.Model {
			t.Fatalf("Refusal(%q) = %+v, %v; the executor's route says %+v, %v", body, got, refused, want, !wantOK)
		}
	})
}

// FuzzJSONBody: whatever a provider answers, the body a row's line takes
// in (jsonBody) is valid JSON without a line break, and a body that is
// JSON keeps its value: the same JSON as encoding/json compacts it.
func FuzzJSONBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","choices":[]}`, "{\n  \"id\": \"x\"\n}\n", `{"a": 1, "b" : [ true ]}`, " \t{}\r\n", `"text"`, `12`,
		`<html>bad gateway</html>`, "", `{"a":"\u2028<&>"}`, "{\"a\":\"\t\"}", `{"a":1}{"b":2}`, `{"a":1`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out := jsonBody(502, b)
		if !json.Valid(out) || bytes.ContainsAny(out, "\r\n") {
			t.Fatalf("jsonBody(%q) = %q: want valid JSON on one line", b, out)
		}
		if !json.Valid(b) {
			return
		}
		var want, got bytes.Buffer
		json.Compact(&want, b)
		json.Compact(&got, out)
		if want.String() != got.String() {
			t.Fatalf("jsonBody(%q) = %q: want %q", b, out, want.String())
		}
	})
}
