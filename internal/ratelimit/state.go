package ratelimit

import (
	"sync"
	"time"
)

// publishEvery is how often at most an executor publishes a model's key
// states while it sends rows of the model (Registry.Publish; the cost is
// in docs/design.md "Hot items").
const publishEvery = 5 * time.Second

// minuteCount counts events in the last minute, in one-second buckets.
// Safe for concurrent use.
type minuteCount struct {
	mu      sync.Mutex
	buckets [60]struct{ second, n int64 }
}

// Add counts one event at now.
func (m *minuteCount) Add(now time.Time) {
	s := now.Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &m.buckets[s%60]
	if b.second != s {
		b.second, b.n = s, 0
	}
	b.n++
}

// Sum is the events of the minute up to now.
func (m *minuteCount) Sum(now time.Time) int64 {
	s := now.Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, b := range m.buckets {
		if s-b.second < 60 && b.second <= s {
			n += b.n
		}
	}
	return n
}

// publish hands the pool's states to Registry.Publish when force (a
// circuit opened) or when publishEvery has passed since it last did, so
// an executor writes at most one record per model's key every
// publishEvery whatever its rows.
func (p *Pool) publish(now time.Time, force bool) {
	if p.r.Publish == nil {
		return
	}
	last := p.published.Load()
	if !force && last != 0 && now.UnixNano()-last < int64(publishEvery) {
		return
	}
	if !p.published.CompareAndSwap(last, now.UnixNano()) {
		return // another row of the pool publishes
	}
	p.r.Publish(p.model, p.States())
}

// Published is one executor's state of a model's key as it published it:
// what relay admin models adds up across executors.
type Published struct {
	KeyState
	Executor string
	At       time.Time
}

// DroppedKey is a key of a model's pool an executor dropped (Pool.Drop),
// as the store records it.
type DroppedKey struct {
	Env       string `dynamodbav:"sk" json:"key_env"`
	Status    int    `dynamodbav:"status" json:"status"`
	DroppedAt int64  `dynamodbav:"dropped_at" json:"dropped_at"`
}
