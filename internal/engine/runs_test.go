package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
)

// runsTable is a memTable of one batch's chunks (the engine runs
// them side by side, in one invocation or two), whose lease moves answer
// renew's error first, when it is set.
type runsTable struct {
	*memTable
	id string
	// renew, if set, answers RenewLease and RenewExec before the table
	// does.
	renew func(chunk int, until time.Time) error
}

func (f *runsTable) RenewLease(ctx context.Context, id string, i int, run string, until time.Time) error {
	if f.renew != nil {
		if err := f.renew(i, until); err != nil {
			return err
		}
	}
	return f.memTable.RenewLease(ctx, id, i, run, until)
}

func (f *runsTable) RenewExec(ctx context.Context, id string, i int, run, exec string, until time.Time) error {
	if f.renew != nil {
		if err := f.renew(i, until); err != nil {
			return err
		}
	}
	return f.memTable.RenewExec(ctx, id, i, run, exec, until)
}

// b is the batch as it is now.
func (f *runsTable) b() batch.Batch { return f.batch(f.id) }

// chunkAt is chunk i as it is now.
func (f *runsTable) chunkAt(i int) batch.Chunk { return f.chunk(f.id, i) }

// pend makes the chunks is pending, unclaimed, as a plan leaves them.
func (f *runsTable) pend(is ...int) {
	for _, i := range is {
		c := f.chunkAt(i)
		c.State, c.Run, c.Lease, c.Slots = batch.ChunkPending, "", 0, 0
		f.putChunk(c)
	}
}

// readyAt puts the batch's entry of model at chunk next.
func (f *runsTable) readyAt(model string, next int, mixed bool) {
	f.putEntry(sched.Ready{Model: model, Tenant: "t", Batch: f.id, Next: next, Total: f.b().ChunksTotal, Mixed: mixed})
}

// peakProvider answers every row after delay, recording per model the
// peak of its requests in flight and per row (custom "n") how often it was
// sent and when.
type peakProvider struct {
	mu       sync.Mutex
	delay    time.Duration
	rowDelay func(n int) time.Duration // if set, row n's delay instead
	inflight map[string]int
	peak     map[string]int
	sent     map[int]int
	at       map[int]time.Time
	now      func() time.Time
}

func newPeakProvider(delay time.Duration) *peakProvider {
	return &peakProvider{delay: delay, inflight: map[string]int{}, peak: map[string]int{}, sent: map[int]int{},
		at: map[int]time.Time{}, now: time.Now}
}

