package webhook

import (
	"net/url"
	"strings"
	"time"
)

// Circuit is one tenant's circuit breaker of one receiver (docs/api.md
// "Webhooks", CircuitOf): after CircuitThreshold failed attempts in a row
// of the tenant's webhooks to the receiver, whichever batches they were
// for, no attempt of the tenant's goes to it for a cool-down;
// then one probe at a time does, and its answer closes the circuit or opens
// it again. Deliveries that find it open wait, uncounted, and are attempted
// later (or given up at the retry horizon, as failing ones are), so a
// receiver that never answers stops holding webhook functions.
//
// It holds no I/O: the caller reads and writes it (internal/store, one item
// per tenant and receiver, written conditionally so concurrent deliveries on any number
// of functions count every failure once and admit one probe).
type Circuit struct {
	Receiver string `dynamodbav:"receiver"`
	// Failures is how many attempts in a row failed.
	Failures int `dynamodbav:"failures"`
	// OpenUntil (Unix milliseconds) is when an open circuit's cool-down
	// ends; 0 is closed.
	OpenUntil int64 `dynamodbav:"open_until"`
	// ProbeUntil (Unix milliseconds) is how long the probe admitted after
	// the cool-down keeps the others waiting.
	ProbeUntil int64 `dynamodbav:"probe_until"`
}

// The circuit's defaults (docs/api.md "Webhooks").
const (
	CircuitThreshold = 5
	CircuitCooldown  = 5 * time.Minute
)

// Receiver names the receiver of a webhook URL for its circuit: the host
// and port, lower-cased; "" for a URL that has none.
func Receiver(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

// CircuitOf names tenant's circuit of the receiver of a webhook URL
// (Receiver): <tenant>#<host:port>; "" for a URL that has no host. Each
// tenant has its own, so a tenant whose webhooks fail at a receiver (a
// path of another tenant's that answers 404, say) holds back its own
// webhooks only, never another tenant's.
func CircuitOf(tenant, target string) string {
	r := Receiver(target)
	if r == "" {
		return ""
	}
	return tenant + "#" + r
}

// Closed reports whether the circuit admits every attempt.
func (c Circuit) Closed() bool { return c.OpenUntil == 0 }

// Admit reports whether an attempt may go to the receiver at now and, when
// not, when to ask again. A closed circuit admits every attempt; an open
// one none before its cool-down ends, then one probe per window: admitting
// it sets ProbeUntil, which the caller writes back conditionally.
func (c *Circuit) Admit(now time.Time, window time.Duration) (bool, time.Time) {
	if c.Closed() {
		return true, time.Time{}
	}
	ms := now.UnixMilli()
	switch {
	case ms < c.OpenUntil:
		return false, time.UnixMilli(c.OpenUntil)
	case ms < c.ProbeUntil:
		return false, time.UnixMilli(c.ProbeUntil)
	}
	c.ProbeUntil = now.Add(window).UnixMilli()
	return true, time.Time{}
}

// Record counts attempt a, finished at now, and reports whether c changed.
// A delivery closes the circuit; a failure opens it when it is the
// threshold-th in a row, or when the circuit was open (a failed probe), for
// cooldown. A permanent refusal (a URL or address the policy refuses) says
// nothing of the receiver and is not counted.
func (c *Circuit) Record(a Attempt, now time.Time, threshold int, cooldown time.Duration) bool {
	switch {
	case a.Delivered():
		if c.Failures == 0 && c.Closed() {
			return false
		}
		c.Failures, c.OpenUntil, c.ProbeUntil = 0, 0, 0
	case a.Permanent:
		return false
	default:
		c.Failures++
		if c.Failures >= threshold || !c.Closed() {
			c.OpenUntil, c.ProbeUntil = now.Add(cooldown).UnixMilli(), 0
		}
	}
	return true
}

// Horizon is when a webhook first attempted (or, never attempted, queued)
// at first is given up (GiveUp).
func Horizon(first time.Time) time.Time { return first.Add(retryFor) }
