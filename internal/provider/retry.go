package provider

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/backoff"
)

// Policy is how a row retries transient failures on one model.
type Policy struct {
	MaxAttempts int           // per model, default 4
	BaseDelay   time.Duration // default 500ms
	MaxDelay    time.Duration // cap of the backoff, default 30s
	// Sleep waits between attempts and must return early with ctx's error.
	// Tests inject one that records the delay instead of waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// maxRetryAfter bounds a Retry-After the upstream sends: past it (an hour,
// say) a row would hold an executor slot for nothing; retrying sooner costs
// at most one more attempt.
const maxRetryAfter = 5 * time.Minute

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 4
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 500 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 30 * time.Second
	}
	if p.Sleep == nil {
		p.Sleep = backoff.Sleep
	}
	return p
}

// Transient tells whether an upstream answer (status) or the failure to get
// one (err) is worth retrying. It is the one place that decides; everything
// else (a 400, a 401, a 404, …) is permanent and returned at once.
func Transient(status int, err error) bool {
	if err != nil {
		// Timeouts, refused and reset connections may all go away; a
		// cancel is the caller stopping, which no retry should undo.
		return !errors.Is(err, context.Canceled)
	}
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return true
	case status == http.StatusConflict:
		// OpenAI and Anthropic answer 409 to a lock contention that clears
		// on retry; their own SDKs retry it too.
		return true
	case status >= 500:
		return true
	}
	return false
}

// delay is how long to wait before retry n (1-based): exponential backoff
// with full jitter, so rows that failed together do not retry together,
// but never sooner than the upstream asked.
func (p Policy) delay(n int, retryAfter time.Duration) time.Duration {
	return max(backoff.Full(backoff.Exponential(n, p.BaseDelay, p.MaxDelay)), retryAfter)
}

// retryAfter reads how long the upstream asked to wait: retry-after-ms
// (OpenAI, more precise) first, then Retry-After in seconds or as an HTTP
// date. Zero when it did not ask.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return seconds(ms / 1000)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return seconds(s)
	}
	if t, err := http.ParseTime(v); err == nil {
		return seconds(t.Sub(now).Seconds())
	}
	return 0
}

// seconds converts an upstream's wait to a Duration within [0, maxRetryAfter],
// which also keeps an absurd value from overflowing.
func seconds(s float64) time.Duration {
	switch {
	case !(s > 0): // also NaN
		return 0
	case s >= maxRetryAfter.Seconds():
		return maxRetryAfter
	}
	return time.Duration(s * float64(time.Second))
}
