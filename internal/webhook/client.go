package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/relaybatch/relay/internal/egress"
)

// Per-attempt limits.
const (
	DefaultTimeout = 5 * time.Second // docs/api.md "Webhooks"
	maxBody        = 64 << 10        // a receiver's answer is drained, never kept; cap what it can make us read
	userAgent      = "relay-batch-webhooks/1"
)

// Client delivers events. Build it with NewClient: the transport it makes
// is what enforces the Policy on every connection.
type Client struct {
	Policy egress.Policy
	// HTTP is built by NewClient. Replacing it drops the address check and
	// the no-redirect rule.
	HTTP *http.Client
	// Timeout bounds one attempt, connect to last byte; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Resolver looks up host names; nil means the system's. The address
	// check runs on what it returns, whatever it is.
	Resolver *net.Resolver
}

// NewClient returns a Client enforcing p.
func NewClient(p egress.Policy) *Client {
	c := &Client{Policy: p}
	c.HTTP = &http.Client{
		Transport: &http.Transport{
			// No proxy: through one, the dialled address would be the
			// proxy's and the check would never see the destination.
			Proxy:                  nil,
			DialContext:            c.dial,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           10,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    DefaultTimeout,
			MaxResponseHeaderBytes: maxBody,
		},
		// A redirect is the receiver's answer, not a new destination: a
		// public URL answering 302 → http://169.254.169.254/ must not be
		// followed, so none are.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// dial reads the Client's fields at dial time, so a Policy or Resolver set
// after NewClient still applies.
func (c *Client) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Resolver: c.Resolver, Control: c.Policy.Control}
	return d.DialContext(ctx, network, addr)
}

// Attempt is the record of one delivery try.
type Attempt struct {
	N          int    `json:"attempt" dynamodbav:"attempt"`
	At         int64  `json:"at" dynamodbav:"at"`
	StatusCode int    `json:"status_code,omitempty" dynamodbav:"status_code,omitempty"`
	Error      string `json:"error,omitempty" dynamodbav:"error,omitempty"`
	DurationMS int64  `json:"duration_ms" dynamodbav:"duration_ms"`
	// Permanent marks a failure no retry can fix (the URL or address is
	// refused, the secret is unusable): stop instead of retrying for 24 h.
	Permanent bool `json:"permanent,omitempty" dynamodbav:"permanent,omitempty"`
}

// Delivered reports whether the receiver accepted the event.
func (a Attempt) Delivered() bool {
	return a.Error == "" && a.StatusCode >= 200 && a.StatusCode < 300
}

// Deliver makes attempt number n (1-based) to POST ev to target, signed
// with the tenant's secret. It never returns an error: every outcome is an
// Attempt to record, and its Delivered and Permanent say what comes next.
func (c *Client) Deliver(ctx context.Context, target, secret string, ev Event, attempt int) Attempt {
	start := time.Now()
	a := Attempt{N: attempt, At: start.Unix()}
	finish := func(err error, permanent bool) Attempt {
		a.DurationMS = time.Since(start).Milliseconds()
		if err != nil {
			a.Error = err.Error()
			a.Permanent = permanent
		}
		return a
	}

	// Checked again here: the batch may predate a stricter policy.
	if err := c.Policy.CheckURL(target); err != nil {
		return finish(err, true)
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return finish(fmt.Errorf("encode event: %w", err), true)
	}
	// Signed at send time, not event time: receivers reject timestamps
	// older than a few minutes, and retries go on for a day.
	sig, err := Sign(secret, ev.ID, start, body)
	if err != nil {
		return finish(err, true)
	}

	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return finish(fmt.Errorf("build request: %w", err), true)
	}
	req.Header = sig
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)

	resp, err := c.HTTP.Do(req)
	if err != nil {
		var refused *egress.RefusedError
		switch {
		case errors.As(err, &refused):
			return finish(sendError(err), true)
		case ctx.Err() == nil && actx.Err() != nil:
			return finish(fmt.Errorf("no answer within %s", timeout), false)
		}
		return finish(sendError(err), false)
	}
	// Drained so the connection can be reused; bounded so a receiver that
	// streams forever costs at most maxBody (the timeout still applies).
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()

	a.StatusCode = resp.StatusCode
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return finish(nil, false)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return finish(fmt.Errorf("redirect to %q not followed: webhook URLs must answer 2xx themselves", resp.Header.Get("Location")), false)
	}
	return finish(fmt.Errorf("receiver answered %s", resp.Status), false)
}

// sendError drops the *url.Error wrapper, which repeats the method and URL
// the record already implies.
func sendError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
