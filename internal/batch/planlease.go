package batch

import (
	"context"
	"time"
)

// PlanLease is how long one dispatcher may plan a batch before another may
// take over (the first one crashed): at most until its invocation's
// deadline (PlanLeaseUntil), so the plan message that comes back after a
// failed attempt, visibility timeout later, always finds the lease over
// even when the attempt could not give it back.
const PlanLease = 2 * time.Minute

// PlanLeaseUntil is when a plan attempt's lease taken at now ends: the
// invocation's deadline, rounded up to the second, or PlanLease.
func PlanLeaseUntil(ctx context.Context, now time.Time) int64 {
	until := now.Add(PlanLease)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		until = d
	}
	return until.Add(time.Second - 1).Unix()
}

// PlanSkew is the clock skew between dispatchers a plan lease allows for.
const PlanSkew = 5 * time.Second

// PlanWriteBy is when a plan attempt that took at taken a lease ending at
// lease (unix seconds) stops writing: PlanSkew before the lease ends, so
// the next attempt, which may start once the lease ended on its own
// clock, never overlaps its writes (docs/design.md "Scheduling", plans are
// fenced). A lease shorter than twice PlanSkew (an invocation of a few
// seconds, in tests) keeps its first half for writes.
func PlanWriteBy(taken time.Time, lease int64) time.Time {
	end := time.Unix(lease, 0)
	return end.Add(-min(PlanSkew, end.Sub(taken)/2))
}
