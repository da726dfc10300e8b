package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
)

// claimedMeanwhile is a runsTable where another invocation's claim takes
// the head of the ready index just before chunk 0's first commit: the
// entry the commit picked moved on, and the chunk the continuation's
// preload read pending is the other run's.
type claimedMeanwhile struct {
	*runsTable
	once sync.Once
}

func (f *claimedMeanwhile) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	if cm.Chunk.Index == 0 {
		f.once.Do(func() {
			r := f.entries("x")[0]
			after := r.Next + 1
			if err := f.ClaimFromPool(ctx, 100, sched.Claim{Entry: r, After: after, Run: "other", Slots: 2, Lease: time.Now().Add(time.Hour)}); err != nil {
				panic(err)
			}
		})
	}
	return f.runsTable.CommitChunk(ctx, tenant, cm)
}

// TestContinuationPreloadOfARacedClaim: chunk 0's commit picks chunk 1 as
// its continuation and starts reading it, but another invocation claims
// chunk 1 before the commit lands (ErrRaced). The commit claims chunk 2
// instead, and the continuation runs chunk 2's rows, once: none of chunk
// 1's, which are the other run's (docs/design.md "Scheduling",
// continuations, fence).
func TestContinuationPreloadOfARacedClaim(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 4, 2}, chunkSpec{"x", 4, 0}, chunkSpec{"x", 4, 0})
	table.pend(1, 2)
	table.readyAt("x", 1, false)
	e.Store = &claimedMeanwhile{runsTable: table}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	if c1, c2 := table.chunkAt(1), table.chunkAt(2); c1.State != batch.ChunkClaimed || c1.Run != "other" || c2.State != batch.ChunkDone {
		t.Fatalf("chunk 1 %s by %q, chunk 2 %s: want chunk 1 left to the other run, chunk 2 run as the continuation", c1.State, c1.Run, c2.State)
	}
	for n := 4; n < 12; n++ {
		if want := map[bool]int{true: 0, false: 1}[n < 8]; p.sent[n] != want {
			t.Errorf("row %d (chunk %d) sent %d times, want %d", n, n/4, p.sent[n], want)
		}
	}
}
