package sched

import (
	"slices"
	"strings"
	"testing"
)

func TestQuotas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		max  int
		want []int
	}{
		{1, []int{1}},
		{64, []int{64}},
		{1000, []int{1000}},
		{1001, []int{501, 500}},
		{10000, slices.Repeat([]int{1000}, 10)},
	}
	for _, tt := range tests {
		got := Quotas(tt.max)
		sum := 0
		for _, q := range got {
			sum += q
		}
		if !slices.Equal(got, tt.want) || sum != tt.max {
			t.Errorf("Quotas(%d) = %v, want %v (sum %d)", tt.max, got, tt.want, tt.max)
		}
	}
}

func TestReadyOrder(t *testing.T) {
	t.Parallel()
	// Sort keys order the ready index: priority first, then the turn.
	hi := Ready{Batch: "z", Priority: 5, Seq: 100}
	lo := Ready{Batch: "a", Priority: 0, Seq: 0}
	neg := Ready{Batch: "a", Priority: -3}
	early, late := Ready{Batch: "y", Seq: 9}, Ready{Batch: "b", Seq: 10}
	if !(hi.SK() < lo.SK() && lo.SK() < neg.SK() && early.SK() < late.SK()) {
		t.Fatalf("order: %s %s %s %s %s", hi.SK(), lo.SK(), neg.SK(), early.SK(), late.SK())
	}
}

// store.PutReady finds the head of a priority's turn with begins_with
// ReadyPrefix: every entry of that priority, and only those, starts with it.
func TestReadyPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []int{-1000, -1, 0, 1, 5, 999, 1000} {
		for _, q := range []int{-1000, -1, 0, 1, 5, 999, 1000} {
			sk := Ready{Batch: "batch_1", Priority: q, Seq: 42}.SK()
			if got := strings.HasPrefix(sk, ReadyPrefix(p)); got != (p == q) {
				t.Errorf("entry of priority %d (%s) under prefix of %d: %v", q, sk, p, got)
			}
		}
	}
}