func (p *peakProvider) Do(ctx context.Context, _ string, body json.RawMessage, _ provider.Route) inference.Result {
	var row struct {
		Model string `json:"model"`
		N     int    `json:"n"`
	}
	_ = json.Unmarshal(body, &row)
	p.mu.Lock()
	p.inflight[row.Model]++
	p.peak[row.Model] = max(p.peak[row.Model], p.inflight[row.Model])
	p.sent[row.N]++
	p.at[row.N] = p.now()
	delay := p.delay
	if p.rowDelay != nil {
		delay = p.rowDelay(row.N)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inflight[row.Model]--
		p.mu.Unlock()
	}()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return inference.Result{ErrCode: inference.CodeRequestCancelled, ErrMessage: "cut short"}
	}
	return inference.Result{StatusCode: 200, Model: row.Model,
		Body: json.RawMessage(`{"id":"chatcmpl-1","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)}
}

// lockedQueue is a fakeQueue safe for concurrent runs.
type lockedQueue struct {
	mu   sync.Mutex
	sent []msg.Message
}

func (q *lockedQueue) Send(_ context.Context, _ string, v any, _ time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sent = append(q.sent, v.(msg.Message))
	return nil
}

func (q *lockedQueue) SendBatch(ctx context.Context, name string, vs []any, d time.Duration) error {
	for _, v := range vs {
		_ = q.Send(ctx, name, v, d)
	}
	return nil
}

func (q *lockedQueue) ExtendVisibility(context.Context, string, string, time.Duration) error {
	return nil
}

// chunkSpec is one claimed chunk of a test batch: its model, rows and slots.
type chunkSpec struct {
	model string
	rows  int
	slots int
}

// runsFixture builds an engine over one batch whose chunks are specs,
// each claimed by run "run<i>" (its slots in flight on shard 0), rows
// numbered across the batch, its input the object "in".
func runsFixture(t *testing.T, p *peakProvider, specs ...chunkSpec) (*Engine, *runsTable) {
	t.Helper()
	var input strings.Builder
	exp := time.Now().Add(time.Hour).Unix()
	b := batch.Batch{ID: "batch_r", Tenant: "t", Endpoint: "/v1/chat/completions", Status: batch.InProgress,
		ChunksTotal: len(specs), ExpiresAt: &exp}
	table := &runsTable{memTable: newMemTable(), id: b.ID}
	row := 0
	slots := map[string]int{}
	for i, s := range specs {
		start := int64(input.Len())
		for range s.rows {
			fmt.Fprintf(&input, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"n":%d}}`+"\n", row, s.model, row)
			row++
		}
		table.putChunk(batch.Chunk{Batch: b.ID, Tenant: "t", Index: i, Start: start, End: int64(input.Len()),
			FirstRow: row - s.rows, Rows: s.rows, Model: s.model, State: batch.ChunkClaimed, Run: fmt.Sprintf("run%d", i),
			Lease: time.Now().Add(time.Hour).UnixMilli(), Slots: s.slots, NextSame: -1})
		slots[s.model] += s.slots
	}
	for model, n := range slots {
		table.setInflight(model, n)
	}
	b.Input = []batch.Object{{Key: "in", Size: int64(input.Len())}}
	table.putBatch(b)
	bucket := newMemBucket()
	bucket.put("in", []byte(input.String()))
	e := testEngine(&Engine{Store: table, Blobs: bucket, Queue: &lockedQueue{},
		Set: resources.Define("t"), Provider: p, Log: slog.New(slog.DiscardHandler), Now: p.now})
	return e, table
}

