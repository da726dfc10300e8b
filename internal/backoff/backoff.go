// Package backoff is the service's one way to wait between attempts:
// exponential ceilings, jitter, and a sleep that ends with its context.
// The provider's retries, webhook deliveries, workflow callbacks, DynamoDB
// transaction conflicts and the local event-source mapping all use it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Exponential is the ceiling before attempt n (1-based): first, doubling
// each attempt, never above limit (and never overflowing, however large n).
func Exponential(n int, first, limit time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Full is a wait drawn uniformly from [0, d]: attempts that failed together
// spread over the whole window.
func Full(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// Upper is a wait drawn uniformly from [d/2, d]: jittered, yet never much
// shorter than d.
func Upper(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep waits d, or less if ctx ends first; it returns ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
