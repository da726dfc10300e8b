package workflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/relaybatch/relay/internal/backoff"
	"github.com/relaybatch/relay/internal/egress"
)

// MaxAnswer bounds a callback's answer, 10 MiB (docs/api.md "Workflow
// records"): a completed output becomes a line of the output file, whose
// lines may not pass 10 MiB either.
const MaxAnswer = 10 << 20

const userAgent = "relay-batch-workflows/1"

// maxRetryAfter caps the Retry-After a callback may ask for between
// attempts of one event: the attempts share one executor invocation.
const maxRetryAfter = 30 * time.Second

// Caller POSTs events to callbacks. Its HTTP client is where the address
// policy lives: build it with webhook.NewClient so a callback URL is
// dialled under the same SSRF rules as a webhook.
type Caller struct {
	HTTP *http.Client
	// Backoff is the wait after n failed attempts of an event; nil means
	// Backoff.
	Backoff func(n int) time.Duration
}

// Backoff waits 1 s, 2 s, 4 s between the attempts of an event, each
// jittered into its upper half.
func Backoff(n int) time.Duration {
	return backoff.Upper(backoff.Exponential(n, time.Second, time.Second<<10))
}

// Call POSTs ev until the callback answers or the attempts run out. 429,
// 5xx, timeouts and connection errors are retried up to Attempts times;
// after that the record fails with workflow_callback_unreachable. Another
// non-2xx status is workflow_callback_rejected, an answer that is not one
// of the four shapes workflow_invalid_response. Those failures are *Error;
// any other error means ctx ended (or will before the next attempt), and
// the event is for a later invocation to send again.
func (c *Caller) Call(ctx context.Context, spec Spec, ev Event) (Answer, error) {
	var last string
	for n := 1; n <= Attempts; n++ {
		ev.Attempt = n
		a, retryAfter, err := c.attempt(ctx, spec, ev)
		if ctx.Err() != nil {
			return Answer{}, ctx.Err()
		}
		var perm *Error
		switch {
		case err == nil:
			return a, nil
		case errors.As(err, &perm):
			return Answer{}, perm
		}
		last = err.Error()
		if n == Attempts {
			break
		}
		wait := c.backoff(n)
		if retryAfter > wait {
			wait = min(retryAfter, maxRetryAfter)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			return Answer{}, context.DeadlineExceeded
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Answer{}, ctx.Err()
		case <-t.C:
		}
	}
	return Answer{}, errorf(CodeCallbackUnreachable, "the callback did not answer event %s after %d attempts: %s", ev.EventID, Attempts, last)
}

func (c *Caller) backoff(n int) time.Duration {
	if c.Backoff != nil {
		return c.Backoff(n)
	}
	return Backoff(n)
}

// attempt makes one POST. A retryable failure is a plain error (with the
// Retry-After the callback asked for); a permanent one is an *Error.
func (c *Caller) attempt(ctx context.Context, spec Spec, ev Event) (Answer, time.Duration, error) {
	body, size, err := ev.Body()
	if err != nil {
		return Answer{}, 0, fmt.Errorf("encode event: %w", err) // reading the results' spool: retried as a failed attempt
	}
	actx, cancel := context.WithTimeout(ctx, spec.CallbackTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, spec.URL, body)
	if err != nil {
		return Answer{}, 0, errorf(CodeInvalid, "relay.workflow.url: %v", err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Authorization", spec.Authorization)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		var refused *egress.RefusedError
		switch {
		case errors.As(err, &refused):
			// The address policy: no retry can change where the name points now.
			return Answer{}, 0, errorf(CodeCallbackUnreachable, "the callback's address is %s", refused.Explain("workflow callbacks"))
		case ctx.Err() == nil && actx.Err() != nil:
			return Answer{}, 0, fmt.Errorf("attempt %d: no answer within %s", ev.Attempt, spec.CallbackTimeout)
		}
		return Answer{}, 0, fmt.Errorf("attempt %d: %w", ev.Attempt, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return Answer{}, retryAfter(resp.Header), fmt.Errorf("attempt %d: the callback answered %s", ev.Attempt, resp.Status)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return Answer{}, 0, errorf(CodeCallbackRejected, "the callback answered event %s with %s: %s", ev.EventID, resp.Status, clip(bytes.TrimSpace(data)))
	case err != nil && ctx.Err() == nil && actx.Err() != nil:
		return Answer{}, 0, fmt.Errorf("attempt %d: the answer did not arrive within %s", ev.Attempt, spec.CallbackTimeout)
	case err != nil:
		return Answer{}, 0, fmt.Errorf("attempt %d: read the answer: %w", ev.Attempt, err)
	case len(data) > MaxAnswer:
		return Answer{}, 0, errorf(CodeInvalidResponse, "the callback's answer is larger than %d bytes", MaxAnswer)
	}
	a, err := ParseAnswer(data)
	return a, 0, err
}

// retryAfter reads Retry-After in seconds; dates and junk count as none.
func retryAfter(h http.Header) time.Duration {
	s, err := strconv.ParseFloat(h.Get("Retry-After"), 64)
	if err != nil || s <= 0 {
		return 0
	}
	return time.Duration(min(s, maxRetryAfter.Seconds()) * float64(time.Second))
}
