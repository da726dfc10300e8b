package mockup_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/mockup"
)

func newServer(t *testing.T, opts mockup.Options) (*mockup.Server, *httptest.Server) {
	t.Helper()
	m := mockup.New(opts)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func send(t *testing.T, base, method, path, body string, header http.Header) reply {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s %s: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// post sends body with the credentials the route's API expects.
func post(t *testing.T, base, path, body string) reply {
	t.Helper()
	return send(t, base, http.MethodPost, path, body, authFor(path))
}

func authFor(path string) http.Header {
	if path == "/v1/messages" {
		return http.Header{"X-Api-Key": {"test-key"}}
	}
	return http.Header{"Authorization": {"Bearer test-key"}}
}

// bodyFor is the smallest valid body for path that carries text where a
// real client would put the prompt.
func bodyFor(path, model, text string) string {
	b := map[string]any{"model": model}
	switch path {
	case "/v1/embeddings", "/v1/responses":
		b["input"] = text
	case "/v1/completions":
		b["prompt"] = text
	case "/v1/messages":
		b["max_tokens"] = 16
		b["messages"] = []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text}}}}
	default:
		b["messages"] = []any{map[string]any{"role": "user", "content": text}}
	}
	return mustJSON(b)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// errorType checks that body is an error in the shape of path's API and
// returns its error.type.
func errorType(t *testing.T, path string, body []byte) string {
	t.Helper()
	if path == "/v1/messages" {
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Message == "" {
			t.Errorf("body %s is not an Anthropic error (err %v)", body, err)
		}
		return e.Error.Type
	}
	var e struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("body %s is not JSON: %v", body, err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[k]; !ok {
			t.Errorf("OpenAI error %s lacks error.%s", body, k)
		}
	}
	typ, _ := e.Error["type"].(string)
	return typ
}

func TestForcedFailures(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})

	tests := []struct {
		name       string
		path       string
		model      string
		text       string
		header     http.Header
		wantStatus int
		wantType   string
	}{
		{"429 marker", "/v1/chat/completions", "m", "please [[mock:429]] now", nil, 429, "requests"},
		{"500 marker", "/v1/chat/completions", "m", "[[mock:500]]", nil, 500, "server_error"},
		{"400 marker", "/v1/chat/completions", "m", "[[mock:400]]", nil, 400, "invalid_request_error"},
		{"any status marker", "/v1/embeddings", "m", "[[mock:503]]", nil, 503, "server_error"},
		{"highest status wins", "/v1/chat/completions", "m", "[[mock:429]] [[mock:500]]", nil, 500, "server_error"},
		{"marker in responses input", "/v1/responses", "m", "[[mock:400]]", nil, 400, "invalid_request_error"},
		{"marker in completions prompt", "/v1/completions", "m", "[[mock:500]]", nil, 500, "server_error"},
		{"anthropic 429", "/v1/messages", "m", "[[mock:429]]", nil, 429, "rate_limit_error"},
		{"anthropic 500", "/v1/messages", "m", "[[mock:500]]", nil, 500, "api_error"},
		{"anthropic 400", "/v1/messages", "m", "[[mock:400]]", nil, 400, "invalid_request_error"},
		{"sleep then success", "/v1/chat/completions", "m", "[[mock:sleep=1ms]]", nil, 200, ""},
		{"unknown marker", "/v1/chat/completions", "m", "[[mock:teapot]]", nil, 400, "invalid_request_error"},
		{"bad sleep", "/v1/messages", "m", "[[mock:sleep=soon]]", nil, 400, "invalid_request_error"},
		{"bad count", "/v1/chat/completions", "m", "[[mock:fail=-1]]", nil, 400, "invalid_request_error"},
		{"ratelimited model", "/v1/chat/completions", "gpt-4o-ratelimited", "hi", nil, 429, "requests"},
		{"broken model", "/v1/messages", "claude-broken", "hi", nil, 500, "api_error"},
		{"suffix mid-name is a name", "/v1/chat/completions", "gpt-broken-not", "hi", nil, 200, ""},
		{"status header", "/v1/completions", "m", "hi", http.Header{"X-Mock-Status": {"503"}}, 503, "server_error"},
		{"status header anthropic", "/v1/messages", "m", "hi", http.Header{"X-Mock-Status": {"529"}}, 529, "overloaded_error"},
		{"bad status header", "/v1/chat/completions", "m", "hi", http.Header{"X-Mock-Status": {"200"}}, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			header := authFor(tt.path)
			for k, v := range tt.header {
				header[k] = v
			}
			got := send(t, srv.URL, http.MethodPost, tt.path, bodyFor(tt.path, tt.model, tt.text), header)
			if got.status != tt.wantStatus {
				t.Fatalf("got status %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantStatus >= 400 {
				if typ := errorType(t, tt.path, got.body); typ != tt.wantType {
					t.Errorf("got error type %q, want %q", typ, tt.wantType)
				}
			}
			if ra := got.header.Get("Retry-After"); (got.status == 429) != (ra == "1") {
				t.Errorf("status %d got Retry-After %q, want \"1\" on 429s only", got.status, ra)
			}
			if !strings.HasPrefix(got.header.Get("x-request-id"), "req_") {
				t.Errorf("got x-request-id %q, want req_…", got.header.Get("x-request-id"))
			}
		})
	}
}

