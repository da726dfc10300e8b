package engine

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/fanout"
)

// TestRecordContinuationGuardedWhileItsSlotsFree: chunk 0's commit claims
// chunk 2, a workflow record, for the invocation while chunk 1's long rows
// run on chunk 0's slots. The record's slots leave the pool (Pool.Finish
// waits for chunk 1's rows to leave chunk 0's slots) before keepLease
// starts, so the guard watches them until then: at chunk 2's lease end x
// must have at most chunk 1's 2 requests in flight here. Before, the
// record took the guard's state first (guardStarted) and nothing stopped
// x during that wait.
func TestRecordContinuationGuardedWhileItsSlotsFree(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(500 * time.Millisecond)
	p.rowDelay = func(n int) time.Duration {
		if n >= 2 && n < 14 { // chunk 1's rows
			return 4 * time.Second
		}
		return 20 * time.Millisecond
	}
	e, table := recordFixture(t, p)
	w := startedRecords{p: p, at: make(chan int, 1)}
	e.Workflow = w
	e.Lease = 2 * time.Second // margin 1 s
	e.BeforeCommit = lentAtCommitOf0(p)
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
	if n := <-lapsed; n > 2 {
		t.Errorf("chunk 2's lease ended with %d requests of x in flight here; only chunk 1's 2 slots are under a lease", n)
	}
}

// TestInUseBetweenFreeingAndFinish: free() sets freeing and unlocks
// before Pool.Finish counts the slots as finishing. A guard that reads
// inUse in that window (the run's own leave after errLeaseAtLoad or a
// failed load, or its load's commit, freeing concurrently) asks
// Fits(model, 0), which still counts the slots as free for use: 4 rows in
// flight on 4 slots "fit", so inUse is false and the model is not
// stopped, although 2 of the 4 rows are on the slots about to be handed
// on; the guard's own h.free() then waits (sync.Once) for those rows.
func TestInUseBetweenFreeingAndFinish(t *testing.T) {
	pool := fanout.NewPool()
	pool.Hold("x", 2) // the other chunk's
	pool.Hold("x", 2) // the inherited ones
	for range 4 {
		if !pool.Acquire(context.Background(), "x") {
			t.Fatal("acquire")
		}
	}
	h := &heldSlots{pool: pool, model: "x", n: 2}
	if !h.inUse() {
		t.Fatal("before free: inUse false with 4 in flight on 2 other slots")
	}
	// free() as it stands right after its first unlock: freeing set,
	// Pool.Finish not yet run.
	h.mu.Lock()
	h.freeing = true
	h.mu.Unlock()
	if !h.inUse() {
		t.Errorf("inUse false while free began but Finish has not counted the slots: 4 in flight, 2 slots stay; the guard would not stop the model")
	}
}
