package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/errs"
)

// fakeCounter is a RequestCounter in memory; err, if set, fails every count.
type fakeCounter struct {
	mu   sync.Mutex
	hits map[string]int64
	err  error
}

func (c *fakeCounter) CountRequest(_ context.Context, keyID string, second int64) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.hits == nil {
		c.hits = map[string]int64{}
	}
	k := keyID + "/" + time.Unix(second, 0).UTC().Format(time.RFC3339)
	c.hits[k]++
	return c.hits[k], nil
}

func TestRateLimiterAllow(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	c := &fakeCounter{}
	l := &RateLimiter{Counter: c, PerSecond: 3, Now: func() time.Time { return now }}
	ctx := context.Background()
	for i := range 3 {
		if err := l.Allow(ctx, "key-a"); err != nil {
			t.Fatalf("request %d within the limit: %v", i+1, err)
		}
	}
	err := l.Allow(ctx, "key-a")
	var e *errs.Error
	if !errors.As(err, &e) || e.Kind != errs.RateLimited || e.RetryAfter != 1 || e.Code != "rate_limit_exceeded" || !strings.Contains(e.Message, "3 requests per second") {
		t.Fatalf("fourth request in a second: got %#v, want RateLimited with Retry-After 1 naming the limit", err)
	}
	if err := l.Allow(ctx, "key-b"); err != nil {
		t.Fatalf("another key in the same second: got %v, want allowed (the limit is per key)", err)
	}
	now = now.Add(time.Second)
	if err := l.Allow(ctx, "key-a"); err != nil {
		t.Fatalf("the next second: got %v, want allowed", err)
	}

	// A counter that cannot count lets requests through.
	down := &RateLimiter{Counter: &fakeCounter{err: errors.New("dynamodb down")}, PerSecond: 1, Log: slog.New(slog.DiscardHandler), Now: time.Now}
	for range 3 {
		if err := down.Allow(ctx, "key-a"); err != nil {
			t.Fatalf("counter down: got %v, want allowed", err)
		}
	}
	var none *RateLimiter
	if err := none.Allow(ctx, "key-a"); err != nil || NewRateLimiter(c, 0, nil) != nil {
		t.Fatalf("no limiter: got %v, want nothing limited", err)
	}
}

// keyStore is an auth.Store holding keys in memory.
type keyStore struct{ keys map[string]apikey.Key }

func (s keyStore) GetKey(_ context.Context, hash string) (apikey.Key, error) {
	k, ok := s.keys[hash]
	if !ok {
		return apikey.Key{}, apikey.ErrNoKey
	}
	return k, nil
}
func (keyStore) KeyByID(context.Context, string) (apikey.Key, error) {
	return apikey.Key{}, apikey.ErrNoKey
}

func newKeyStore(raw, tenant string) keyStore {
	h := apikey.Hash(raw)
	return keyStore{keys: map[string]apikey.Key{h: {Hash: h, ID: h[:12], Tenant: tenant, Scopes: auth.AllScopes}}}
}

// A key over its limit gets 429 with Retry-After, in OpenAI's shape on the
// OpenAI routes and Anthropic's under /v1/messages; no handler runs.
func TestRateLimitResponses(t *testing.T) {
	t.Parallel()
	const raw = "rb-limits-test-key----------------------------"
	now := time.Unix(1_700_000_000, 0)
	a := &API{
		Auth:    auth.Authenticator{Store: newKeyStore(raw, "acme")},
		Limiter: &RateLimiter{Counter: &fakeCounter{}, PerSecond: 1, Now: func() time.Time { return now }},
		Log:     slog.New(slog.DiscardHandler),
	}
	h := a.Handler()
	do := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("Authorization", "Bearer "+raw)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// The first request of the second is let through (and refused by the
	// handler for its bad limit, which touches nothing else).
	if w := do("/v1/files?limit=0"); w.Code != http.StatusBadRequest {
		t.Fatalf("first request: got %d %s, want 400 from the handler", w.Code, w.Body)
	}
	tests := []struct {
		path string
		want func(body map[string]any) bool
	}{
		{"/v1/files", func(b map[string]any) bool {
			e, _ := b["error"].(map[string]any)
			return e["type"] == "rate_limit_error" && e["code"] == "rate_limit_exceeded" && strings.Contains(e["message"].(string), "1 requests per second")
		}},
		{"/v1/batches", func(b map[string]any) bool {
			e, _ := b["error"].(map[string]any)
			return e["type"] == "rate_limit_error" && e["code"] == "rate_limit_exceeded"
		}},
		{"/v1/messages/batches", func(b map[string]any) bool {
			e, _ := b["error"].(map[string]any)
			return b["type"] == "error" && e["type"] == "rate_limit_error" && strings.Contains(e["message"].(string), "rate limit")
		}},
	}
	for _, tt := range tests {
		w := do(tt.path)
		var body map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || !tt.want(body) {
			t.Errorf("GET %s over the limit: got %d Retry-After %q %s", tt.path, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	// An unknown key is refused before it is counted: 401, not 429.
	r := httptest.NewRequest("GET", "/v1/files", nil)
	r.Header.Set("Authorization", "Bearer rb-unknown")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("unknown key: got %d, want 401", w.Code)
	}
}

func TestCheckDepth(t *testing.T) {
	t.Parallel()
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"flat", `{"a":1}`, true},
		{"at the limit", nest(maxDepth), true},
		{"one past", nest(maxDepth + 1), false},
		{"objects", strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1), false},
		{"brackets in strings", `{"a":"` + strings.Repeat("[{", 200) + `"}`, true},
		{"escaped quote", `{"a":"\"` + strings.Repeat("[", 200) + `"}`, true},
		{"escaped backslash ends the string", `{"a":"\\"` + `,"b":` + nest(maxDepth+1) + `}`, false},
		{"unbalanced closers", strings.Repeat("]", 1000), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkDepth([]byte(tt.body), maxDepth)
			if (err == nil) != tt.ok {
				t.Fatalf("got %v, want ok=%v", err, tt.ok)
			}
			if err != nil && (!errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "deeper than 64")) {
				t.Fatalf("got %v, want a 400 naming the depth", err)
			}
		})
	}
}

