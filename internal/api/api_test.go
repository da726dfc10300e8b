package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/errs"
)

// The official SDKs retry 409, 429 and 5xx unless x-should-retry says not
// to, sleeping out a Retry-After of up to 60 s: only what clears within a
// second may be retried.
func TestRefusalsTheSDKsRetry(t *testing.T) {
	t.Parallel()
	a := &API{Log: slog.New(slog.DiscardHandler)}
	tests := []struct {
		name  string
		err   error
		retry bool
	}{
		{"internal error", errors.New("boom"), true},
		{"per-key rate limit", &errs.Error{Kind: errs.RateLimited, Code: "rate_limit_exceeded", RetryAfter: 1}, true},
		{"in-flight limit", &errs.Error{Kind: errs.RateLimited, Code: "too_many_batches_in_flight", RetryAfter: 60}, false},
		{"batch not cancellable", errs.E(errs.Conflict, "batch_not_cancellable", "", "done"), false},
		{"invalid", errs.Invalidf("endpoint", "no"), false},
		{"not found", errs.NotFoundf("no"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			a.fail(w, httptest.NewRequest("POST", "/v1/batches", nil), tt.err)
			if got := w.Header().Get("X-Should-Retry") != "false"; got != tt.retry {
				t.Errorf("status %d, X-Should-Retry %q: retried %v, want %v", w.Code, w.Header().Get("X-Should-Retry"), got, tt.retry)
			}
		})
	}
}

// An internal error names the service's request id in its body and its
// log line; the id a client sent, which internal/apigw moves to
// X-Client-Request-Id, is only the log's client_request_id.
func TestFailKeepsTheClientRequestIDApart(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/batches", "/v1/messages/batches"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			a := &API{Log: slog.New(slog.NewJSONHandler(&logs, nil))}
			r := httptest.NewRequest("POST", path, nil)
			r.Header.Set("X-Request-Id", "req-service")
			r.Header.Set("X-Client-Request-Id", "client-1")
			w := httptest.NewRecorder()
			a.fail(w, r, errors.New("boom"))
			if body := w.Body.String(); !strings.Contains(body, "req-service") || strings.Contains(body, "client-1") {
				t.Errorf("body %s, want the service's request id only", body)
			}
			var line map[string]any
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatalf("log %q: %v", logs.String(), err)
			}
			if line["request_id"] != "req-service" || line["client_request_id"] != "client-1" {
				t.Errorf("log request_id %v, client_request_id %v; want req-service, client-1", line["request_id"], line["client_request_id"])
			}
		})
	}
}

// The Operations page's route is served only where the app gives the API
// its figures (the local runtime: app.App.OperationsPage); deployed, an
// admin key of any tenant gets 404, not the service's load.
func TestOperationsRouteOnlyWhereServed(t *testing.T) {
	t.Parallel()
	const raw = "rb-operations-test-key-------------------------"
	h := (&API{Auth: auth.Authenticator{Store: newKeyStore(raw, "acme")}, Log: slog.New(slog.DiscardHandler)}).Handler()
	r := httptest.NewRequest("GET", "/v1/admin/operations", nil)
	r.Header.Set("Authorization", "Bearer "+raw)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusNotFound {
		t.Errorf("GET /v1/admin/operations without Operations: %d %s, want 404", w.Code, w.Body)
	}
}
