// Package ratelimit keeps an executor's rows within what a provider allows
// each key (docs/design.md "Rate budgets"): a Pacer spaces requests and
// tokens to the configured rpm/tpm and to what the provider's headers say,
// an Adaptive limit cuts concurrency on 429s (AIMD), a Circuit stops
// sending to an upstream that keeps failing, and Blocks share a budget
// across executors through leased blocks of a per-second item. A Pool puts
// them together for a model's keys.
package ratelimit

import (
	"sync"
	"time"
)

// Pacer spaces reservations to a rate with the generic cell rate
// algorithm: each reservation of cost units books cost/rate of time after
// the previous one, and goes at the time it was booked, so the requests of
// a key leave evenly spaced rather than in a burst a provider's sliding
// window would refuse. A rate of 0 paces nothing until the provider states
// a limit (Learn); pauses (Retry-After, a provider's remaining 0) apply at
// any rate. Safe for concurrent use.
type Pacer struct {
	mu         sync.Mutex
	configured float64 // the rate it was made with (0: none)
	// ceiling is the most the rate climbs to: the configured rate, or
	// Headroom of the provider's stated limit when that is lower (Learn).
	ceiling float64
	lastCut time.Time // Cut's last
	// lastClimb is Climb's (or Cut's) last.
	lastClimb time.Time
	rate      float64   // units per second now; 0 is unlimited
	burst     float64   // units that may go at once after an idle time
	tat       time.Time // theoretical arrival time of the next unit
	pause     time.Time // nothing goes before it
}

// NewPacer paces to rate units a second with burst units of slack after
// an idle time (fewer in proportion while the rate is cut).
func NewPacer(rate, burst float64) *Pacer {
	return &Pacer{rate: rate, configured: rate, ceiling: rate, burst: burst}
}

// Learn takes a provider's word that its limit is limit units a second
// (its rate-limit headers): the ceiling becomes Headroom of it, within the
// configured rate, and a rate above it follows it down at once, so a
// provider that lowers a key's limit is followed from its next answer, not
// after 429s; a limit raised again lifts the ceiling back.
func (p *Pacer) Learn(limit float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := limit * Headroom
	if p.configured > 0 {
		c = min(c, p.configured)
	}
	if c <= 0 {
		return
	}
	p.ceiling = c
	if p.rate <= 0 || p.rate > c {
		p.rate = c
	}
}

// Adaptive rates: a 429 means the provider's limit is below the
// configured one (it lowered it, or other traffic shares the key), so the
// rate follows it down and climbs back as answers come.
const (
	cutFactor      = 0.7  // a 429 takes the rate to this share
	rateFloor      = 0.05 // of the ceiling, never below
	climbPerSecond = 0.03 // of the ceiling, back per second of answers
)

// Cut lowers the rate on a 429, at most once per cutEvery so a burst of
// refusals cuts once.
func (p *Pacer) Cut(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate <= 0 || now.Sub(p.lastCut) < cutEvery {
		return
	}
	p.lastCut, p.lastClimb = now, now
	p.rate = max(p.rate*cutFactor, p.ceiling*rateFloor)
}

// Climb takes the rate back towards the configured one after an answer
// that was not a 429: by climbPerSecond of it for each second since the
// last climb (at most one: an idle key does not jump back), so the climb
// takes the same time whatever the rate, and a limit found lower holds
// for seconds, not for the next few answers.
func (p *Pacer) Climb(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate <= 0 || p.rate >= p.ceiling {
		p.lastClimb = now
		return
	}
	dt := min(now.Sub(p.lastClimb), time.Second)
	p.lastClimb = now
	if dt > 0 {
		p.rate = min(p.rate+p.ceiling*climbPerSecond*dt.Seconds(), p.ceiling)
	}
}

// Rate is the rate now, units a second.
func (p *Pacer) Rate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}

// Reserve books cost units and returns when they may go: now, or later
// when the rate or a pause says so.
func (p *Pacer) Reserve(now time.Time, cost float64) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := now
	if p.pause.After(at) {
		at = p.pause
	}
	if p.rate <= 0 {
		return at
	}
	if p.tat.IsZero() {
		// A key starts with no slack: what the provider counted of it
		// before is unknown.
		p.tat = at
	}
	if floor := at.Add(-p.slack()); p.tat.Before(floor) {
		p.tat = floor
	}
	if p.tat.After(at) {
		at = p.tat
	}
	p.tat = p.tat.Add(p.span(cost))
	return at
}

// Next is when a reservation of cost would go, without booking it: how
// much headroom the key has.
func (p *Pacer) Next(now time.Time, cost float64) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := now
	if p.pause.After(at) {
		at = p.pause
	}
	if p.rate > 0 {
		if t := p.tat.Add(-p.slack()); t.After(at) {
			at = t
		}
	}
	return at
}

// Adjust corrects a reservation by delta units (negative gives back what
// was estimated too high, as a row's usage says).
func (p *Pacer) Adjust(delta float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate > 0 && delta != 0 {
		p.tat = p.tat.Add(p.span(delta))
	}
}

// Pause lets nothing go before until (a Retry-After; a provider that says
// none remain until its reset).
func (p *Pacer) Pause(until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until.After(p.pause) {
		p.pause = until
	}
	// The pace resumes at the pause's end with no slack: the rows held
	// by it would otherwise all go at once, into another 429.
	if p.tat.Before(until) {
		p.tat = until
	}
}

// Paused reports whether nothing may go at now: a pause set after a
// reservation was made holds it too.
func (p *Pacer) Paused(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pause.After(now)
}

// Tighten takes a provider's word that only remaining of its limit (a
// minute's, limit 0: not said) are left and that all of it is back after
// reset. A provider gives units back at its limit a minute, so with none
// left the key pauses until the next one is back: a minute ÷ limit, at
// most the reset, or the whole reset when the limit is not said. With some
// left the local pace holds.
func (p *Pacer) Tighten(now time.Time, remaining, limit float64, reset time.Duration) {
	if reset <= 0 || remaining >= 1 {
		return
	}
	wait := reset
	if limit >= 1 {
		wait = min(reset, time.Duration(float64(time.Minute)/limit))
	}
	p.Pause(now.Add(wait))
}

// slack is how far behind now the pacer's time may fall after an idle
// time: as long as burst units take at the configured rate, so a rate
// below it (cut after 429s, or a lower limit the provider states) has its
// burst cut with it.
func (p *Pacer) slack() time.Duration {
	if p.configured <= 0 {
		return 0
	}
	return time.Duration(p.burst / p.configured * float64(time.Second))
}

// span is the time cost units take at the rate.
func (p *Pacer) span(cost float64) time.Duration {
	return time.Duration(cost / p.rate * float64(time.Second))
}
