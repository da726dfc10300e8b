package batch

import (
	"context"
	"testing"
	"time"
)

func TestPlanLeaseEndsWithTheInvocation(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	if got := PlanLeaseUntil(context.Background(), now); got != now.Add(PlanLease).Unix() {
		t.Fatalf("no deadline: lease until %d, want %d", got, now.Add(PlanLease).Unix())
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(9500*time.Millisecond))
	defer cancel()
	if got := PlanLeaseUntil(ctx, now); got != now.Unix()+10 {
		t.Fatalf("deadline in 9.5 s: lease until %d, want %d (rounded up)", got, now.Unix()+10)
	}
}

func TestPlanWriteByLeavesTheSkewMargin(t *testing.T) {
	t.Parallel()
	taken := time.Unix(1_000_000, 0)
	tests := []struct {
		name  string
		lease time.Duration
		want  time.Duration // after taken
	}{
		{"a minute's lease", time.Minute, time.Minute - PlanSkew},
		{"a 4 s invocation keeps half", 4 * time.Second, 2 * time.Second},
	}
	for _, tt := range tests {
		if got := PlanWriteBy(taken, taken.Add(tt.lease).Unix()); !got.Equal(taken.Add(tt.want)) {
			t.Errorf("%s: writes until %v, want %v", tt.name, got.Sub(taken), tt.want)
		}
	}
}
