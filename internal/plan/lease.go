package plan

import (
	"context"
	"time"
)

// Lease is how long one dispatcher may plan a batch before another may
// take over (the first one crashed): at most until its invocation's
// deadline (LeaseUntil), so the plan message that comes back after a
// failed attempt, visibility timeout later, always finds the lease over
// even when the attempt could not give it back.
const Lease = 2 * time.Minute

// LeaseUntil is when a plan attempt's lease taken at now ends: the
// invocation's deadline, rounded up to the second, or Lease.
func LeaseUntil(ctx context.Context, now time.Time) int64 {
	until := now.Add(Lease)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		until = d
	}
	return until.Add(time.Second - 1).Unix()
}
