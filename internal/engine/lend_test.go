package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
)

// lendFixture: chunk 0 of model x (2 rows, 2 slots) and chunk 1 of x
// (rows, 2 slots) run in one invocation, the model's max_concurrency of 4
// between them; chunk 2 of x (8 rows) is pending behind a ready entry
// when next is set, so chunk 0's commit claims it.
func lendFixture(t *testing.T, next bool, rows int) (*Engine, *runsTable, *peakProvider) {
	t.Helper()
	p := newPeakProvider(50 * time.Millisecond)
	specs := []chunkSpec{{"x", 2, 2}, {"x", rows, 2}}
	if next {
		specs = append(specs, chunkSpec{"x", 8, 0})
	}
	e, table := runsFixture(t, p, specs...)
	if next {
		table.pend(2)
		table.readyAt("x", 2, false)
	}
	return e, table, p
}

// executeBoth runs chunks 0 and 1 of a lendFixture in one invocation.
func executeBoth(t *testing.T, e *Engine, table *runsTable) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")})
}

// lentAtCommitOf0 is a BeforeCommit holding chunk 0's commit until its
// slots are lent (whenLent).
func lentAtCommitOf0(p *peakProvider) func(batch.Chunk) error {
	return func(c batch.Chunk) error {
		if c.Index == 0 {
			whenLent(p)
		}
		return nil
	}
}

// whenLent waits until model x has 4 requests in flight: chunk 1's rows
// on chunk 0's slots too, while chunk 0 commits. It returns the most it
// saw, less than 4 if that did not come within 10 s.
func whenLent(p *peakProvider) int {
	most := 0
	for deadline := time.Now().Add(10 * time.Second); most < 4 && time.Now().Before(deadline); {
		most = max(most, p.inflightX())
		time.Sleep(time.Millisecond)
	}
	return most
}

// inflightX is the provider's requests of model x in flight now.
func (p *peakProvider) inflightX() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight["x"]
}

// TestCommitLendsItsSlotsToItsContinuation: while chunk 0 commits a
// claim of chunk 2 for the invocation, its two slots stay in model x's
// use: chunk 1's rows take them, so x has 4 requests in flight during the
// commit, and never more (docs/design.md "Scheduling", per-model slots).
// Before, a committing chunk's slots took no row until its commit landed
// and its continuation loaded: at the default 32 slots a chunk and 768
// rows, about 7% of a large batch's capacity sat idle in commits.
func TestCommitLendsItsSlotsToItsContinuation(t *testing.T) {
	t.Parallel()
	e, table, p := lendFixture(t, true, 40)
	during := make(chan int, 1)
	e.BeforeCommit = func(c batch.Chunk) error {
		if c.Index == 0 {
			during <- whenLent(p)
		}
		return nil
	}
	failed, err := executeBoth(t, e, table)

	if err != nil || len(failed) > 0 || len(table.committed()) != 3 || table.chunkAt(2).State != batch.ChunkDone {
		t.Fatalf("Execute: failed %v, err %v, %d commits, chunk 2 %s: want 3 commits, the continuation run here",
			failed, err, len(table.committed()), table.chunkAt(2).State)
	}
	if n := <-during; n < 4 {
		t.Errorf("while chunk 0 committed, x had at most %d requests in flight: its 2 slots sat idle beside chunk 1's 38 waiting rows", n)
	}
	if p.peak["x"] > 4 {
		t.Errorf("x peaked at %d requests in flight; its chunks hold 4 slots", p.peak["x"])
	}
}

// writeCheck is a runsTable whose CommitChunk of chunk 0 calls check
// first.
type writeCheck struct {
	*runsTable
	check func()
}

func (f *writeCheck) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	if cm.Chunk.Index == 0 {
		f.check()
	}
	return f.runsTable.CommitChunk(ctx, tenant, cm)
}

