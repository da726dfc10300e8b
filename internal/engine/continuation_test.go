package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
)

// TestStoppedRunStopsItsModel: two chunks of model x, 2 slots each (the
// model's whole max_concurrency of 4), run in one invocation. Chunk 0's
// lease renewals are throttled, so it stops at its lease less the skew;
// the tick takes it over and a second invocation runs it on the same 2
// slots. Chunk 1's rows, which may be in flight on chunk 0's slots (one
// account per model), stop with it (invocation.stopModel). Before, they
// went on: 6 requests of x in flight against a max_concurrency of 4.
func TestStoppedRunStopsItsModel(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(900 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 6, 2}, chunkSpec{"x", 8, 2})
	e.Lease = time.Second // skew 0.5 s
	var takenOver atomic.Bool
	table.renew = func(i int, _ time.Time) error {
		if i == 0 && !takenOver.Load() {
			return errors.New("ThrottlingException: rate exceeded")
		}
		return nil
	}
	d0, d1 := workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")

	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := e.Execute(context.Background(), []msg.Delivery{d0, d1}); err != nil {
			t.Error(err)
		}
	})
	// The tick: once chunk 0's lease ended (by the table's view of it), a
	// new run takes it over and its message is delivered to another
	// invocation.
	deadline := time.Now().Add(10 * time.Second)
	fenced := false
	for {
		time.Sleep(10 * time.Millisecond)
		c := table.chunkAt(0)
		fenced = fenced || table.fenceOf(table.id, 0) != ""
		if fenced && c.State == batch.ChunkClaimed && c.Run == "run0" && time.UnixMilli(c.Lease).Before(e.Now()) {
			if _, err := table.Takeover(context.Background(), c, "run0b", e.Now(), e.Now().Add(e.lease())); err == nil {
				takenOver.Store(true)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("chunk 0's lease never ended")
		}
	}
	p.mu.Lock()
	atTakeover := p.inflight["x"]
	p.mu.Unlock()
	wg.Go(func() {
		if _, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0b")}); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()

	t.Logf("requests of x in flight at the takeover: %d; peak %d", atTakeover, p.peak["x"])
	if p.peak["x"] > 4 {
		t.Errorf("model x peaked at %d requests in flight; its chunks hold 4 slots (max_concurrency)", p.peak["x"])
	}
}

// headThrottle is a runsTable whose ready index Query is throttled the
// first fails times.
type headThrottle struct {
	*runsTable
	fails atomic.Int32
}

func (f *headThrottle) ReadyHead(ctx context.Context, model string) (sched.Ready, bool, error) {
	if f.fails.Add(-1) >= 0 {
		return sched.Ready{}, false, errors.New("ThrottlingException: rate exceeded")
	}
	return f.runsTable.ReadyHead(ctx, model)
}

// TestPickFailureCommitsWithoutContinuation: a throttled ready-index
// Query (the commit's pick of its continuation) does not fail the commit:
// it commits without a continuation, the slots going back to the model.
// Before, the run failed and its answered rows ran upstream again.
func TestPickFailureCommitsWithoutContinuation(t *testing.T) {
	e, table, p := continuationFixture(t)
	ft := &headThrottle{runsTable: table}
	ft.fails.Store(1)
	e.Store = ft
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	var again []msg.Message
	for _, m := range e.Queue.(*lockedQueue).sent {
		if m.Type == msg.Chunk && m.Chunk == 0 {
			again = append(again, m)
		}
	}
	if table.chunkAt(0).State != batch.ChunkDone || len(again) > 0 {
		t.Errorf("chunk 0 %s after one throttled ReadyHead, its message sent again %d times: its %d answered rows run upstream again",
			table.chunkAt(0).State, len(again), len(p.sent))
	}
}

// slowLoad is a runsTable whose fence take and read of chunk slow (a
// run's load, or a continuation's) wait wait.
type slowLoad struct {
	*runsTable
	slow int
	wait time.Duration
}

func (f *slowLoad) TakeFence(ctx context.Context, b string, i int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	if i == f.slow {
		time.Sleep(f.wait)
	}
	return f.runsTable.TakeFence(ctx, b, i, run, exec, now, until)
}

func (f *slowLoad) GetChunk(ctx context.Context, b string, i int) (batch.Chunk, error) {
	if i == f.slow {
		time.Sleep(f.wait)
	}
	return f.runsTable.GetChunk(ctx, b, i)
}

// TestContinuationLoadBesideHeartbeat: a continuation still loading when
// the heartbeat's status tick (statusRefresh) reads the invocation's runs.
// Run with -race: the heartbeat read r.ctx while start wrote it, until a
// run joined the invocation's runs only once loaded.
func TestContinuationLoadBesideHeartbeat(t *testing.T) {
	t.Parallel()
	e, table, _ := continuationFixture(t)
	e.Store = &slowLoad{runsTable: table, slow: 1, wait: statusRefresh + 500*time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 || len(table.committed()) != 2 {
		t.Fatalf("Execute: failed %v, err %v, %d commits", failed, err, len(table.committed()))
	}
}

// TestContinuationThatRanNothingIsSent: chunk 0 and chunk 1 of model x run
// in one invocation; chunk 0's commit claims chunk 2, which the invocation
// takes as its continuation. Its rows queue behind chunk 1's until the
// invocation must stop, so it runs none; it goes to a work message, its
// fence handed over. Before, it had no message and waited for its lease
// to end and a takeover, which spent one of its attempts.
func TestContinuationThatRanNothingIsSent(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(200 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 2, 2}, chunkSpec{"x", 40, 2}, chunkSpec{"x", 4, 0})
	e.Lease = time.Second
	table.pend(2)
	table.readyAt("x", 2, false)
	// runCtx ends 2 s before the deadline: about 1.2 s of rows.
	ctx, cancel := context.WithTimeout(context.Background(), 3200*time.Millisecond)
	defer cancel()

	if _, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")}); err != nil {
		t.Fatal(err)
	}

	c2 := table.chunkAt(2)
	sent := false
	for _, m := range e.Queue.(*lockedQueue).sent {
		sent = sent || (m.Type == msg.Chunk && m.Chunk == 2)
	}
	ran := 0
	for n := 42; n < 46; n++ {
		ran += p.sent[n]
	}
	t.Logf("chunk 2: %s, run %q, %d of its rows sent, message sent %v", c2.State, c2.Run, ran, sent)
	if c2.State == batch.ChunkClaimed && !sent {
		t.Errorf("chunk 2 claimed, %d rows run, no work message: left to its lease's end and a takeover (an attempt)", ran)
	}
}

// TestCommittedRunDoesNotStopItsModel: chunk 0 of model x commits while
// chunk 1 of x runs on in the same invocation. Chunk 0's lease renewals
// after its commit find it done (ErrLeaseLost): that ends chunk 0's lease
// keeping, and nothing else. Before, it stopped every run of x in the
// invocation (invocation.stopModel, meant for a run that lost its chunk
// while running): chunk 1 was cut, split, and its rows in flight sent
// again.
func TestCommittedRunDoesNotStopItsModel(t *testing.T) {
	t.Parallel()
	// Chunk 1 runs 6 s, across chunk 0's renewals (every second) after
	// its commit. A lease of seconds, not milliseconds: on a loaded machine
	// a renewal due every 100 ms came after the skew margin and stopped a
	// live run for want of lease, not for this.
	p := newPeakProvider(300 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 2, 2}, chunkSpec{"x", 40, 2})
	e.Lease = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	if len(table.committed()) != 2 || table.b().ChunksTotal != 2 || table.chunkAt(1).State != batch.ChunkDone || table.chunkAt(1).Rows != 40 {
		t.Fatalf("%d commits, %d chunks, chunk 1 %s with %d rows: want both chunks committed whole, no split",
			len(table.committed()), table.b().ChunksTotal, table.chunkAt(1).State, table.chunkAt(1).Rows)
	}
	for n, k := range p.sent {
		if k != 1 {
			t.Errorf("row %d sent %d times", n, k)
		}
	}
}

