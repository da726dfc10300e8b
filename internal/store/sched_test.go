package store

import (
	"slices"
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