// delivery is chunk i's work message as SQS delivers it.
func workDelivery(t *testing.T, c batch.Chunk, id string) msg.Delivery {
	t.Helper()
	m, err := json.Marshal(msg.Message{Type: msg.Chunk, Tenant: c.Tenant, Batch: c.Batch, Chunk: c.Index, Run: c.Run, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	return msg.Delivery{ID: id, Body: string(m), ReceiveCount: 1}
}

// TestExecuteSlotsPerModel: a chunk of model x holding 4 slots and one of
// model y holding 1, run in one invocation, never have more requests of a
// model in flight than that model's chunks hold (docs/design.md
// "Scheduling", per-model slots). Before, both chunks' slots went into one
// pool and each model peaked at 5.
func TestExecuteSlotsPerModel(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(5 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 24, 4}, chunkSpec{"y", 12, 1})

	failed, err := e.Execute(context.Background(), []msg.Delivery{
		workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	if len(table.committed()) != 2 {
		t.Fatalf("%d commits, want 2", len(table.committed()))
	}
	if p.peak["x"] > 4 || p.peak["y"] > 1 {
		t.Fatalf("peak in flight x %d (holds 4), y %d (holds 1)", p.peak["x"], p.peak["y"])
	}
	if p.peak["x"] < 2 {
		t.Errorf("peak in flight x %d: its 4 slots were not used", p.peak["x"])
	}
}

// TestExecuteStopsAtItsLease: a run whose lease renewals all fail (a
// throttle, not a lost lease) sends no row at or after its lease's expiry
// less the skew margin, and cuts the requests it has in flight then
// (docs/design.md "Scheduling", lease rule). The engine's clock is 10
// minutes off the machine's: the rule reads the engine's. Before, a
// throttled renewal was only logged and the run sent its rows on, past
// its lease, into a takeover's.
func TestExecuteStopsAtItsLease(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(20 * time.Millisecond)
	p.now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	e, table := runsFixture(t, p, chunkSpec{"x", 100, 1})
	e.Lease = time.Second
	start := e.Now()
	c := table.chunkAt(0)
	c.Lease = start.Add(e.Lease).UnixMilli()
	table.putChunk(c)
	table.renew = func(int, time.Time) error { return errors.New("ThrottlingException: rate exceeded") }

	_, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The lease the run last held is its first: taken when it started.
	stop := time.UnixMilli(table.chunkAt(0).Lease).Add(-e.skew())
	if len(p.sent) == 0 || len(p.sent) == 100 {
		t.Fatalf("%d of 100 rows sent: want the run to start and to stop at its lease", len(p.sent))
	}
	for n, at := range p.at {
		// The fake stamps a row a moment after the engine's last look at
		// its clock.
		if at.After(stop.Add(time.Millisecond)) {
			t.Errorf("row %d sent at %v, %v after the run's stop (its lease less the margin)", n, at.Format("15:04:05.000"), at.Sub(stop))
		}
	}
	if p.inflight["x"] != 0 {
		t.Errorf("%d requests still in flight after Execute", p.inflight["x"])
	}
}

// TestExecuteOneExecutionPerRun: the same run's work message delivered
// twice, in one invocation or in two at once, runs once: every row is sent
// upstream once, the chunk commits once, and the duplicate is dropped as a
// success without spending anything (docs/design.md "Scheduling", fence).
// Before, both executions ran every row (the provider paid twice, the
// model given twice the chunk's slots) and one commit won.
func TestExecuteOneExecutionPerRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		execute func(e *Engine, d msg.Delivery) [][]string
	}{
		{"both copies in one invocation", func(e *Engine, d msg.Delivery) [][]string {
			dup := d
			dup.ID = "dup"
			failed, err := e.Execute(context.Background(), []msg.Delivery{d, dup})
			if err != nil {
				t.Error(err)
			}
			return [][]string{failed}
		}},
		{"two invocations at once", func(e *Engine, d msg.Delivery) [][]string {
			failed := make([][]string, 2)
			var wg sync.WaitGroup
			for i := range failed {
				wg.Go(func() {
					var err error
					if failed[i], err = e.Execute(context.Background(), []msg.Delivery{d}); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			return failed
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPeakProvider(5 * time.Millisecond)
			e, table := runsFixture(t, p, chunkSpec{"x", 20, 2})

			for _, f := range tt.execute(e, workDelivery(t, table.chunkAt(0), "d0")) {
				if len(f) > 0 {
					t.Errorf("failed deliveries %v: a duplicate is dropped as a success", f)
				}
			}

			for n := range 20 {
				if p.sent[n] != 1 {
					t.Errorf("row %d sent %d times, want once", n, p.sent[n])
				}
			}
			if len(table.committed()) != 1 {
				t.Errorf("%d commits, want 1", len(table.committed()))
			}
			if p.peak["x"] > 2 {
				t.Errorf("peak in flight %d on a chunk of 2 slots", p.peak["x"])
			}
		})
	}
}

// TestExecuteCommitsWhatItAnswered: a chunk whose rows outlast the
// invocation commits the rows it answered from the first, and its other
// rows become a new chunk, claimed for its slots, whose run (the next
// invocation) answers them: every row is answered and committed exactly
// once (docs/design.md "Scheduling", split). Before, the run committed
// nothing and threw its answered rows away, on every attempt.
func TestExecuteCommitsWhatItAnswered(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(20 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 40, 2})
	q := e.Queue.(*lockedQueue)
	// An invocation whose rows must stop after about 200 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 2200*time.Millisecond)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("first invocation: failed %v, err %v", failed, err)
	}
	if len(table.committed()) != 1 || len(q.sent) != 1 {
		t.Fatalf("%d commits and %d messages after the first invocation, want 1 and 1 (the rest's)", len(table.committed()), len(q.sent))
	}
	first := table.committed()[0]
	if first.Chunk.Rows == 0 || first.Chunk.Rows == 40 || first.Completed != int64(first.Chunk.Rows) {
		t.Fatalf("first commit: %d rows, %d completed; want some of the 40, all completed", first.Chunk.Rows, first.Completed)
	}
	rest := table.chunkAt(1)
	if rest.State != batch.ChunkClaimed || rest.Rows != 40-first.Chunk.Rows || rest.Slots != 2 {
		t.Fatalf("rest %+v: want the other %d rows claimed for 2 slots", rest, 40-first.Chunk.Rows)
	}
	m, _ := json.Marshal(q.sent[0])
	failed, err = e.Execute(context.Background(), []msg.Delivery{{ID: "d1", Body: string(m), ReceiveCount: 1}})

	if err != nil || len(failed) > 0 {
		t.Fatalf("second invocation: failed %v, err %v", failed, err)
	}
	if len(table.committed()) != 2 {
		t.Fatalf("%d commits, want 2", len(table.committed()))
	}
	second := table.committed()[1]
	rows := map[int]int{}
	for _, c := range []batch.Chunk{first.Chunk, second.Chunk} {
		for i := range c.Rows {
			rows[c.Row(i)]++
		}
	}
	for r := range 40 {
		if rows[r] != 1 {
			t.Errorf("row %d committed %d times, want once", r, rows[r])
		}
	}
	if second.Chunk.Index != 1 || first.Completed+second.Completed != 40 {
		t.Errorf("commits %+v and %+v: want rows 0-39 completed once", first.Chunk, second.Chunk)
	}
	if got := first.UsageByModel["x"].Requests + second.UsageByModel["x"].Requests; got != 40 {
		t.Errorf("%d requests in the usage, want 40 (one per row)", got)
	}
}

// continuationFixture is a batch of two chunks of model x: chunk 0 claimed
// for 2 slots, chunk 1 pending with its ready entry, so chunk 0's commit
// claims it.
func continuationFixture(t *testing.T) (*Engine, *runsTable, *peakProvider) {
	p := newPeakProvider(time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 8, 2}, chunkSpec{"x", 8, 0})
	table.pend(1)
	table.readyAt("x", 1, false)
	return e, table, p
}

// TestCommitContinuesInTheInvocation: the chunk a commit claims runs in
// the committing invocation, on the slots it was claimed for, without a
// work message (docs/design.md "Scheduling", continuations).
func TestCommitContinuesInTheInvocation(t *testing.T) {
	t.Parallel()
	e, table, p := continuationFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	if len(table.committed()) != 2 || table.chunkAt(1).State != batch.ChunkDone {
		t.Fatalf("%d commits, chunk 1 %s: want the claimed chunk run and committed in the invocation", len(table.committed()), table.chunkAt(1).State)
	}
	for _, m := range e.Queue.(*lockedQueue).sent {
		if m.Type == msg.Chunk {
			t.Errorf("work message sent: %+v", m)
		}
	}
	if p.peak["x"] > 2 {
		t.Errorf("peak in flight %d, over the 2 slots the chunks hold", p.peak["x"])
	}
}

// TestCommitSendsTheContinuationNearTheDeadline: with less than half a
// lease left, the claimed chunk goes to its work message instead.
func TestCommitSendsTheContinuationNearTheDeadline(t *testing.T) {
	t.Parallel()
	e, table, _ := continuationFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), e.lease()/2)
	defer cancel()

	if failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")}); err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	var sent []int
	for _, m := range e.Queue.(*lockedQueue).sent {
		if m.Type == msg.Chunk {
			sent = append(sent, m.Chunk)
		}
	}
	if len(table.committed()) != 1 || table.chunkAt(1).State != batch.ChunkClaimed || !slices.Equal(sent, []int{1}) {
		t.Fatalf("%d commits, chunk 1 %s, chunk messages sent %v: want chunk 1 claimed and its message sent", len(table.committed()), table.chunkAt(1).State, sent)
	}
}

