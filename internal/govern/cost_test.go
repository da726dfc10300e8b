package govern

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/store"
)

// A chunk runs while its rows, at the most a row may cost, fit the
// batch's max_cost besides what it spent (priced models only).
func TestAdmitMaxCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)}
	// 1M input and 1M output tokens of "priced": $1 + $3.
	st := &fakeStore{batchUsage: []store.UsageDetail{{UsageRow: store.UsageRow{Model: "priced", InputTokens: 1_000_000, OutputTokens: 1_000_000}}}}
	g := &Checker{Store: st, Models: models(t), Now: clk.now, TTL: time.Nanosecond}
	ceiling := 5.0
	b := batch.Batch{ID: "batch_1", Tenant: "acme", CreatedAt: clk.t.Unix(), MaxCost: &ceiling, RowCost: 0.1}
	if code, _, err := g.Admit(ctx, b, batch.Chunk{Rows: 10}); err != nil || code != "" {
		t.Fatalf("10 rows of $0.1 after $4: %q %v, want admitted", code, err)
	}
	if code, msg, err := g.Admit(ctx, b, batch.Chunk{Rows: 11}); err != nil || code != CodeCostLimitReached {
		t.Fatalf("11 rows of $0.1 after $4: %q %v, want cost_limit_reached", code, err)
	} else {
		t.Log(msg)
	}
	b.MaxCost = nil
	if code, _, _ := g.Admit(ctx, b, batch.Chunk{Rows: 1000}); code != "" {
		t.Fatalf("no max_cost: %q", code)
	}
}

// Two chunks of a batch running at once: the second's admission counts
// the first's rows at their most, though none of them is in the usage yet,
// so together they cannot pass max_cost (docs/api.md "Extensions").
func TestAdmitMaxCostCountsRunningChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)}
	st := &fakeStore{}
	g := &Checker{Store: st, Models: models(t), Now: clk.now, TTL: time.Nanosecond}
	ceiling := 1.0
	b := batch.Batch{ID: "batch_1", Tenant: "acme", CreatedAt: clk.t.Unix(), MaxCost: &ceiling, RowCost: 0.1}
	first := batch.Chunk{Batch: b.ID, Index: 0, Rows: 6, State: batch.ChunkClaimed}
	second := batch.Chunk{Batch: b.ID, Index: 1, Rows: 6, State: batch.ChunkClaimed}
	st.chunks = []batch.Chunk{first, second, {Batch: b.ID, Index: 2, Rows: 6, State: batch.ChunkPending}}
	if code, msg, err := g.Admit(ctx, b, second); err != nil || code != CodeCostLimitReached {
		t.Fatalf("6 rows of $0.1 beside 6 running: %q %v, want cost_limit_reached (max_cost $1)", code, err)
	} else {
		t.Log(msg)
	}
	// Once the first committed, its spend is in the usage instead.
	st.chunks[0].State = batch.ChunkDone
	st.batchUsage = []store.UsageDetail{{UsageRow: store.UsageRow{Model: "priced", InputTokens: 100_000, OutputTokens: 100_000}}} // $0.4
	if code, _, err := g.Admit(ctx, b, second); err != nil || code != "" {
		t.Fatalf("6 rows of $0.1 after $0.4 spent: %q %v, want admitted", code, err)
	}
}
