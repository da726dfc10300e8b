package mockup_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/mockup"
)

func withKey(path, key string) http.Header {
	if path == "/v1/messages" {
		return http.Header{"X-Api-Key": {key}}
	}
	return http.Header{"Authorization": {"Bearer " + key}}
}

func TestRequestsPerMinutePerKey(t *testing.T) {
	t.Parallel()
	// A 1s window scales 180 RPM to 3 requests a window; the headers say
	// a minute's, as OpenAI's do: 180, and 60 for each request left.
	m, srv := newServer(t, mockup.Options{RPM: 180, RateWindow: time.Second})
	const path = "/v1/chat/completions"
	body := bodyFor(path, "m", "hi")
	var first time.Time // by when the window's oldest request arrived
	for i := range 3 {
		r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "key-a"))
		if i == 0 {
			first = time.Now()
		}
		if r.status != 200 {
			t.Fatalf("request %d: got %d %s", i, r.status, r.body)
		}
		if got := r.header.Get("x-ratelimit-remaining-requests"); got != strconv.Itoa(60*(2-i)) {
			t.Fatalf("request %d: x-ratelimit-remaining-requests %q, want %d", i, got, 60*(2-i))
		}
		if got := r.header.Get("x-ratelimit-limit-requests"); got != "180" {
			t.Fatalf("x-ratelimit-limit-requests %q, want 180", got)
		}
		if d, err := time.ParseDuration(r.header.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > time.Second {
			t.Fatalf("x-ratelimit-reset-requests %q: want a duration within the window", r.header.Get("x-ratelimit-reset-requests"))
		}
	}
	fourth := time.Now() // before the mock reads its clock for the fourth
	r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "key-a"))
	if r.status != 429 || errorType(t, path, r.body) != "rate_limit_error" && errorType(t, path, r.body) != "requests" {
		t.Fatalf("fourth request in the window: got %d %s, want 429", r.status, r.body)
	}
	wait, err := strconv.ParseFloat(r.header.Get("Retry-After"), 64)
	if err != nil || wait <= 0 || time.Duration(wait*float64(time.Second)) > time.Second-fourth.Sub(first)+time.Microsecond {
		t.Fatalf("Retry-After %q: want until the oldest request leaves the 1s window", r.header.Get("Retry-After"))
	}
	// Another key has its own window.
	if r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "key-b")); r.status != 200 {
		t.Fatalf("key-b: got %d, want 200", r.status)
	}
	time.Sleep(time.Duration(wait * float64(time.Second)))
	if r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "key-a")); r.status != 200 {
		t.Fatalf("after Retry-After: got %d %s, want 200", r.status, r.body)
	}
	st := m.Stats()
	if st.ByKey["key-a"] != 5 || st.LimitedByKey["key-a"] != 1 || st.ByKey["key-b"] != 1 || st.LimitedByKey["key-b"] != 0 {
		t.Fatalf("by key %v, limited %v", st.ByKey, st.LimitedByKey)
	}
}

func TestTokensPerMinuteAndALimitChangedMidRun(t *testing.T) {
	t.Parallel()
	// 600 TPM in a 1s window is 10 tokens: a message of 2 prompt words
	// (plus one for the message) and max_tokens 4 costs 7. The headers say
	// a minute's: 600, and 3 tokens left is 180.
	m, srv := newServer(t, mockup.Options{TPM: 600, RateWindow: time.Second})
	const path = "/v1/messages"
	body := bodyFor(path, "claude", "two words")
	body = body[:len(body)-1] + `,"max_tokens":4}`
	first := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "k"))
	if first.status != 200 || first.header.Get("anthropic-ratelimit-tokens-remaining") != "180" || first.header.Get("anthropic-ratelimit-tokens-limit") != "600" {
		t.Fatalf("first: %d, tokens remaining %q limit %q, want 200 180 600", first.status,
			first.header.Get("anthropic-ratelimit-tokens-remaining"), first.header.Get("anthropic-ratelimit-tokens-limit"))
	}
	if _, err := time.Parse(time.RFC3339Nano, first.header.Get("anthropic-ratelimit-tokens-reset")); err != nil {
		t.Fatalf("anthropic-ratelimit-tokens-reset %q: %v", first.header.Get("anthropic-ratelimit-tokens-reset"), err)
	}
	if r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "k")); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("second: got %d (Retry-After %q), want 429 over the tokens", r.status, r.header.Get("Retry-After"))
	}
	// The provider doubles the limit mid-run: the window stays, the new
	// limit applies at once.
	m.SetOptions(mockup.Options{TPM: 1200, RateWindow: time.Second})
	if r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "k")); r.status != 200 || r.header.Get("anthropic-ratelimit-tokens-remaining") != "360" {
		t.Fatalf("after the raise: got %d remaining %q, want 200 360 (6 of 20 in the window)", r.status, r.header.Get("anthropic-ratelimit-tokens-remaining"))
	}
	m.SetOptions(mockup.Options{TPM: 600, RateWindow: time.Second})
	if r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "k")); r.status != 429 {
		t.Fatalf("after the cut: got %d, want 429", r.status)
	}
}

func TestRevokedKey(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	const path = "/v1/chat/completions"
	body := bodyFor(path, "m", "hi")
	r := send(t, srv.URL, http.MethodPost, "/mock/options", `{"revoked_keys":["old-key"]}`, nil)
	if r.status != 200 {
		t.Fatalf("POST /mock/options: %d %s", r.status, r.body)
	}
	if r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "old-key")); r.status != 401 || errorType(t, path, r.body) != "invalid_request_error" && errorType(t, path, r.body) != "authentication_error" {
		t.Fatalf("revoked key: got %d %s, want 401", r.status, r.body)
	}
	if r := send(t, srv.URL, http.MethodPost, path, body, withKey(path, "new-key")); r.status != 200 {
		t.Fatalf("another key: got %d, want 200", r.status)
	}
}
