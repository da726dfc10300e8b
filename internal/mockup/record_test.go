package mockup_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/mockup"
)

// Recorded requests carry what the chaos checks read: the row (the same
// for an attempt on another model, another for other text), the run and
// lease headers, and an interval that covers the request's sleep.
func TestRecordedRequests(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{Record: true})
	h := authFor("/v1/chat/completions")
	h.Set(mockup.HeaderRun, "run-1")
	h.Set(mockup.HeaderLeaseUntil, "1700000000123")
	send(t, srv.URL, http.MethodPost, "/v1/chat/completions", bodyFor("/v1/chat/completions", "a", "[[mock:sleep=30ms]] row one"), h)
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "b", "[[mock:sleep=30ms]] row one"))
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "a", "[[mock:500]] row two"))

	got := m.Requests()
	if len(got) != 3 {
		t.Fatalf("recorded %d requests, want 3: %+v", len(got), got)
	}
	first, fallback, other := got[0], got[1], got[2]
	if first.Run != "run-1" || first.LeaseUntil != 1700000000123 || first.Model != "a" || first.Status != 200 {
		t.Errorf("first request recorded as %+v, want run-1, lease 1700000000123, model a, status 200", first)
	}
	if fallback.Run != "" || fallback.LeaseUntil != 0 || fallback.Model != "b" {
		t.Errorf("request without headers recorded as %+v, want no run and no lease, model b", fallback)
	}
	if len(first.Key) != 16 || first.Key != fallback.Key || other.Key == first.Key || other.Status != 500 {
		t.Errorf("keys %q, %q (same row on another model), %q (another row, status %d): want the first two equal, the third not",
			first.Key, fallback.Key, other.Key, other.Status)
	}
	if d := first.End.Sub(first.Start); d < 30*time.Millisecond {
		t.Errorf("a request that slept 30ms lasted %v from start to end", d)
	}

	r := send(t, srv.URL, http.MethodGet, "/mock/requests", "", nil)
	var page struct{ Data []mockup.Request }
	if err := json.Unmarshal(r.body, &page); err != nil || len(page.Data) != 3 || page.Data[0].Run != "run-1" {
		t.Errorf("GET /mock/requests: %d %s (%v), want the 3 requests", r.status, r.body, err)
	}
	m.Reset()
	if n := len(m.Requests()); n != 0 {
		t.Errorf("after Reset: %d requests recorded, want 0", n)
	}
}

// Without Options.Record nothing is kept: make dev serves for hours.
func TestRequestsNotRecordedByDefault(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{})
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "a", "row"))
	if n := len(m.Requests()); n != 0 {
		t.Errorf("%d requests recorded with Record off, want 0", n)
	}
}
