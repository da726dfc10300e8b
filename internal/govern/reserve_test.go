package govern

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/store"
)

func fixed(r store.Reservation) func() (store.Reservation, error) {
	return func() (store.Reservation, error) { return r, nil }
}

// Two batches whose estimates fit the budget only one at a time: the
// second is refused while the first holds its reservation, admitted once
// the first ended; a retry of an ambiguous reserve keeps its one entry.
func TestReserve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)}
	st := &fakeStore{budget: store.Budget{MonthlyTokens: 1000}, usage: []store.UsageRow{{Model: "free", TotalTokens: 100}}, batches: map[string]batch.Batch{}}
	g := &Checker{Store: st, Models: models(t), Now: clk.now}

	st.ambiguous = true
	if err := g.Reserve(ctx, "acme", "b1", fixed(store.Reservation{Tokens: 600, Rows: 10})); err == nil {
		t.Fatal("the ambiguous write: no error")
	}
	if err := g.Reserve(ctx, "acme", "b1", fixed(store.Reservation{Tokens: 600, Rows: 10})); err != nil || st.writes != 1 || len(st.reservations.Batches) != 1 {
		t.Fatalf("retried reserve: %v, %d writes, %+v; want its first write kept", err, st.writes, st.reservations)
	}
	st.batches["b1"] = batch.Batch{ID: "b1", Status: batch.InProgress, RequestCounts: batch.Counts{Total: 10}}

	err := g.Reserve(ctx, "acme", "b2", fixed(store.Reservation{Tokens: 400, Rows: 4}))
	if !errs.Is(err, errs.Unprocessable) || err.(*errs.Error).Code != CodeBudgetExceeded {
		t.Fatalf("second reserve: %v, want budget_exceeded (100 used + 600 held + 400 > 1000)", err)
	}
	// Half of b1's rows settled: half its reservation is held, the other
	// half is in the usage.
	st.batches["b1"] = batch.Batch{ID: "b1", Status: batch.InProgress, RequestCounts: batch.Counts{Total: 10, Completed: 5}}
	if err := g.Reserve(ctx, "acme", "b2", fixed(store.Reservation{Tokens: 400, Rows: 4})); err != nil {
		t.Fatalf("reserve with b1 half settled: %v (100 used + 300 held + 400 fit 1000)", err)
	}
	// b1 ended: its entry goes at the next write.
	st.batches["b1"] = batch.Batch{ID: "b1", Status: batch.Completed}
	if err := g.Reserve(ctx, "acme", "b3", fixed(store.Reservation{Tokens: 100, Rows: 1})); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.reservations.Batches["b1"]; ok || len(st.reservations.Batches) != 2 {
		t.Fatalf("reservations %+v, want b2 and b3", st.reservations.Batches)
	}
	if err := g.Release(ctx, batch.Batch{ID: "b2", Tenant: "acme"}); err != nil || len(st.reservations.Batches) != 1 {
		t.Fatalf("release: %v, %+v", err, st.reservations.Batches)
	}

	// No budget: nothing reserved, nothing estimated.
	free := &fakeStore{}
	g = &Checker{Store: free, Models: models(t), Now: clk.now}
	if err := g.Reserve(ctx, "acme", "b4", func() (store.Reservation, error) { t.Fatal("estimated"); return store.Reservation{}, nil }); err != nil || free.writes != 0 {
		t.Fatalf("reserve without a budget: %v, %d writes", err, free.writes)
	}
}

func TestHolds(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	r := store.Reservation{Tokens: 1000, USD: 2, Rows: 100, CreatedAt: now.Unix() - 60}
	tests := []struct {
		name     string
		b        batch.Batch
		found    bool
		now      time.Time
		want     store.Reservation
		wantKeep bool
	}{
		{"being recorded", batch.Batch{}, false, now, r, true},
		{"never recorded", batch.Batch{}, false, now.Add(time.Hour), store.Reservation{}, false},
		{"ended", batch.Batch{Status: batch.Completed}, true, now, store.Reservation{}, false},
		{"a quarter settled", batch.Batch{Status: batch.InProgress, RequestCounts: batch.Counts{Total: 100, Completed: 20, Failed: 5}}, true, now,
			store.Reservation{Tokens: 750, USD: 1.5, Rows: 100}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, keep := Holds(r, tt.b, tt.found, tt.now)
			if keep != tt.wantKeep || (keep && got != tt.want) {
				t.Fatalf("got %+v keep %v, want %+v keep %v", got, keep, tt.want, tt.wantKeep)
			}
		})
	}
}

// Rows of another batch that settle while a create is quoted move their
// spend from what that batch holds to the usage: the spend is read after
// what the others hold, so the moved spend is counted (twice at worst,
// never not at all).
func TestReserveSeesRowsSettledWhileQuoting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)}
	st := &fakeStore{budget: store.Budget{MonthlyTokens: 1000},
		reservations: store.Reservations{Batches: map[string]store.Reservation{"b1": {Tokens: 600, Rows: 10, CreatedAt: clk.t.Unix()}}},
		batches:      map[string]batch.Batch{"b1": {ID: "b1", Status: batch.InProgress, RequestCounts: batch.Counts{Total: 10}}}}
	g := &Checker{Store: st, Models: models(t), Now: clk.now}
	quote := func() (store.Reservation, error) {
		// Half of b1's rows commit, spending 300 of its 600 tokens.
		st.usage = []store.UsageRow{{Model: "free", TotalTokens: 300}}
		st.batches["b1"] = batch.Batch{ID: "b1", Status: batch.InProgress, RequestCounts: batch.Counts{Total: 10, Completed: 5}}
		return store.Reservation{Tokens: 500, Rows: 5}, nil
	}
	err := g.Reserve(ctx, "acme", "b2", quote)
	if !errs.Is(err, errs.Unprocessable) || err.(*errs.Error).Code != CodeBudgetExceeded {
		t.Fatalf("reserve: %v, want budget_exceeded (300 used + 300 held + 500 > 1000)", err)
	}
}