// Deeply nested request bodies get a 400 that says so, before decoding:
// both within encoding/json's own bound and far past it.
func TestDecodeDeepJSON(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{maxDepth + 1, 20_000, 1 << 20} {
		body := `{"requests":[` + strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth) + `]}`
		_, err := decodeCreate([]byte(body))
		if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "deeper than") {
			t.Errorf("depth %d: got %v, want a 400 naming the depth", depth, err)
		}
	}
}

// A body with a duplicate member name at any depth is a 400 naming it, on
// every route (they all decode with unmarshal): encoding/json would keep
// the last member where the router reads the first.
func TestDecodeDuplicateMembers(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"endpoint":"/v1/chat/completions","input_file_id":"file-a","input_file_id":"file-b"}`,
		`{"endpoint":"/v1/chat/completions","requests":[{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","model":"o1-pro"}}]}`,
		`{"metadata":{"a":"1","\u0061":"2"}}`,
	} {
		_, err := decodeCreate([]byte(body))
		if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), "duplicate member name") {
			t.Errorf("%s: got %v, want a 400 naming the duplicate", body, err)
		}
	}
	var v completeRequest
	if err := unmarshal([]byte(`{"part_ids":["part_a"],"part_ids":["part_b"]}`), &v); !errs.Is(err, errs.Invalid) {
		t.Errorf("complete: got %v, want a 400", err)
	}
}

// A multipart filename reaches the files service as sent, so a path in it
// is refused there rather than silently cut to its base name.
func TestReadFormKeepsRawFilename(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"../../x.jsonl", "a/b.jsonl", `a\b.jsonl`, "plain.jsonl"} {
		body := "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + strings.ReplaceAll(name, `\`, `\\`) + "\"\r\n\r\nx\r\n--B--\r\n"
		r := httptest.NewRequest("POST", "/v1/files", bytes.NewReader([]byte(body)))
		r.Header.Set("Content-Type", "multipart/form-data; boundary=B")
		f, err := readForm(r, "file")
		if err != nil || f.filename != name {
			t.Errorf("filename %q: got %q, %v", name, f.filename, err)
		}
	}
}

// FuzzCheckDepth: on valid JSON, checkDepth refuses exactly the bodies that
// nest deeper than the limit, as a real tokenizer counts them.
func FuzzCheckDepth(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"[{"}]}`, `"\\\"["`, `[[[[]]]]`, `{"a":"\u005b"}`, `[` + strings.Repeat(`"]",`, 5) + `1]`} {
		f.Add([]byte(s))
	}
	const limit = 4
	f.Fuzz(func(t *testing.T, body []byte) {
		err := checkDepth(body, limit)
		if !json.Valid(body) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		depth, deepest := 0, 0
		for {
			tok, terr := dec.Token()
			if terr != nil {
				break
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				depth++
				deepest = max(deepest, depth)
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
		if (err == nil) != (deepest <= limit) {
			t.Fatalf("checkDepth(%q) = %v, but it nests %d deep", body, err, deepest)
		}
	})
}