// TestCommitWithoutContinuationFreesItsSlotsFirst: a commit that claims
// no continuation (no chunk of x waits) returns chunk 0's slots to the
// model, where any invocation may claim them: when it is written, x's
// requests in flight here fit in chunk 1's 2 slots, and stay within them
// while chunk 1's rows go on.
func TestCommitWithoutContinuationFreesItsSlotsFirst(t *testing.T) {
	t.Parallel()
	e, table, p := lendFixture(t, false, 40)
	e.Store = &writeCheck{runsTable: table, check: func() {
		p.mu.Lock()
		at, sent := p.inflight["x"], len(p.sent)
		p.peak["x"] = at // from here on: the peak while the commit is written
		p.mu.Unlock()
		if at > 2 {
			t.Errorf("chunk 0's commit was written with %d requests of x in flight; chunk 1 holds 2 slots", at)
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			p.mu.Lock()
			more := len(p.sent) - sent
			p.mu.Unlock()
			if more >= 6 {
				break
			}
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.peak["x"] > 2 {
			t.Errorf("x had %d requests in flight while chunk 0's commit returned its slots; chunk 1 holds 2", p.peak["x"])
		}
	}}
	failed, err := executeBoth(t, e, table)

	if err != nil || len(failed) > 0 || len(table.committed()) != 2 {
		t.Fatalf("Execute: failed %v, err %v, %d commits", failed, err, len(table.committed()))
	}
}

// checkingQueue is a lockedQueue that records model x's requests in
// flight when each work message is sent.
type checkingQueue struct {
	lockedQueue
	p  *peakProvider
	mu sync.Mutex
	at map[int]int // chunk → x in flight at its send
}

func (q *checkingQueue) Send(ctx context.Context, queue string, v any, delay time.Duration) error {
	if m := v.(msg.Message); m.Type == msg.Chunk {
		q.mu.Lock()
		q.at[m.Chunk] = q.p.inflightX()
		q.mu.Unlock()
	}
	return q.lockedQueue.Send(ctx, queue, v, delay)
}

// TestRefusedContinuationFreesTheSlotsBeforeItsMessage: chunk 0's commit
// claims chunk 2 for the invocation, lending chunk 0's slots to chunk 1's
// rows meanwhile, and lands once the invocation starts no more
// continuations. Chunk 2's work message, which another invocation may run
// at once on those slots, goes only once x's requests in flight here fit
// in chunk 1's 2 slots.
func TestRefusedContinuationFreesTheSlotsBeforeItsMessage(t *testing.T) {
	t.Parallel()
	// Chunk 1 still runs when chunk 0's commit lands (or its commit
	// would claim chunk 2 first).
	e, table, p := lendFixture(t, true, 200)
	q := &checkingQueue{p: p, at: map[int]int{}}
	e.Queue = q
	e.Lease = 2 * time.Second
	start := time.Now()
	// Rows stop 2 s before the deadline; no continuation starts with less
	// than half a lease (1 s) left: at 1.5 s.
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(4500*time.Millisecond))
	defer cancel()
	lent := false
	e.BeforeCommit = func(c batch.Chunk) error {
		if c.Index == 0 {
			for time.Now().Before(start.Add(1600 * time.Millisecond)) {
				lent = lent || p.inflightX() > 2
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	}

	if _, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")}); err != nil {
		t.Fatal(err)
	}
	if n := table.committed()[0].Next; n == nil || n.Exec == "" || n.Entry.Next != 2 {
		t.Fatalf("chunk 0's commit claimed %+v: want chunk 2 for the invocation", n)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	at, sent := q.at[2]
	if !sent {
		t.Fatal("chunk 2's work message was not sent")
	}
	if !lent {
		t.Error("chunk 0's slots were not lent while its commit was written")
	}
	if at > 2 {
		t.Errorf("chunk 2's message went with %d requests of x in flight here; chunk 1 holds 2 slots", at)
	}
}

// TestLendingRunStopsItsModelAtItsLease: chunk 0's lease renewals are
// throttled and its commit (claiming chunk 2 for the invocation, its
// slots lent to chunk 1's rows meanwhile) is written after its lease less
// the skew margin. At that point the tick may take chunk 0 over and hand
// its slots to another invocation, so chunk 1's rows on them stop with
// it (invocation.stopModel) and chunk 1 commits what it answered. Before,
// a committing run stopped nothing: its slots were out of use.
func TestLendingRunStopsItsModelAtItsLease(t *testing.T) {
	t.Parallel()
	e, table, _ := lendFixture(t, true, 200)
	e.Lease = time.Second // skew 0.5 s
	table.renew = func(i int, _ time.Time) error {
		if i == 0 {
			return errors.New("ThrottlingException: rate exceeded")
		}
		return nil
	}
	e.BeforeCommit = func(c batch.Chunk) error {
		if c.Index == 0 {
			// Past the run's lease (set as it started) less the margin.
			time.Sleep(time.Until(time.UnixMilli(table.chunkAt(0).Lease).Add(-e.skew() / 2)))
		}
		return nil
	}
	if _, err := executeBoth(t, e, table); err != nil {
		t.Fatal(err)
	}
	if c1 := table.chunkAt(1); c1.State != batch.ChunkDone || c1.Rows >= 200 {
		t.Errorf("chunk 1 %s with %d of its 200 rows: want it stopped with chunk 0's lease and split", c1.State, c1.Rows)
	}
}
