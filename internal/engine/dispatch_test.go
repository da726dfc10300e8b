package engine

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

// With the limit off, for a batch that has not ended, or for a template,
// no in-flight slot is given back (the engine here has no store: touching
// it would panic). internal/batches tests the create side.
func TestReleaseInflightOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	off := &Engine{}
	if err := off.releaseInflight(ctx, batch.Batch{Status: batch.Completed}); err != nil {
		t.Fatalf("limit off: %v", err)
	}
	on := &Engine{MaxInflight: 1}
	tpl := "* * * * *"
	for _, b := range []batch.Batch{{Status: batch.InProgress}, {Status: batch.Cancelled, Schedule: &tpl}} {
		if err := on.releaseInflight(ctx, b); err != nil {
			t.Fatalf("%s batch: %v", b.Status, err)
		}
	}
}

func TestPlanLeaseEndsWithTheInvocation(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	if got := planLeaseUntil(context.Background(), now); got != now.Add(planLease).Unix() {
		t.Fatalf("no deadline: lease until %d, want %d", got, now.Add(planLease).Unix())
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(9500*time.Millisecond))
	defer cancel()
	if got := planLeaseUntil(ctx, now); got != now.Unix()+10 {
		t.Fatalf("deadline in 9.5 s: lease until %d, want %d (rounded up)", got, now.Unix()+10)
	}
}
