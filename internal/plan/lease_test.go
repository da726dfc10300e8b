package plan

import (
	"context"
	"testing"
	"time"
)

func TestPlanLeaseEndsWithTheInvocation(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	if got := LeaseUntil(context.Background(), now); got != now.Add(Lease).Unix() {
		t.Fatalf("no deadline: lease until %d, want %d", got, now.Add(Lease).Unix())
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(9500*time.Millisecond))
	defer cancel()
	if got := LeaseUntil(ctx, now); got != now.Unix()+10 {
		t.Fatalf("deadline in 9.5 s: lease until %d, want %d (rounded up)", got, now.Unix()+10)
	}
}
