package engine

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
)

// TestContinuationsOfTwoModelsKeepTheirSlots: an invocation runs a chunk
// of model x (3 slots) and one of model y (1 slot); each commit claims
// its model's next chunk for its slots, twice, and the invocation runs
// them as continuations beside each other. No model ever has more
// requests in flight than its chunks hold, across the hand-overs
// (docs/design.md "Scheduling", per-model slots, continuations), and every
// row runs once.
func TestContinuationsOfTwoModelsKeepTheirSlots(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(3 * time.Millisecond)
	e, table := runsFixture(t, p,
		chunkSpec{"x", 12, 3}, chunkSpec{"y", 6, 1},
		chunkSpec{"x", 12, 0}, chunkSpec{"y", 6, 0}, chunkSpec{"x", 12, 0}, chunkSpec{"y", 6, 0})
	table.pend(2, 3, 4, 5)
	for i := 2; i < 4; i++ {
		c := table.chunkAt(i)
		c.NextSame = i + 2
		table.putChunk(c)
	}
	table.readyAt("x", 2, true)
	table.readyAt("y", 3, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	for i := range 6 {
		if c := table.chunkAt(i); c.State != batch.ChunkDone {
			t.Errorf("chunk %d %s: want every chunk run in the invocation", i, c.State)
		}
	}
	if p.peak["x"] > 3 || p.peak["y"] > 1 {
		t.Errorf("peak in flight x %d (its chunks hold 3), y %d (hold 1)", p.peak["x"], p.peak["y"])
	}
	for n := range 54 {
		if p.sent[n] != 1 {
			t.Errorf("row %d sent %d times, want once", n, p.sent[n])
		}
	}
}