// barrierFence is a runsTable whose fence takes wait, up to a few seconds,
// until n of them have begun.
type barrierFence struct {
	*runsTable
	n       int
	mu      sync.Mutex
	entered int
	all     chan struct{}
	waited  atomic.Bool // a fence take gave up waiting for the others
}

func (f *barrierFence) TakeFence(ctx context.Context, b string, i int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	f.mu.Lock()
	if f.entered++; f.entered == f.n {
		close(f.all)
	}
	f.mu.Unlock()
	select {
	case <-f.all:
	case <-time.After(5 * time.Second):
		f.waited.Store(true)
		return batch.Chunk{}, fmt.Errorf("chunk %d's fence was taken while the other runs' loads waited", i)
	}
	return f.runsTable.TakeFence(ctx, b, i, run, exec, now, until)
}

// An invocation's runs load side by side: a run's load (its fence, its
// batch, its input's range) does not wait for the loads of the runs before
// it. Before, eight lanes of a model of 256 loaded one after another.
func TestRunsLoadSideBySide(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(0)
	e, table := runsFixture(t, p, chunkSpec{"x", 2, 1}, chunkSpec{"x", 2, 1})
	f := &barrierFence{runsTable: table, n: 2, all: make(chan struct{})}
	e.Store = f
	failed, err := executeBoth(t, e, table)
	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	if f.waited.Load() {
		t.Fatal("a run's load waited for the load of the run before it")
	}
	for i := range 2 {
		if c := table.chunkAt(i); c.State != batch.ChunkDone {
			t.Fatalf("chunk %d %s, want done", i, c.State)
		}
	}
}