// A marker deep inside a content-part array counts like one in a plain string.
func TestMarkerInContentParts(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"ok"},{"type":"text","text":"[[mock:500]]"}]}]}`
	if got := post(t, srv.URL, "/v1/chat/completions", body); got.status != 500 {
		t.Errorf("got status %d, want 500", got.status)
	}
}

// Hangs, sleeps and latency end when the client gives up, and are
// counted as 499. The client gives up once the mock has the request (a
// deadline could pass before it arrives, on a busy machine).
func TestWaitsEndWithTheClient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts mockup.Options
		text string
	}{
		{"hang", mockup.Options{}, "[[mock:hang]]"},
		{"sleep", mockup.Options{}, "[[mock:sleep=1h]]"},
		{"latency", mockup.Options{Latency: time.Hour}, "hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, srv := newServer(t, tt.opts)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
				strings.NewReader(bodyFor("/v1/chat/completions", "m", tt.text)))
			req.Header = authFor("/v1/chat/completions")
			done := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
					err = fmt.Errorf("got status %d, want no answer", resp.StatusCode)
				}
				done <- err
			}()
			waitStats(t, m, "the request", func(s mockup.Stats) bool { return s.Requests == 1 })
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want the client's cancel", err)
			}
			srv.Close() // waits for the handler to return
			if got := m.Stats().ByStatus; !reflect.DeepEqual(got, map[int]int64{499: 1}) {
				t.Errorf("got statuses %v, want one 499", got)
			}
		})
	}
}

func TestFailuresPerRow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		text   string
		models []string // one request per model, in order
		want   []int
	}{
		{"fail=2", "[[mock:fail=2]] row", []string{"a", "a", "a", "a"}, []int{500, 500, 200, 200}},
		{"429x=2", "[[mock:429x=2]] row", []string{"a", "a", "a"}, []int{429, 429, 200}},
		{"fail=0", "[[mock:fail=0]] row", []string{"a"}, []int{200}},
		{"fallback model is the same row", "[[mock:fail=2]] row", []string{"primary", "fallback", "primary"}, []int{500, 500, 200}},
		{"suffix failures still count", "[[mock:fail=2]] row", []string{"x-broken", "x-broken", "y"}, []int{500, 500, 200}},
		{"fail before 429x", "[[mock:fail=1]] [[mock:429x=2]] row", []string{"a", "a", "a"}, []int{500, 429, 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, srv := newServer(t, mockup.Options{})
			var got []int
			for _, model := range tt.models {
				got = append(got, post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", model, tt.text)).status)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got statuses %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRowsAreCountedApartAndReset(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	chat := func(text string) int {
		return post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "m", text)).status
	}
	var got []int
	got = append(got, chat("[[mock:fail=1]] row 1"), chat("[[mock:fail=1]] row 2"), chat("[[mock:fail=1]] row 1"))
	if r := send(t, srv.URL, http.MethodPost, "/mock/reset", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("reset: got status %d, want 204", r.status)
	}
	got = append(got, chat("[[mock:fail=1]] row 1"))
	if want := []int{500, 500, 200, 500}; !slices.Equal(got, want) {
		t.Errorf("got statuses %v, want %v", got, want)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{})
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "gpt", "one"))
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "gpt", "two"))
	post(t, srv.URL, "/v1/embeddings", bodyFor("/v1/embeddings", "emb", "three"))
	post(t, srv.URL, "/v1/messages", bodyFor("/v1/messages", "claude-ratelimited", "four"))
	send(t, srv.URL, http.MethodPost, "/v1/chat/completions", bodyFor("/v1/chat/completions", "gpt", "five"), nil)
	send(t, srv.URL, http.MethodGet, "/v1/chat/completions", "", authFor("/v1/chat/completions"))
	post(t, srv.URL, "/v1/nope", "{}")
	send(t, srv.URL, http.MethodGet, "/mock/options", "", nil) // control requests are not counted

	want := mockup.Stats{
		Requests: 7,
		ByModel:  map[string]int64{"gpt": 3, "emb": 1, "claude-ratelimited": 1},
		ByPath:   map[string]int64{"/v1/chat/completions": 4, "/v1/embeddings": 1, "/v1/messages": 1, "/v1/nope": 1},
		ByStatus: map[int]int64{200: 3, 429: 1, 401: 1, 405: 1, 404: 1},
		// One request at a time: each model peaked at one in flight.
		PeakInFlight: map[string]int64{"gpt": 1, "emb": 1, "claude-ratelimited": 1},
		BatchRows:    map[string]int64{},
		// The requests that reached the model checks, by their key.
		ByKey: map[string]int64{"test-key": 4}, LimitedByKey: map[string]int64{},
	}
	if got := m.Stats(); !reflect.DeepEqual(got, want) {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	r := send(t, srv.URL, http.MethodGet, "/mock/stats", "", nil)
	var got mockup.Stats
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 {
		t.Fatalf("GET /mock/stats: status %d, %v: %s", r.status, err, r.body)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /mock/stats = %+v, want %+v", got, want)
	}

	m.Reset()
	if got, want := m.Stats(), (mockup.Stats{ByModel: map[string]int64{}, ByPath: map[string]int64{}, ByStatus: map[int]int64{}, PeakInFlight: map[string]int64{}, BatchRows: map[string]int64{},
		ByKey: map[string]int64{}, LimitedByKey: map[string]int64{}}); !reflect.DeepEqual(got, want) {
		t.Errorf("after Reset, Stats() = %+v, want zero", got)
	}
}

// PeakInFlight is the most requests of one model answered at once, not a
// count of arrivals: capacity checks (the benchmark's max_concurrency bar)
// read it, so it must see overlap, forget nothing that ended, and keep
// models apart.
func TestPeakInFlight(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	held := map[string]int{"a": 5, "b": 2}
	done := make(chan struct{}, 7)
	for model, n := range held {
		for range n {
			go func() {
				defer func() { done <- struct{}{} }()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
					strings.NewReader(bodyFor("/v1/chat/completions", model, "[[mock:hang]]")))
				req.Header = authFor("/v1/chat/completions")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
	}
	waitStats(t, m, "7 held requests to arrive", func(s mockup.Stats) bool { return s.Requests == 7 })
	if got, want := m.Stats().PeakInFlight, map[string]int64{"a": 5, "b": 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("with 5 and 2 requests held: PeakInFlight = %v, want %v", got, want)
	}

	cancel()
	for range 7 {
		<-done
	}
	waitStats(t, m, "the held requests to end", func(s mockup.Stats) bool { return s.ByStatus[499] == 7 })
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "a", "one more"))
	if got := m.Stats().PeakInFlight["a"]; got != 5 {
		t.Errorf("after the held requests ended: PeakInFlight[a] = %d, want the peak of 5 kept", got)
	}

	// After a Reset, one request at a time peaks at one: the ended requests
	// left the in-flight count.
	m.Reset()
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "a", "alone"))
	if got, want := m.Stats().PeakInFlight, map[string]int64{"a": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("after Reset and one request: PeakInFlight = %v, want %v", got, want)
	}
}

// waitStats waits until the server's stats satisfy cond: requests are
// counted by the server's goroutines, after the client has sent them.
func waitStats(t *testing.T, m *mockup.Server, what string, cond func(mockup.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond(m.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s; stats %+v", what, m.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSameRequestSameAnswer(t *testing.T) {
	t.Parallel()
	_, srv1 := newServer(t, mockup.Options{})
	_, srv2 := newServer(t, mockup.Options{})
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/completions", "/v1/messages"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			body := bodyFor(path, "m", "same words")
			first := post(t, srv1.URL, path, body)
			again := post(t, srv1.URL, path, body)
			elsewhere := post(t, srv2.URL, path, body)
			other := post(t, srv1.URL, path, bodyFor(path, "m", "other words"))
			if first.status != 200 {
				t.Fatalf("got status %d: %s", first.status, first.body)
			}
			for _, r := range []reply{again, elsewhere} {
				if !bytes.Equal(r.body, first.body) || r.header.Get("x-request-id") != first.header.Get("x-request-id") {
					t.Errorf("got %s (%s), want %s (%s)", r.body, r.header.Get("x-request-id"), first.body, first.header.Get("x-request-id"))
				}
			}
			if bytes.Equal(other.body, first.body) || other.header.Get("x-request-id") == first.header.Get("x-request-id") {
				t.Errorf("a different request got the same answer %s", other.body)
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{RevokedKeys: []string{"placeholder"}})
	tests := []struct {
		name       string
		path       string
		header     http.Header
		wantStatus int
		wantType   string
	}{
		{"openai without key", "/v1/chat/completions", nil, 401, "invalid_request_error"},
		{"openai refused key", "/v1/chat/completions", http.Header{"Authorization": {"Bearer placeholder"}}, 401, "invalid_request_error"},
		{"anthropic refused key", "/v1/messages", http.Header{"X-Api-Key": {"placeholder"}}, 401, "authentication_error"},
		{"openai basic auth", "/v1/embeddings", http.Header{"Authorization": {"Basic dTpw"}}, 401, "invalid_request_error"},
		{"openai empty bearer", "/v1/responses", http.Header{"Authorization": {"Bearer "}}, 401, "invalid_request_error"},
		{"openai x-api-key is not enough", "/v1/completions", http.Header{"X-Api-Key": {"k"}}, 401, "invalid_request_error"},
		{"openai any bearer", "/v1/completions", http.Header{"Authorization": {"Bearer anything"}}, 200, ""},
		{"anthropic without key", "/v1/messages", nil, 401, "authentication_error"},
		{"anthropic empty key", "/v1/messages", http.Header{"X-Api-Key": {" "}}, 401, "authentication_error"},
		{"anthropic basic auth", "/v1/messages", http.Header{"Authorization": {"Basic dTpw"}}, 401, "authentication_error"},
		{"anthropic any key", "/v1/messages", http.Header{"X-Api-Key": {"anything"}}, 200, ""},
		{"anthropic any bearer", "/v1/messages", http.Header{"Authorization": {"Bearer anything"}}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := send(t, srv.URL, http.MethodPost, tt.path, bodyFor(tt.path, "m", "hi"), tt.header)
			if got.status != tt.wantStatus {
				t.Fatalf("got status %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantStatus != 200 {
				if typ := errorType(t, tt.path, got.body); typ != tt.wantType {
					t.Errorf("got error type %q, want %q", typ, tt.wantType)
				}
			}
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantParam  string
	}{
		{"bad JSON", "POST", "/v1/chat/completions", `{"model":`, 400, ""},
		{"bad JSON anthropic", "POST", "/v1/messages", `not json`, 400, ""},
		{"array body", "POST", "/v1/embeddings", `[]`, 400, ""},
		{"null body", "POST", "/v1/responses", `null`, 400, ""},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "model"},
		{"model not a string", "POST", "/v1/completions", `{"model":5,"prompt":"x"}`, 400, "model"},
		{"missing model anthropic", "POST", "/v1/messages", `{"max_tokens":1,"messages":[]}`, 400, ""},
		{"stream", "POST", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, 400, "stream"},
		{"stream anthropic", "POST", "/v1/messages", `{"model":"m","stream":true,"messages":[]}`, 400, ""},
		{"stream false is fine", "POST", "/v1/chat/completions", `{"model":"m","stream":false,"messages":[]}`, 200, ""},
		{"unknown path", "POST", "/v1/nope", `{"model":"m"}`, 404, ""},
		{"no /v1 prefix", "POST", "/chat/completions", `{"model":"m"}`, 404, ""},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := send(t, srv.URL, tt.method, tt.path, tt.body, authFor(tt.path))
			if got.status != tt.wantStatus {
				t.Fatalf("got status %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantStatus == 200 {
				return
			}
			if typ := errorType(t, tt.path, got.body); typ != "invalid_request_error" {
				t.Errorf("got error type %q, want invalid_request_error", typ)
			}
			if tt.path == "/v1/messages" {
				return
			}
			var e struct {
				Error struct {
					Param *string `json:"param"`
				} `json:"error"`
			}
			_ = json.Unmarshal(got.body, &e)
			if gotParam := ptrString(e.Error.Param); gotParam != tt.wantParam {
				t.Errorf("got param %q, want %q", gotParam, tt.wantParam)
			}
		})
	}
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func TestEmbeddingEncodings(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	// embed returns the raw "embedding" of a string input and a token input.
	embed := func(encoding string) []json.RawMessage {
		body := map[string]any{"model": "m", "input": []any{"some text", []any{1, 2, 3}}, "encoding_format": encoding}
		r := post(t, srv.URL, "/v1/embeddings", mustJSON(body))
		var got struct {
			Data []struct {
				Embedding json.RawMessage `json:"embedding"`
			} `json:"data"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 || len(got.Data) != 2 {
			t.Fatalf("got status %d, %v: %s", r.status, err, r.body)
		}
		if got.Usage.PromptTokens != 5 { // 2 words + 3 tokens
			t.Errorf("got prompt_tokens %d, want 5", got.Usage.PromptTokens)
		}
		var out []json.RawMessage
		for _, d := range got.Data {
			out = append(out, d.Embedding)
		}
		return out
	}

	floats, encoded := embed("float"), embed("base64")
	for i := range floats {
		var want []float32
		var b64 string
		if err := json.Unmarshal(floats[i], &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(encoded[i], &b64); err != nil {
			t.Fatalf("base64 embedding %s: %v", encoded[i], err)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(raw)/4)
		for j := range got {
			got[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
		if !slices.Equal(got, want) {
			t.Errorf("input %d: base64 decodes to %v, want %v", i, got, want)
		}
	}
}

func TestRandomRates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts mockup.Options
		want int
	}{
		{"no failures", mockup.Options{}, 200},
		{"all errors", mockup.Options{ErrorRate: 1}, 500},
		{"all rate limited", mockup.Options{RateLimitRate: 1}, 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, srv := newServer(t, tt.opts)
			for i := range 5 {
				got := post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "m", "hi"))
				if got.status != tt.want {
					t.Fatalf("request %d: got status %d, want %d", i, got.status, tt.want)
				}
			}
		})
	}
}

