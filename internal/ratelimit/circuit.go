package ratelimit

import (
	"sync"
	"time"
)

// Circuit is the breaker of one upstream (a model × key): after Threshold
// failures in a row (5xx, timeouts, connection errors) it opens and lets
// nothing through for Cooldown; then it is half-open and lets one probe
// through at a time, which closes it on success and opens it again on
// failure. While it has seen a failure and no success since, it lets one
// request through at a time, so an outage that starts under full
// concurrency costs a handful of requests, not one per slot. Safe for
// concurrent use.
type Circuit struct {
	Threshold int
	Cooldown  time.Duration

	mu       sync.Mutex
	failures int
	openedAt time.Time // zero when closed
	probing  bool      // a request is in flight while suspect or half-open
}

// CircuitState names a circuit's state as `relay models` shows it.
type CircuitState string

const (
	Closed   CircuitState = "closed"
	Open     CircuitState = "open"
	HalfOpen CircuitState = "half-open"
)

// Allow reports whether a request may go now, and whether it goes as the
// one probe (Abandon gives that back if it is never sent); when not, wait
// is how long until it is worth asking again.
func (c *Circuit) Allow(now time.Time) (ok, probe bool, wait time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok, probe, wait = c.verdict(now)
	if probe {
		c.probing = true
	}
	return ok, probe, wait
}

// Admits reports whether Allow would let a request through at now.
func (c *Circuit) Admits(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok, _, _ := c.verdict(now)
	return ok
}

// verdict is Allow's answer at now, the probe not taken; c.mu is held.
func (c *Circuit) verdict(now time.Time) (ok, probe bool, wait time.Duration) {
	if !c.openedAt.IsZero() {
		if left := c.openedAt.Add(c.Cooldown).Sub(now); left > 0 {
			return false, false, left
		}
	}
	if c.failures == 0 {
		return true, false, 0
	}
	if c.probing {
		return false, false, 50 * time.Millisecond
	}
	return true, true, 0
}

// Still reports whether a request Allow let through before may still go:
// it is the probe, or the circuit has seen no failure since. A request
// that waited for its pacer asks again, so the rows paced ahead of an
// outage's first failure do not all go.
func (c *Circuit) Still(probe bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return probe || c.failures == 0 && c.openedAt.IsZero()
}

// Abandon gives back a probe that was never sent.
func (c *Circuit) Abandon() {
	c.mu.Lock()
	c.probing = false
	c.mu.Unlock()
}

// Record takes the outcome of a request Allow let through; failed is a
// 5xx, a timeout or a connection error (a 429 is the pacer's business).
// It reports whether the circuit opened with it (from closed).
func (c *Circuit) Record(now time.Time, probe, failed bool) (opened bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if probe {
		c.probing = false
	}
	if !failed {
		c.failures, c.openedAt = 0, time.Time{}
		return false
	}
	c.failures++
	if c.failures >= c.Threshold || !c.openedAt.IsZero() {
		opened = c.openedAt.IsZero()
		c.openedAt = now
	}
	return opened
}

// State is the circuit's state at now.
func (c *Circuit) State(now time.Time) CircuitState {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.openedAt.IsZero():
		return Closed
	case now.Before(c.openedAt.Add(c.Cooldown)):
		return Open
	}
	return HalfOpen
}
