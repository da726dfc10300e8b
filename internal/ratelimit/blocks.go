package ratelimit

import (
	"context"
	"sync"
	"time"
)

// Shared is a budget all executors draw from: per bucket and per second
// (a unix time), Lease adds n to what was taken if it stays within
// capacity, and reports whether it did. The store implements it with one
// conditional update of a per-second item (docs/design.md "Hot items").
type Shared interface {
	Lease(ctx context.Context, bucket string, second, n, capacity int64) (bool, error)
}

// blocksPerSecond is how many blocks a bucket's second is leased in: an
// executor takes capacity/blocksPerSecond units at a time (100 ms of the
// rate), so a bucket's item takes at most that many writes a second (and
// a few more for the last units of a second) whatever the rate.
const blocksPerSecond = 10

// Blocks is one executor's share of a Shared bucket: units leased a block
// at a time for the current second, spent locally. What is left of a
// block when its second ends is lost, never carried: the sum across
// executors stays within the capacity of every second. Safe for
// concurrent use.
type Blocks struct {
	Shared   Shared
	Bucket   string
	Capacity int64 // units a second

	mu     sync.Mutex
	second int64
	have   int64
}

// Take waits until n units of the current second are this executor's.
// The store failing lets the row go (the local pacer still holds it to
// the key's rate): a budget must not stop batches the provider would
// take. It returns ctx's error if ctx ends first.
func (b *Blocks) Take(ctx context.Context, now func() time.Time, n int64) error {
	for {
		t := now()
		sec := t.Unix()
		ok, err := b.take(ctx, sec, n)
		if err != nil || ok {
			return nil
		}
		next := time.Unix(sec+1, 0)
		timer := time.NewTimer(next.Sub(t))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// Adjust corrects what a row took by delta units once its usage is known:
// units given back are spent by the next rows of the same second, units
// overrun are leased with the next block.
func (b *Blocks) Adjust(now time.Time, delta int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.second == now.Unix() {
		b.have -= delta
	}
}

func (b *Blocks) take(ctx context.Context, sec, n int64) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.second != sec {
		b.second, b.have = sec, 0
	}
	if b.have >= n {
		b.have -= n
		return true, nil
	}
	need := n - b.have // more than n when usage overran an estimate
	block := max(need, b.Capacity/blocksPerSecond, 1)
	for _, want := range []int64{block, need} {
		ok, err := b.Shared.Lease(ctx, b.Bucket, sec, want, max(b.Capacity, want))
		if err != nil {
			return false, err
		}
		if ok {
			b.have += want - n
			return true, nil
		}
		if want == need {
			break
		}
	}
	return false, nil
}
