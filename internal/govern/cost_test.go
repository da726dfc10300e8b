package govern

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/store"
)

// A chunk runs while its most fits the batch's max_cost besides what it
// spent (priced models only).
func TestAdmitMaxCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)}
	// 1M input and 1M output tokens of "priced": $1 + $3.
	st := &fakeStore{batchUsage: []store.UsageDetail{{UsageRow: store.UsageRow{Model: "priced", InputTokens: 1_000_000, OutputTokens: 1_000_000}}}}
	g := &Checker{Store: st, Models: models(t), Now: clk.now, TTL: time.Nanosecond}
	ceiling := 5.0
	b := batch.Batch{ID: "batch_1", Tenant: "acme", CreatedAt: clk.t.Unix(), MaxCost: &ceiling}
	if code, msg, err := g.Admit(ctx, b, batch.Chunk{Index: 0, MostCost: 1.1}); err != nil || code != CodeCostLimitReached {
		t.Fatalf("a chunk of $1.1 at most after $4: %q %v, want cost_limit_reached", code, err)
	} else {
		t.Log(msg)
	}
	if code, _, err := g.Admit(ctx, b, batch.Chunk{Index: 0, MostCost: 1}); err != nil || code != "" {
		t.Fatalf("a chunk of $1 at most after $4: %q %v, want admitted", code, err)
	}
	b.MaxCost = nil
	if code, _, _ := g.Admit(ctx, b, batch.Chunk{Index: 1, MostCost: 1000}); code != "" {
		t.Fatalf("no max_cost: %q", code)
	}
}

// Chunks of a batch running at once: each admission counts the holds of
// the others, though none of their rows is in the usage yet, so together
// they cannot pass max_cost; a chunk admitted again replaces its own hold,
// and a native group's chunks are admitted together at their sum
// (docs/api.md "Extensions").
func TestAdmitMaxCostCountsRunningChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)}
	st := &fakeStore{}
	g := &Checker{Store: st, Models: models(t), Now: clk.now, TTL: time.Nanosecond}
	ceiling := 1.0
	b := batch.Batch{ID: "batch_1", Tenant: "acme", CreatedAt: clk.t.Unix(), MaxCost: &ceiling}
	first, second := batch.Chunk{Index: 0, MostCost: 0.6}, batch.Chunk{Index: 1, MostCost: 0.6}
	if code, _, err := g.Admit(ctx, b, first); err != nil || code != "" {
		t.Fatalf("$0.6 of $1: %q %v, want admitted", code, err)
	}
	if code, _, err := g.Admit(ctx, b, first); err != nil || code != "" {
		t.Fatalf("the same chunk again: %q %v, want admitted (its own hold replaced)", code, err)
	}
	if code, msg, err := g.Admit(ctx, b, second); err != nil || code != CodeCostLimitReached {
		t.Fatalf("$0.6 beside $0.6 held: %q %v, want cost_limit_reached (max_cost $1)", code, err)
	} else {
		t.Log(msg)
	}
	// Once the first committed, its hold is out and its spend in the usage.
	delete(st.holds, "0")
	st.batchUsage = []store.UsageDetail{{UsageRow: store.UsageRow{Model: "priced", InputTokens: 100_000, OutputTokens: 100_000}}} // $0.4
	if code, _, err := g.Admit(ctx, b, second); err != nil || code != "" {
		t.Fatalf("$0.6 after $0.4 spent: %q %v, want admitted", code, err)
	}
	// A group of two chunks counts both.
	delete(st.holds, "1")
	st.batchUsage = nil
	if code, _, err := g.Admit(ctx, b, batch.Chunk{Index: 2, MostCost: 0.5}, batch.Chunk{Index: 3, MostCost: 0.6}); err != nil || code != CodeCostLimitReached {
		t.Fatalf("a group of $0.5 and $0.6: %q %v, want cost_limit_reached", code, err)
	}
}

// A chunk committed just before midnight by an invocation whose clock runs
// 2 s ahead records its usage on the next day (and took its hold out); an
// admission just after, on a clock 2 s behind, still counts it (docs/design.md
// "Fault model": clocks off by up to ±2 s). Before, it read the days up to
// its own and missed that spend, and two chunks passed max_cost.
func TestAdmitMaxCostCountsUsageOfASkewedDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	midnight := time.Date(2026, 5, 11, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: midnight.Add(-1500 * time.Millisecond)} // truly 00:00:00.5, 2 s behind
	// $0.8 of "priced" (1 and 3 USD per million), committed on 2026-05-11.
	st := &fakeStore{dayUsage: map[string][]store.UsageDetail{"2026-05-11": {{UsageRow: store.UsageRow{Model: "priced", InputTokens: 200_000, OutputTokens: 200_000}}}}}
	g := &Checker{Store: st, Models: models(t), Now: clk.now, TTL: time.Nanosecond}
	ceiling := 1.0
	b := batch.Batch{ID: "batch_1", Tenant: "acme", CreatedAt: midnight.Add(-time.Hour).Unix(), MaxCost: &ceiling}
	if code, _, err := g.Admit(ctx, b, batch.Chunk{Index: 1, MostCost: 0.5}); err != nil || code != CodeCostLimitReached {
		t.Fatalf("$0.5 after $0.8 spent on a day a skewed clock has not reached: %q %v, want cost_limit_reached", code, err)
	}
	// A batch created just after midnight, its chunk committed by a clock
	// 2 s behind: the day before its creation.
	clk.t = midnight.Add(time.Minute)
	st.dayUsage = map[string][]store.UsageDetail{"2026-05-10": st.dayUsage["2026-05-11"]}
	b.CreatedAt = midnight.Add(time.Second).Unix()
	if code, _, err := g.Admit(ctx, b, batch.Chunk{Index: 1, MostCost: 0.5}); err != nil || code != CodeCostLimitReached {
		t.Fatalf("$0.5 after $0.8 spent on the day before a skewed creation: %q %v, want cost_limit_reached", code, err)
	}
}
