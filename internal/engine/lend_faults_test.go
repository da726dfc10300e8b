package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
)

// TestFailedCommitKeepsItsLeaseWhileItsSlotsAreLent: chunk 0's commit
// fails (its part's write, say) while chunk 1's long rows run on chunk 0's
// slots. Until those rows end the slots are chunk 0's, so chunk 0 keeps
// its lease, or stops its model at its lease less the margin: once the
// lease ended a takeover may hand the slots to another invocation
// (docs/design.md "Scheduling", lease rule). Before, the failed run
// stopped its lease at once and waited for the rows: x had 4 requests in
// flight here when chunk 0's lease ended, and chunk 1 holds 2 slots.
func TestFailedCommitKeepsItsLeaseWhileItsSlotsAreLent(t *testing.T) {
	t.Parallel()
	e, table, p := lendFixture(t, false, 6)
	p.rowDelay = func(n int) time.Duration {
		if n < 2 { // chunk 0's rows
			return 20 * time.Millisecond
		}
		return 2500 * time.Millisecond
	}
	e.Lease = time.Second
	e.BeforeCommit = func(c batch.Chunk) error {
		if c.Index != 0 {
			return nil
		}
		whenLent(p)
		return errors.New("RequestTimeout: write the part")
	}
	done := make(chan struct{})
	lapsed := lapseOf(table, p, 0, done)
	_, err := executeBoth(t, e, table)
	close(done)

	if err != nil {
		t.Fatal(err)
	}
	if n := <-lapsed; n > 2 {
		t.Errorf("chunk 0's lease ended with %d requests of x in flight here; chunk 1 holds 2 slots", n)
	}
}

// TestContinuationEndedAtItsLoadFreesTheSlotsFirst: chunk 0's commit
// claims chunk 2 for the invocation while chunk 1's rows run on chunk 0's
// slots; chunk 2's input was deleted, so its load ends it with error lines
// and its commit hands its slots to chunk 3 by a work message, which
// another invocation may run at once. The message goes only once x's
// requests in flight here fit in chunk 1's 2 slots. Before, the slots left
// the pool's account unwaited (Pool.HandOn) when the continuation was
// started, and the message went with 4 in flight.
func TestContinuationEndedAtItsLoadFreesTheSlotsFirst(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(500 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 2, 2}, chunkSpec{"x", 12, 2}, chunkSpec{"x", 8, 0}, chunkSpec{"x", 8, 0})
	table.pend(2, 3)
	table.readyAt("x", 2, false)
	q := &checkingQueue{p: p, at: map[int]int{}}
	e.Queue = q
	bucket := &goneAfter{memBucket: e.Blobs.(*memBucket)}
	bucket.reads.Store(2) // chunks 0 and 1 load; then the input is deleted
	e.Blobs = bucket
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
	q.mu.Lock()
	defer q.mu.Unlock()
	at, sent := q.at[3]
	if !sent {
		t.Fatal("chunk 3's work message was not sent")
	}
	if at > 2 {
		t.Errorf("chunk 3's message went with %d requests of x in flight here; chunk 1 holds 2 slots", at)
	}
}

// loadFails is a runsTable whose reads and fence takes of chunk 2 (a
// continuation's load) are throttled.
type loadFails struct{ *runsTable }

func (f *loadFails) GetChunk(ctx context.Context, b string, i int) (batch.Chunk, error) {
	if i == 2 {
		return batch.Chunk{}, errors.New("ThrottlingException: rate exceeded")
	}
	return f.runsTable.GetChunk(ctx, b, i)
}

func (f *loadFails) TakeFence(ctx context.Context, b string, i int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	if i == 2 {
		return batch.Chunk{}, errors.New("ThrottlingException: rate exceeded")
	}
	return f.runsTable.TakeFence(ctx, b, i, run, exec, now, until)
}

// lapseOf samples model x's requests in flight once chunk i is claimed
// and its lease has ended (the tick's view: a takeover may then hand its
// slots to another invocation), until done is closed (0 then).
func lapseOf(table *runsTable, p *peakProvider, i int, done <-chan struct{}) <-chan int {
	lapsed := make(chan int, 1)
	go func() {
		for ; ; time.Sleep(time.Millisecond) {
			select {
			case <-done:
				lapsed <- 0
				return
			default:
			}
			if c := table.chunkAt(i); c.State == batch.ChunkClaimed && !time.Now().Before(time.UnixMilli(c.Lease)) {
				lapsed <- p.inflightX()
				return
			}
		}
	}()
	return lapsed
}

// TestContinuationFailingItsLoadStopsItsModelAtItsClaimsLease: chunk 0's
// commit claims chunk 2 for the invocation while chunk 1's long rows run
// on chunk 0's slots; chunk 2's load fails (its reads and fence takes
// throttled), so nothing keeps its claim's lease while those rows end.
// Once that lease ended a takeover may hand chunk 2's slots to another
// invocation: at its end less the margin the rows on them stop
// (docs/design.md "Scheduling", lease rule). Before, x had 4 requests in
// flight here when chunk 2's lease ended, and chunk 1 holds 2 slots.
func TestContinuationFailingItsLoadStopsItsModelAtItsClaimsLease(t *testing.T) {
	t.Parallel()
	e, table, p := lendFixture(t, true, 6)
	p.rowDelay = func(n int) time.Duration {
		if n < 2 { // chunk 0's rows
			return 20 * time.Millisecond
		}
		return 3 * time.Second
	}
	e.Lease = time.Second
	e.Store = &loadFails{runsTable: table}
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
		t.Errorf("chunk 2's lease ended with %d requests of x in flight here; chunk 1 holds 2 slots", n)
	}
}

