package ratelimit

import (
	"context"
	"sync"
	"time"
)

// Adaptive is a concurrency limit that follows a provider's real one:
// additive increase (one more slot per limit's worth of successes),
// multiplicative decrease (halved on a 429 or an overload answer, at most
// once per CutEvery, so one burst of refusals cuts once) between Floor and
// Ceiling (the model's max_concurrency). It starts at Ceiling. Safe for
// concurrent use.
type Adaptive struct {
	Floor, Ceiling int
	CutEvery       time.Duration

	mu       sync.Mutex
	cond     *sync.Cond
	limit    float64
	inflight int
	lastCut  time.Time
}

// NewAdaptive starts at ceiling.
func NewAdaptive(floor, ceiling int, cutEvery time.Duration) *Adaptive {
	floor = max(floor, 1)
	a := &Adaptive{Floor: floor, Ceiling: max(ceiling, floor), CutEvery: cutEvery, limit: float64(max(ceiling, floor))}
	a.cond = sync.NewCond(&a.mu)
	return a
}

// Acquire waits for room under the limit; false when ctx ended first.
func (a *Adaptive) Acquire(ctx context.Context) bool {
	stop := context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.inflight >= int(a.limit) && ctx.Err() == nil {
		a.cond.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	a.inflight++
	return true
}

// Release ends a request; overloaded says the provider refused it for load
// (429, 529, 503).
func (a *Adaptive) Release(now time.Time, overloaded bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	switch {
	case overloaded && now.Sub(a.lastCut) >= a.CutEvery:
		a.limit = max(float64(a.Floor), a.limit/2)
		a.lastCut = now
	case !overloaded:
		a.limit = min(float64(a.Ceiling), a.limit+1/a.limit)
	}
	a.cond.Broadcast()
}

// Limit is the current limit.
func (a *Adaptive) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.limit)
}