// The same seed gives the same failures, on another server, after
// SetOptions and after Reset.
func TestSeedRepeats(t *testing.T) {
	t.Parallel()
	opts := mockup.Options{ErrorRate: 0.3, RateLimitRate: 0.3, Seed: 42}
	run := func(srv *httptest.Server) []int {
		var got []int
		for range 30 {
			got = append(got, post(t, srv.URL, "/v1/embeddings", bodyFor("/v1/embeddings", "m", "hi")).status)
		}
		return got
	}
	m, srv := newServer(t, opts)
	first := run(srv)
	for _, status := range []int{200, 429, 500} {
		if !slices.Contains(first, status) {
			t.Fatalf("got %v, want a mix of 200, 429 and 500", first)
		}
	}

	_, other := newServer(t, opts)
	if got := run(other); !slices.Equal(got, first) {
		t.Errorf("another server: got %v, want %v", got, first)
	}
	m.SetOptions(opts)
	if got := run(srv); !slices.Equal(got, first) {
		t.Errorf("after SetOptions: got %v, want %v", got, first)
	}
	m.Reset()
	if got := run(srv); !slices.Equal(got, first) {
		t.Errorf("after Reset: got %v, want %v", got, first)
	}
}

func TestOptionsEndpoint(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{Seed: 7})

	r := send(t, srv.URL, http.MethodPost, "/mock/options", `{"rate_limit_rate":1,"retry_after":"1.5s"}`, nil)
	want := `{"latency":"0s","error_rate":0,"rate_limit_rate":1,"retry_after":"1.5s","seed":7,"region":"us-east-1","batch_delay":"0s","record":false,"rpm":0,"tpm":0,"rate_window":"1m0s","revoked_keys":null}`
	if r.status != 200 || strings.TrimSpace(string(r.body)) != want {
		t.Errorf("POST /mock/options: got %d %s, want 200 %s", r.status, r.body, want)
	}
	if got := send(t, srv.URL, http.MethodGet, "/mock/options", "", nil); strings.TrimSpace(string(got.body)) != want {
		t.Errorf("GET /mock/options: got %s, want %s", got.body, want)
	}

	got := post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "m", "hi"))
	if got.status != 429 || got.header.Get("Retry-After") != "1.5" || got.header.Get("retry-after-ms") != "1500" {
		t.Errorf("got status %d Retry-After %q retry-after-ms %q, want 429 1.5 1500",
			got.status, got.header.Get("Retry-After"), got.header.Get("retry-after-ms"))
	}

	for _, bad := range []string{
		`{"error_rate":2}`,
		`{"rate_limit_rate":-0.1}`,
		`{"latency":"fast"}`,
		`{"latency":250}`,
		`{"retry_after":"-1s"}`,
		`{"rpm":-1}`,
		`{"rate_window":"1"}`,
		`{"errorRate":0.1}`,
		`not json`,
	} {
		r := send(t, srv.URL, http.MethodPost, "/mock/options", bad, nil)
		if r.status != 400 {
			t.Errorf("POST /mock/options %s: got status %d, want 400", bad, r.status)
		}
	}
	if got, want := m.Stats().ByStatus, map[int]int64{429: 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("got statuses %v, want %v", got, want)
	}
	if got := send(t, srv.URL, http.MethodGet, "/mock/options", "", nil); strings.TrimSpace(string(got.body)) != want {
		t.Errorf("after rejected updates, GET /mock/options: got %s, want %s", got.body, want)
	}
}