// takeOverChunk1 is the tick taking chunk 1 over, its lease ended: a new
// run holds it and its slots in another invocation. A lease not ended yet
// is left as it is (the take's condition refuses it).
func takeOverChunk1(ctx context.Context, table *runsTable) {
	_, _ = table.Takeover(ctx, table.chunkAt(1), "run1-takeover", time.Now(), time.Now().Add(time.Minute))
}

// checkTakenOverDidNotStart checks the promise of a run of chunk 1 (model
// x's 2 slots of 4) taken over before it started, beside chunk 0 (8 rows
// on the other 2): chunk 0 ran all its rows, model x never had more than
// chunk 0's slots in flight here, and no row of chunk 1 was sent here.
func checkTakenOverDidNotStart(t *testing.T, p *peakProvider, table *runsTable, failed []string, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if c := table.chunkAt(0); c.State != batch.ChunkDone || c.Rows != 8 {
		t.Errorf("chunk 0 %s with %d of its 8 rows (failed deliveries %v): want all 8 committed, model x not stopped by a run taken over before it started", c.State, c.Rows, failed)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.peak["x"] > 2 {
		t.Errorf("model x peaked at %d in flight here while the takeover of chunk 1 held 2 of its 4 slots elsewhere", p.peak["x"])
	}
	for n := 8; n < 10; n++ {
		if p.sent[n] > 0 {
			t.Errorf("row %d of chunk 1 sent by the run taken over", n)
		}
	}
}

// slowLoadTakeover is a runsTable whose fence take of chunk 0 is slow (a
// throttled, retried load) and during which the tick takes chunk 1 over:
// its lease ended, a new run holds it and its slots in another
// invocation.
type slowLoadTakeover struct {
	*runsTable
	delay, takeoverAt time.Duration
}

func (f *slowLoadTakeover) TakeFence(ctx context.Context, b string, i int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	if i == 0 {
		time.Sleep(f.takeoverAt)
		takeOverChunk1(ctx, f.runsTable)
		time.Sleep(f.delay - f.takeoverAt)
		now, until = time.Now(), time.Now().Add(until.Sub(now))
	}
	return f.runsTable.TakeFence(ctx, b, i, run, exec, now, until)
}

// A run whose chunk was taken over before it started never joins the
// invocation: its slots are the takeover's, in another invocation
// (docs/design.md "Scheduling", fence, lease rule, per-model slots). Here
// chunk 1 (2 slots of model x's 4) loads at once beside chunk 0, whose
// load takes longer than a lease; the tick takes chunk 1 over meanwhile.
// One after another, chunk 1's fence take found the chunk no longer its
// run's and dropped it: chunk 0 ran its 8 rows on its own 2 slots and
// committed them all. Side by side, chunk 1 (its fence taken before the
// takeover) waits for chunk 0's start, then starts anyway: its 2 slots
// join the pool beside the takeover's (model x over its max_concurrency
// of 4 across the two invocations), and its lease, long ended, stops
// model x here (stopModel), cutting chunk 0, which held its lease.
func TestRunTakenOverWhileWaitingForTheRunBeforeItDoesNotStart(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(100 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 8, 2}, chunkSpec{"x", 2, 2})
	e.Lease = 2 * time.Second // skew 1 s
	c1 := table.chunkAt(1)
	c1.Lease = time.Now().Add(e.Lease).UnixMilli()
	table.putChunk(c1)
	e.Store = &slowLoadTakeover{runsTable: table, delay: 2500 * time.Millisecond, takeoverAt: 2200 * time.Millisecond}

	failed, err := executeBoth(t, e, table)

	checkTakenOverDidNotStart(t, p, table, failed, err)
}

