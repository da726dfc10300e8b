package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
)

// goneAt is a bucket whose reads of the range from start find the input
// deleted (chunk 2's; chunk 1's split still reads its own).
type goneAt struct {
	*memBucket
	start int64
}

func (f *goneAt) ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error) {
	if start == f.start {
		return nil, blob.ErrNotFound
	}
	return f.memBucket.ReadRange(ctx, objs, start, end)
}

// TestGuardDoesNotStopTheModelOnSlotsItsLoadFreed: chunk 0's commit claims
// chunk 2 for the invocation while chunk 1's rows run on chunk 0's slots;
// chunk 2's input was deleted, so its load commits it with error lines,
// freeing the inherited slots first (heldSlots.free: x's rows in flight fit
// in chunk 1's 2 slots). The commit is slow (a throttle), past chunk 2's
// lease less the margin. Chunk 1's rows then run on chunk 1's own 2 slots
// only: nothing is in flight on chunk 2's slots, and the guard must not
// stop model x. Before, the guard asked Pool.Fits(x, 2), which subtracted
// the freed slots a second time (they are in the account's finishing
// already), so it stopped x and chunk 1 was split.
func TestGuardDoesNotStopTheModelOnSlotsItsLoadFreed(t *testing.T) {
	t.Parallel()
	e, table, p := lendFixture(t, true, 6)
	p.rowDelay = func(n int) time.Duration {
		if n >= 2 && n < 8 { // chunk 1's rows
			return time.Second
		}
		return 20 * time.Millisecond
	}
	e.Lease = 3 * time.Second // margin 1.5 s
	e.Blobs = &goneAt{memBucket: e.Blobs.(*memBucket), start: table.chunkAt(2).Start}
	e.Store = &slowCommit{runsTable: table, slow: 2, wait: 1200 * time.Millisecond}
	e.BeforeCommit = lentAtCommitOf0(p)
	if _, err := executeBoth(t, e, table); err != nil {
		t.Fatal(err)
	}
	if n := table.chunkAt(0).Next; n == nil || n.Chunk != 2 {
		t.Fatalf("chunk 0's commit claimed %+v: want chunk 2", n)
	}
	if c2 := table.chunkAt(2); c2.State != batch.ChunkDone {
		t.Fatalf("chunk 2 %s: want it ended at its load (input deleted)", c2.State)
	}
	completed := int64(-1)
	for _, cm := range table.committed() {
		if cm.Chunk.Index == 1 {
			completed = cm.Completed
		}
	}
	if completed != 6 || table.b().ChunksTotal != 3 {
		t.Errorf("chunk 1 committed %d of its 6 rows (-1: no commit), %d chunks: model x was stopped (chunk 1 split) although chunk 2's freed slots held no row", completed, table.b().ChunksTotal)
	}
}

// slowChunkRead is a runsTable whose first read of chunk i (a
// continuation's preload) takes wait.
type slowChunkRead struct {
	*runsTable
	i    int
	wait time.Duration
	once atomic.Bool
}

func (f *slowChunkRead) GetChunk(ctx context.Context, b string, i int) (batch.Chunk, error) {
	if i == f.i && f.once.CompareAndSwap(false, true) {
		time.Sleep(f.wait)
	}
	return f.runsTable.GetChunk(ctx, b, i)
}

// TestGuardKeepsInheritedSlotsOutOfUsePastTheLease: chunk 0's commit claims
// chunk 2 for the invocation (continuation C2 on chunk 0's 2 slots); C2's
// preload is slow, past its claim's lease. At that lease less the margin,
// x's rows in flight (chunk 1's 2) fit without C2's slots. Then chunk 1
// commits and its continuation C3 (chunk 3, 8 rows) runs on x's account:
// x must have at most 2 requests in flight here when chunk 2's lease ends
// (C3 holds 2 slots), as a takeover may hand C2's to another invocation.
// Before, the guard stopped nothing and returned, the account still
// counted C2's slots, and C3 took 4, 2 of them C2's.
func TestGuardKeepsInheritedSlotsOutOfUsePastTheLease(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(20 * time.Millisecond)
	p.rowDelay = func(n int) time.Duration {
		switch {
		case n == 2 || n == 3: // chunk 1's rows
			return 1500 * time.Millisecond
		case n >= 6: // chunk 3's rows
			return 2 * time.Second
		}
		return 20 * time.Millisecond
	}
	e, table := runsFixture(t, p, chunkSpec{"x", 2, 2}, chunkSpec{"x", 2, 2}, chunkSpec{"x", 2, 0}, chunkSpec{"x", 8, 0})
	table.pend(2, 3)
	table.readyAt("x", 2, false)
	e.Lease = 2 * time.Second // margin 1 s
	e.Store = &slowChunkRead{runsTable: table, i: 2, wait: 2500 * time.Millisecond}
	done := make(chan struct{})
	lapsed := lapseOf(table, p, 2, done)
	_, err := executeBoth(t, e, table)
	close(done)
	if err != nil {
		t.Fatal(err)
	}
	if n := table.chunkAt(0).Next; n == nil || n.Chunk != 2 {
		t.Fatalf("chunk 0's commit claimed %+v: want chunk 2", n)
	}
	if n := table.chunkAt(1).Next; n == nil || n.Chunk != 3 {
		t.Fatalf("chunk 1's commit claimed %+v: want chunk 3", n)
	}
	if n := <-lapsed; n > 2 {
		t.Errorf("chunk 2's lease ended with %d requests of x in flight here; only chunk 3's 2 slots are still under a lease", n)
	}
}