// fenceCount is a runsTable counting fence takes by chunk.
type fenceCount struct {
	*runsTable
	takes sync.Map // chunk → *atomic.Int32
}

func (f *fenceCount) TakeFence(ctx context.Context, b string, i int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	n, _ := f.takes.LoadOrStore(i, &atomic.Int32{})
	n.(*atomic.Int32).Add(1)
	return f.runsTable.TakeFence(ctx, b, i, run, exec, now, until)
}

func (f *fenceCount) of(i int) int32 {
	n, ok := f.takes.Load(i)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

// TestContinuationStartsOnItsClaimsFence: the commit that claims the
// invocation's continuation takes the claimed run's fence in the same
// transaction, and the continuation's chunk and rows are read beside the
// commit, so the hand-over is the commit alone (docs/design.md
// "Scheduling", continuations). Before, the continuation took its fence
// and read its rows after the commit: three requests in a row between
// two chunks of a model.
func TestContinuationStartsOnItsClaimsFence(t *testing.T) {
	t.Parallel()
	e, table, _ := continuationFixture(t)
	ft := &fenceCount{runsTable: table}
	e.Store = ft
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 || len(table.committed()) != 2 || table.chunkAt(1).State != batch.ChunkDone {
		t.Fatalf("Execute: failed %v, err %v, %d commits, chunk 1 %s", failed, err, len(table.committed()), table.chunkAt(1).State)
	}
	if n := table.committed()[0].Next; n == nil || n.Exec == "" {
		t.Errorf("chunk 0's commit claimed %+v: no fence for the continuation", n)
	}
	if n := ft.of(1); n != 0 {
		t.Errorf("the continuation took its fence %d times after the commit that claimed it", n)
	}
}

// TestRefusedContinuationHandsItsFenceToTheMessage: a commit claims chunk
// 1 for the invocation (its fence taken with the claim), but the
// invocation no longer runs it when the commit lands (here: less than
// half a lease left by then). Its work message is sent with the fence
// handed over, so its delivery runs at once. Without the hand-over every
// delivery would be fenced out until the claim's lease ended.
func TestRefusedContinuationHandsItsFenceToTheMessage(t *testing.T) {
	t.Parallel()
	e, table, _ := continuationFixture(t)
	ctx := executeRefusingContinuation(t, e, table)

	sent := false
	for _, m := range workMessages(e.Queue.(*lockedQueue)) {
		sent = sent || (m.Chunk == 1 && m.Run == table.chunkAt(1).Run)
	}
	if c1 := table.chunkAt(1); !sent || c1.State != batch.ChunkClaimed {
		t.Fatalf("chunk 1 %s, its message sent: %v", c1.State, sent)
	}
	if _, err := table.TakeFence(ctx, table.b().ID, 1, table.chunkAt(1).Run, "its-delivery", time.Now(), time.Now().Add(time.Minute)); err != nil {
		t.Errorf("the message's delivery takes the fence: %v (the claim's fence was not handed over)", err)
	}
}

// executeRefusingContinuation runs chunk 0 of continuationFixture's table
// so that its commit claims chunk 1 for the invocation (its fence taken)
// and lands once the invocation starts no more continuations (less than
// half a lease left), and checks that much; it returns the invocation's
// context, still live.
func executeRefusingContinuation(t *testing.T, e *Engine, table *runsTable) context.Context {
	t.Helper()
	e.Lease = 2 * time.Second
	start := time.Now()
	// The invocation stops running rows 2 s before its deadline, and
	// starts no continuation with less than a second (half a lease) left:
	// at 1.5 s.
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(4500*time.Millisecond))
	t.Cleanup(cancel)
	e.BeforeCommit = func(c batch.Chunk) error {
		if c.Index == 0 {
			time.Sleep(time.Until(start.Add(1600 * time.Millisecond)))
		}
		return nil
	}

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 || table.chunkAt(0).State != batch.ChunkDone {
		t.Fatalf("Execute: failed %v, err %v, chunk 0 %s", failed, err, table.chunkAt(0).State)
	}
	if n := table.committed()[0].Next; n == nil || n.Exec == "" {
		t.Fatalf("chunk 0's commit claimed %+v: no fence for a continuation (picked at %v)", n, time.Since(start))
	}
	return ctx
}
