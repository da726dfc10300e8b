package engine

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
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
	for i := 2; i < 6; i++ {
		c := table.chunks[i]
		c.State, c.Run, c.Lease = batch.ChunkPending, "", 0
		table.chunks[i] = c
	}
	table.ready = []sched.Ready{
		{Model: "x", Tenant: "t", Batch: table.b.ID, Next: 2, Mixed: true, Total: 6},
		{Model: "y", Tenant: "t", Batch: table.b.ID, Next: 3, Mixed: true, Total: 6},
	}
	for i := 2; i < 4; i++ {
		c := table.chunks[i]
		c.NextSame = i + 2
		table.chunks[i] = c
	}
	e.Store = &readyByModel{runsTable: table}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunks[0], "d0"), workDelivery(t, table.chunks[1], "d1")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	for i := range 6 {
		if c := table.chunks[i]; c.State != batch.ChunkDone {
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

// readyByModel is a runsTable whose commits claim the head of their
// model's entries (runsTable's claims take the head of the whole index),
// stepping a mixed entry to its chunk's NextSame.
type readyByModel struct{ *runsTable }

func (f *readyByModel) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	f.mu.Lock()
	if n := cm.Next; n != nil {
		// Put the committing model's entry first for runsTable's claim,
		// then step it on.
		for i, r := range f.ready {
			if r.Model == n.Entry.Model {
				f.ready[0], f.ready[i] = f.ready[i], f.ready[0]
				break
			}
		}
	}
	f.mu.Unlock()
	err := f.runsTable.CommitChunk(ctx, tenant, cm)
	if n := cm.Next; err == nil && n != nil && n.After >= 0 {
		f.mu.Lock()
		next := n.Entry
		next.Next, next.Seq = n.After, next.Seq+1
		f.ready = append(f.ready, next)
		f.mu.Unlock()
	}
	return err
}
