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
