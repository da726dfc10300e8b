package api

import (
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"

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
