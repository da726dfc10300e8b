package sched

import (
	"reflect"
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

func TestMoves(t *testing.T) {
	a := Ready{Model: "m", Batch: "a", Total: 3}
	b := Ready{Model: "m", Batch: "b", Seq: 4, Next: 2, Total: 3}
	claim := func(r Ready) Claim {
		after := r.Next + 1
		if after >= r.Total {
			after = -1
		}
		return Claim{Entry: r, After: after}
	}
	step := func(r Ready) Ready {
		n, ok := claim(r).Stepped()
		if !ok {
			t.Fatalf("%+v has no next step", r)
		}
		return n
	}
	a1, a2 := step(a), step(step(a))
	tests := []struct {
		name        string
		cs          []Claim
		taken, left []Ready
	}{
		{"one claim steps its entry", []Claim{claim(a)}, []Ready{a}, []Ready{a1}},
		{"the last chunk's claim leaves nothing", []Claim{claim(b)}, []Ready{b}, nil},
		{"claims of one entry take it once and leave its last step", []Claim{claim(a), claim(a1)}, []Ready{a}, []Ready{a2}},
		{"every chunk of an entry", []Claim{claim(a), claim(a1), claim(a2)}, []Ready{a}, nil},
		{"entries taking turns", []Claim{claim(a), claim(b), claim(a1)}, []Ready{a, b}, []Ready{a2}},
	}
	for _, tt := range tests {
		taken, left := Moves(tt.cs)
		if !reflect.DeepEqual(taken, tt.taken) || !reflect.DeepEqual(left, tt.left) {
			t.Errorf("%s: taken %+v left %+v, want %+v and %+v", tt.name, taken, left, tt.taken, tt.left)
		}
	}
}