// batchReads is a runsTable counting the batch's reads, the first held
// until release is closed.
type batchReads struct {
	*runsTable
	n       atomic.Int32
	entered chan struct{}
	release chan struct{}
	fail    bool // the first read fails once released
}

func (f *batchReads) GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error) {
	if f.n.Add(1) == 1 {
		close(f.entered)
		<-f.release
		if f.fail {
			return batch.Batch{}, errInjected
		}
	}
	return f.runsTable.GetBatch(ctx, tenant, id)
}

// Runs of one batch loading side by side read it once between them: a
// run asking while the first read is out waits for it.
func TestRunsLoadingSideBySideReadTheirBatchOnce(t *testing.T) {
	t.Parallel()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 2, 1}, chunkSpec{"x", 2, 1})
	f := &batchReads{runsTable: table, entered: make(chan struct{}), release: make(chan struct{})}
	e.Store = f
	ctx := context.Background()
	in := &invocation{e: e, ctx: ctx, batches: map[string]*cachedBatch{}}
	var reads sync.WaitGroup
	read := func() {
		if _, err := in.batch(ctx, "t", table.id); err != nil {
			t.Error(err)
		}
	}
	reads.Go(read)
	<-f.entered
	reads.Go(read)
	time.Sleep(20 * time.Millisecond) // the second asks while the first read is out
	close(f.release)
	reads.Wait()
	if n := f.n.Load(); n != 1 {
		t.Fatalf("%d reads of the batch, want 1", n)
	}
}

// A run that waited on another's read of their batch, which failed,
// reads it for itself: one throttled read fails one run's load.
func TestRunWaitingOnAFailedBatchReadReadsItself(t *testing.T) {
	t.Parallel()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 2, 1}, chunkSpec{"x", 2, 1})
	f := &batchReads{runsTable: table, entered: make(chan struct{}), release: make(chan struct{}), fail: true}
	e.Store = f
	ctx := context.Background()
	in := &invocation{e: e, ctx: ctx, batches: map[string]*cachedBatch{}}
	errs := make(chan error, 2)
	var reads sync.WaitGroup
	read := func() {
		_, err := in.batch(ctx, "t", table.id)
		errs <- err
	}
	reads.Go(read)
	<-f.entered
	reads.Go(read)
	time.Sleep(20 * time.Millisecond) // the second asks while the first read is out
	close(f.release)
	reads.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d of the 2 reads failed, want only the one whose read failed", failed)
	}
}

// slowRangeTakeover is a memBucket whose read of one range (chunk 1's,
// after its fence take, inside its load) is slow, and during which the
// tick takes chunk 1 over (its lease, moved by the fence take, ended).
type slowRangeTakeover struct {
	*memBucket
	table             *runsTable
	start             int64
	delay, takeoverAt time.Duration
}

func (b *slowRangeTakeover) ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error) {
	if start == b.start {
		time.Sleep(b.takeoverAt)
		takeOverChunk1(ctx, b.table)
		time.Sleep(b.delay - b.takeoverAt)
	}
	return b.memBucket.ReadRange(ctx, objs, start, end)
}

// TestRunTakenOverWhileWaitingForTheRunBeforeItDoesNotStart's promise when
// the time passes in the run's own load (a slow ranged GET after its fence
// take), not in its wait: a run whose lease is a third of a lease old when
// it could start takes its fence again, and one taken over meanwhile does
// not start. It started (the re-take was decided by the time since its
// load ended), stopped model x's runs here at once, chunk 0 with them, and
// x's rows went on chunk 1's slots while the takeover held them elsewhere.
// Found by an attack on 5dc2ccb.
func TestRunWhoseLeaseEndedInItsOwnLoadDoesNotStart(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(900 * time.Millisecond) // chunk 0 runs ~3.6 s, past chunk 1's load
	e, table := runsFixture(t, p, chunkSpec{"x", 8, 2}, chunkSpec{"x", 2, 2})
	e.Lease = 2 * time.Second // skew 1 s
	e.Blobs = &slowRangeTakeover{memBucket: e.Blobs.(*memBucket), table: table, start: table.chunkAt(1).Start,
		delay: 2500 * time.Millisecond, takeoverAt: 2200 * time.Millisecond}

	failed, err := executeBoth(t, e, table)

	checkTakenOverDidNotStart(t, p, table, failed, err)
}