// startedRecords is a Workflow that records model x's requests in flight
// in the invocation's pool when each record starts, its steps then sending
// on a pool of their own, and ends it.
type startedRecords struct {
	noWorkflows
	p  *peakProvider
	at chan int
}

func (w startedRecords) Run(_, _ context.Context, _ batch.Batch, _ batch.Chunk, _ jsonl.Request, _ func() batch.Status) error {
	w.at <- w.p.inflightX()
	return nil
}

// recordFixture is chunks 0 and 1 of model x (2 rows on 2 slots, 12 rows
// on 2) and chunk 2, one row made a workflow record, pending at x's ready
// entry: chunk 0's commit claims it.
func recordFixture(t *testing.T, p *peakProvider) (*Engine, *runsTable) {
	t.Helper()
	e, table := runsFixture(t, p, chunkSpec{"x", 2, 2}, chunkSpec{"x", 12, 2}, chunkSpec{"x", 1, 0})
	c2 := table.chunkAt(2)
	bucket := e.Blobs.(*memBucket)
	record := []byte(`{"custom_id":"r14","method":"POST","url":"/v1/chat/completions","body":{"model":"x","n":14,"relay":{"workflow":{}}}}` + "\n")
	input := append(bucket.objects["in"][:c2.Start:c2.Start], record...)
	bucket.put("in", input)
	c2.End = int64(len(input))
	table.putChunk(c2)
	b := table.b()
	b.Input = []batch.Object{{Key: "in", Size: int64(len(input))}}
	table.putBatch(b)
	table.pend(2)
	table.readyAt("x", 2, false)
	return e, table
}

// TestRecordContinuationFreesTheSlotsFirst: chunk 0's commit claims chunk
// 2, a workflow record, for the invocation while chunk 1's rows run on
// chunk 0's slots. The record's steps send on a pool of their own, on the
// same slots: it starts only once x's requests in flight here fit in
// chunk 1's 2 slots. Before, the slots left the pool's account unwaited
// (Pool.HandOn) and the record started with 4 in flight.
func TestRecordContinuationFreesTheSlotsFirst(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(500 * time.Millisecond)
	e, table := recordFixture(t, p)
	w := startedRecords{p: p, at: make(chan int, 1)}
	e.Workflow = w
	e.BeforeCommit = lentAtCommitOf0(p)
	if _, err := executeBoth(t, e, table); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-w.at:
		if at > 2 {
			t.Errorf("chunk 2's record started with %d requests of x in flight here; chunk 1 holds 2 slots", at)
		}
	default:
		t.Fatalf("chunk 2's record did not run here (chunk 0's claim %+v)", table.chunkAt(0).Next)
	}
}

// slowFailedPreload is a runsTable whose first read of chunk 2 (a
// continuation's preload) fails after wait, a throttle slow to come back.
type slowFailedPreload struct {
	*runsTable
	wait   time.Duration
	failed atomic.Bool
}

func (f *slowFailedPreload) GetChunk(ctx context.Context, b string, i int) (batch.Chunk, error) {
	if i == 2 && f.failed.CompareAndSwap(false, true) {
		time.Sleep(f.wait)
		return batch.Chunk{}, errors.New("ThrottlingException: rate exceeded")
	}
	return f.runsTable.GetChunk(ctx, b, i)
}

// slowRange is a bucket whose reads of the range from start take wait.
type slowRange struct {
	*memBucket
	start int64
	wait  time.Duration
}

func (f *slowRange) ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error) {
	if start == f.start {
		time.Sleep(f.wait)
	}
	return f.memBucket.ReadRange(ctx, objs, start, end)
}

// TestContinuationWhoseLoadMovedItsLeaseKeepsItsModel: chunk 0's commit
// claims chunk 2 for the invocation while chunk 1's long rows run on chunk
// 0's slots; chunk 2's preload fails late, so its load takes its fence
// (its lease moved 1.5 s on) and reads its rows slowly, past its claim's
// lease less the margin but well within the moved one. Nothing can take
// chunk 2 over before the moved lease, so chunk 1's rows run on: before,
// the guard on the slots armed at the claim's lease stopped model x there
// and chunk 1 was split after a third of its rows' time.
func TestContinuationWhoseLoadMovedItsLeaseKeepsItsModel(t *testing.T) {
	t.Parallel()
	e, table, p := lendFixture(t, true, 6)
	p.rowDelay = func(n int) time.Duration {
		if n >= 2 && n < 8 { // chunk 1's rows
			return 4 * time.Second
		}
		return 20 * time.Millisecond
	}
	e.Lease = 4 * time.Second // margin 2 s
	e.Store = &slowFailedPreload{runsTable: table, wait: 1500 * time.Millisecond}
	e.Blobs = &slowRange{memBucket: e.Blobs.(*memBucket), start: table.chunkAt(2).Start, wait: time.Second}
	e.BeforeCommit = lentAtCommitOf0(p)
	if _, err := executeBoth(t, e, table); err != nil {
		t.Fatal(err)
	}
	if n := table.chunkAt(0).Next; n == nil || n.Chunk != 2 {
		t.Fatalf("chunk 0's commit claimed %+v: want chunk 2", n)
	}
	completed := int64(-1)
	for _, cm := range table.committed() {
		if cm.Chunk.Index == 1 {
			completed = cm.Completed
		}
	}
	if completed != 6 {
		t.Errorf("chunk 1 committed %d of its 6 rows (-1: no commit): its model was stopped while chunk 2's lease held", completed)
	}
	if total := table.b().ChunksTotal; total != 3 || table.chunkAt(2).State != batch.ChunkDone {
		t.Errorf("%d chunks, chunk 2 %s: want the 3 chunks, none split, chunk 2 run here", total, table.chunkAt(2).State)
	}
}