func TestControlRoutes(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	tests := []struct {
		method, path string
		want         int
	}{
		{"GET", "/mock/stats", 200},
		{"POST", "/mock/stats", 405},
		{"GET", "/mock/reset", 405},
		{"GET", "/mock/nope", 404},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			if got := send(t, srv.URL, tt.method, tt.path, "", nil); got.status != tt.want {
				t.Errorf("got status %d, want %d", got.status, tt.want)
			}
		})
	}
}

// Every endpoint a batch row may name has a route in the mock, so a batch
// of any endpoint runs locally.
func TestEveryEndpointAnswered(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	for _, e := range endpoint.All {
		t.Run(e.Path, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest("POST", srv.URL+e.Path, strings.NewReader(`{"model":"m","input":"hi","prompt":"hi","messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer k")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("got %d %s, want 200", res.StatusCode, body)
			}
		})
	}
}

// Latency runs from a request's arrival: a body that takes the whole
// latency to arrive is answered as soon as it is read, not a latency
// later, so the mock's own reading and parsing add nothing to it. The
// margin is the whole latency: the old reading answered a latency after
// the body's last byte.
func TestLatencyRunsFromArrival(t *testing.T) {
	t.Parallel()
	const latency = 2 * time.Second
	_, srv := newServer(t, mockup.Options{Latency: latency})
	body := bodyFor("/v1/chat/completions", "m", "hi")
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", pr)
	req.Header = authFor("/v1/chat/completions")
	req.ContentLength = int64(len(body))
	go func() {
		pw.Write([]byte(body[:1])) // the headers and a first byte: the request has arrived
		time.Sleep(latency)
		pw.Write([]byte(body[1:]))
		pw.Close()
	}()
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got status %d", resp.StatusCode)
	}
	if after := time.Since(sent) - latency; after >= latency {
		t.Fatalf("answered %v after the body's last byte; want the answer once it is read (latency %v from arrival)", after, latency)
	}
}
