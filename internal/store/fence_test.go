package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/relaybatch/relay/internal/awsfault"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/sched"
)

// TestFenceConditions: the execution fence on a chunk item, against the
// emulator (docs/design.md "Scheduling", fence). One execution of a run
// holds it at a time; another takes it only once the holder's claim ended
// or was handed over or released; renewals and hand-overs of an execution
// that lost it fail; a run that is no longer the chunk's takes nothing.
func TestFenceConditions(t *testing.T) {
	s := emulatorStore(t)
	ctx := context.Background()
	now := time.Now()
	later := now.Add(time.Minute)
	for i := range 5 {
		c := batch.Chunk{Batch: "batch_f", Tenant: "t", Index: i, Rows: 1, Model: "m", State: batch.ChunkPending, NextSame: -1}
		if err := s.PutChunks(ctx, []batch.Chunk{c}); err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimAlone(ctx, c, "run1", later); err != nil {
			t.Fatal(err)
		}
	}
	take := func(chunk int, run, exec string, at time.Time) error {
		_, err := s.TakeFence(ctx, "batch_f", chunk, run, exec, at, at.Add(time.Minute))
		return err
	}
	steps := []struct {
		name string
		do   func() error
		want error
	}{
		{"a first execution takes the fence", func() error { return take(0, "run1", "a", now) }, nil},
		{"it takes it again (its own)", func() error { return take(0, "run1", "a", now) }, nil},
		{"a second execution is fenced out", func() error { return take(0, "run1", "b", now) }, ErrFenced},
		{"the holder renews", func() error { return s.RenewExec(ctx, "batch_f", 0, "run1", "a", now.Add(2*time.Minute)) }, nil},
		{"the other cannot renew", func() error { return s.RenewExec(ctx, "batch_f", 0, "run1", "b", now.Add(2*time.Minute)) }, ErrLeaseLost},
		{"fenced until the renewed claim ends", func() error { return take(0, "run1", "b", now.Add(90*time.Second)) }, ErrFenced},
		{"taken once it ended", func() error { return take(0, "run1", "b", now.Add(3*time.Minute)) }, nil},
		{"the old holder cannot renew", func() error { return s.RenewExec(ctx, "batch_f", 0, "run1", "a", later) }, ErrLeaseLost},
		{"the old holder cannot hand over", func() error { return s.HandOver(ctx, "batch_f", 0, "run1", "a", later) }, ErrLeaseLost},
		{"the holder hands over", func() error { return s.HandOver(ctx, "batch_f", 0, "run1", "b", later) }, nil},
		{"the next delivery takes it at once", func() error { return take(0, "run1", "c", now) }, nil},
		{"a release by another is a no-op", func() error { return s.ReleaseFence(ctx, "batch_f", 0, "a") }, nil},
		{"still fenced", func() error { return take(0, "run1", "d", now) }, ErrFenced},
		{"the holder releases", func() error { return s.ReleaseFence(ctx, "batch_f", 0, "c") }, nil},
		{"taken after the release", func() error { return take(0, "run1", "d", now) }, nil},
		{"another run takes nothing", func() error { return take(1, "run2", "e", now) }, ErrFenced},
		{"a never-fenced run renews nothing", func() error { return s.RenewExec(ctx, "batch_f", 2, "run1", "e", later) }, ErrLeaseLost},
	}
	for _, st := range steps {
		if err := st.do(); !errors.Is(err, st.want) || (st.want == nil && err != nil) {
			t.Fatalf("%s: got %v, want %v", st.name, err, st.want)
		}
	}
	c, err := s.GetChunk(ctx, "batch_f", 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(time.Minute).UnixMilli(); c.Lease != want {
		t.Errorf("lease %d after the last take, want %d: the fence and the lease move together", c.Lease, want)
	}
	// The fence comes back with the chunk as it now is.
	got, err := s.TakeFence(ctx, "batch_f", 3, "run1", "f", now, later)
	if err != nil || got.Run != "run1" || got.State != batch.ChunkClaimed || got.Lease != later.UnixMilli() {
		t.Fatalf("take chunk 3: %+v, %v", got, err)
	}
}

// TestCommitSplit: a run that stopped commits its answered rows and puts
// the rest as a new chunk claimed for its slots, in one transaction
// against the emulator: the chunk is done with its fewer rows, the batch
// counts one chunk more, and a split numbered from a stale chunk count is
// refused (ErrRaced) without effect.
func TestCommitSplit(t *testing.T) {
	s := emulatorStore(t)
	ctx := context.Background()
	lease := time.Now().Add(time.Minute)
	b := batch.Batch{ID: "batch_s", Tenant: "t", Status: batch.InProgress, ChunksTotal: 2, Started: true}
	if _, _, err := s.CreateBatch(ctx, b, IdemKey{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		c := batch.Chunk{Batch: b.ID, Tenant: "t", Index: i, Start: int64(100 * i), End: int64(100*i + 100), FirstRow: 10 * i, Rows: 10,
			Model: "m", State: batch.ChunkPending, NextSame: -1}
		if err := s.PutChunks(ctx, []batch.Chunk{c}); err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimAlone(ctx, c, fmt.Sprint("run", i), lease); err != nil {
			t.Fatal(err)
		}
	}
	split := func(chunk, index int) error {
		c, err := s.GetChunk(ctx, b.ID, chunk)
		if err != nil {
			t.Fatal(err)
		}
		c.Attempt, c.Pattern, c.Rows, c.End = "att", "oooe", 4, c.Start+40
		rest := batch.Chunk{Batch: b.ID, Tenant: "t", Index: index, Start: c.End, End: c.Start + 100, FirstRow: c.FirstRow + 4, Rows: 6,
			Model: "m", NextSame: -1}
		return s.CommitSplit(ctx, "t", sched.Commit{Chunk: c, Completed: 3, Failed: 1, Day: "2026-12-01",
			UsageByModel: map[string]sched.UsageAgg{"m": {Requests: 4}}}, rest, fmt.Sprint("split", index), lease)
	}
	if err := split(0, 2); err != nil {
		t.Fatalf("split chunk 0: %v", err)
	}
	if err := split(1, 2); !errors.Is(err, ErrRaced) {
		t.Fatalf("split of chunk 1 numbered from a stale count: %v, want ErrRaced", err)
	}
	if err := split(0, 3); !errors.Is(err, ErrChunkDone) {
		t.Fatalf("chunk 0 split again: %v, want ErrChunkDone", err)
	}
	if err := split(1, 3); err != nil {
		t.Fatalf("split chunk 1: %v", err)
	}
	got, err := s.GetBatch(ctx, "t", b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ChunksTotal != 4 || got.ChunksDone != 2 || got.RequestCounts.Completed != 6 || got.RequestCounts.Failed != 2 {
		t.Errorf("batch: %d of %d chunks done, counts %+v; want 2 of 4, 6 completed, 2 failed", got.ChunksDone, got.ChunksTotal, got.RequestCounts)
	}
	done, err := s.GetChunk(ctx, b.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != batch.ChunkDone || done.Rows != 4 || done.End != 40 || done.Pattern != "oooe" {
		t.Errorf("chunk 0 %+v: want done with 4 rows up to byte 40", done)
	}
	rest, err := s.GetChunk(ctx, b.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rest.State != batch.ChunkClaimed || rest.Run != "split2" || rest.FirstRow != 4 || rest.Rows != 6 || rest.Start != 40 || rest.Lease != lease.UnixMilli() {
		t.Errorf("chunk 2 %+v: want rows 4-9 claimed by split2", rest)
	}
	cs, err := s.Chunks(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	for _, c := range cs {
		order = append(order, c.Index)
	}
	if !slices.Equal(order, []int{0, 2, 1, 3}) {
		t.Errorf("chunks listed as %v, want input order 0, 2, 1, 3", order)
	}
	expired, err := s.ExpiredLeases(ctx, lease.Add(time.Second), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(expired) != 2 {
		t.Errorf("%d chunks in the lease index past the lease, want the 2 rests", len(expired))
	}
}

// TestCommitSplitKeepsTheAnsweredRows: a split whose answered rows are not
// a prefix of the chunk (row 1 of 0-3 still in flight when the run
// stopped) records the done chunk's rows as plan.Split cut them: its
// spans, first row and range, so its lines map to the rows they answer
// (output order, line ids, a retry's input of its failed rows).
func TestCommitSplitKeepsTheAnsweredRows(t *testing.T) {
	s := emulatorStore(t)
	ctx := context.Background()
	lease := time.Now().Add(time.Minute)
	b := batch.Batch{ID: "batch_k", Tenant: "t", Status: batch.InProgress, ChunksTotal: 1, Started: true}
	if _, _, err := s.CreateBatch(ctx, b, IdemKey{}); err != nil {
		t.Fatal(err)
	}
	c := batch.Chunk{Batch: b.ID, Tenant: "t", Index: 0, Start: 0, End: 40, FirstRow: 0, Rows: 4, Model: "m", State: batch.ChunkPending, NextSame: -1}
	if err := s.PutChunks(ctx, []batch.Chunk{c}); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimAlone(ctx, c, "run0", lease); err != nil {
		t.Fatal(err)
	}
	c, err := s.GetChunk(ctx, b.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Rows 0, 2 and 3 answered; row 1 goes to the rest.
	done := c
	done.Attempt, done.Pattern, done.Rows = "att", "ooo", 3
	done.Spans = []batch.Span{{Start: 0, End: 10, Row: 0, Rows: 1}, {Start: 20, End: 40, Row: 2, Rows: 2}}
	rest := batch.Chunk{Batch: b.ID, Tenant: "t", Index: 1, Start: 10, End: 20, FirstRow: 1, Rows: 1, Model: "m", NextSame: -1}
	if err := s.CommitSplit(ctx, "t", sched.Commit{Chunk: done, Completed: 3, Day: "2026-12-01"}, rest, "split1", lease); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetChunk(ctx, b.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rows != 3 || !slices.Equal(got.Runs(), done.Spans) || got.Row(1) != 2 {
		t.Errorf("done chunk's rows %v (row 1 is input row %d), want %v", got.Runs(), got.Row(1), done.Spans)
	}
}

// TestTakeoverClearsTheFence: the first execution of the run a takeover
// made takes the fence even when its clock is a few seconds behind the
// tick's (docs/design.md "Fault model": clock skew), since the old run's
// fence is no claim on the new run. Before, the old run's exec_until (its
// lease, which the tick's clock saw ended) still fenced the new run out on
// the executor's clock: its delivery was dropped as a duplicate, and the
// chunk waited another lease and spent another attempt.
func TestTakeoverClearsTheFence(t *testing.T) {
	s := emulatorStore(t)
	ctx := context.Background()
	now := time.Now()
	c := batch.Chunk{Batch: "batch_t", Tenant: "t", Index: 0, Rows: 1, Model: "m", State: batch.ChunkPending, NextSame: -1}
	if err := s.PutChunks(ctx, []batch.Chunk{c}); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimAlone(ctx, c, "run1", now); err != nil {
		t.Fatal(err)
	}
	lease := now.Add(time.Minute)
	if _, err := s.TakeFence(ctx, c.Batch, 0, "run1", "a", now, lease); err != nil {
		t.Fatal(err)
	}
	// The execution died; the tick, its clock past the lease, takes over.
	c.Run = "run1"
	tick := lease.Add(time.Second)
	if _, err := s.Takeover(ctx, c, "run2", tick, tick.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The new run's execution, its clock 2 s behind the tick's.
	exec := tick.Add(-2 * time.Second)
	if _, err := s.TakeFence(ctx, c.Batch, 0, "run2", "b", exec, exec.Add(time.Minute)); err != nil {
		t.Fatalf("the new run's first execution: %v, want the fence", err)
	}
}

// TestPutBatchFileOnlyWhileTheBatchRuns: a batch's output and error file
// records are written while it has not ended, and never after (or once
// it is gone): a finalizer late by a read cannot bring back a record the
// user deleted after another ended the batch.
func TestPutBatchFileOnlyWhileTheBatchRuns(t *testing.T) {
	s := emulatorStore(t)
	ctx := context.Background()
	statuses := []batch.Status{batch.Validating, batch.Failed, batch.InProgress, batch.Finalizing, batch.Completed,
		batch.Expired, batch.Cancelling, batch.Cancelled, batch.Scheduled}
	for i, st := range statuses {
		b := batch.Batch{ID: fmt.Sprintf("batch_pf%d", i), Tenant: "t", Status: st, CreatedAt: 1}
		if _, _, err := s.CreateBatch(ctx, b, IdemKey{}); err != nil {
			t.Fatal(err)
		}
		f := file.File{ID: "file-pf" + strconv.Itoa(i) + "-output", Tenant: "t", Filename: "out.jsonl"}
		err := s.PutBatchFile(ctx, f, b.ID)
		_, gerr := s.GetFile(ctx, "t", f.ID)
		if st.Terminal() != errors.Is(err, ErrBatchEnded) || (err == nil) != (gerr == nil) {
			t.Errorf("batch %s: put %v, then read %v; want ErrBatchEnded and no record exactly when it has ended", st, err, gerr)
		}
	}
	err := s.PutBatchFile(ctx, file.File{ID: "file-gone-output", Tenant: "t"}, "batch_gone")
	if _, gerr := s.GetFile(ctx, "t", "file-gone-output"); !errors.Is(err, ErrBatchEnded) || gerr == nil {
		t.Errorf("a batch that is gone: put %v, then read %v; want ErrBatchEnded and no record", err, gerr)
	}
}

// TestUpdateRetriesAWriteATransactionRejected: DynamoDB rejects a write
// of an item an ongoing transaction includes (a commit's counts on the
// batch item, a finalize's check of it) with TransactionConflictException,
// which the SDK does not retry. A read-modify-write of the batch (the
// finalizer's `finalizing`, a cancel) reads and writes again instead of
// failing: before, the finalize that ran its file transactions beside its
// `finalizing` update failed at every delivery that met one.
func TestUpdateRetriesAWriteATransactionRejected(t *testing.T) {
	base := emulatorStore(t)
	ctx := context.Background()
	b := batch.Batch{ID: "batch_tc", Tenant: "t", Status: batch.InProgress, CreatedAt: 1}
	if _, _, err := base.CreateBatch(ctx, b, IdemKey{}); err != nil {
		t.Fatal(err)
	}
	in := awsfault.New(1).Add(awsfault.Rule{Service: "DynamoDB", Operation: "PutItem", Kind: awsfault.Conflict, Times: 2})
	s := New(dynamodb.NewFromConfig(emutest.Config(t), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, in.APIOption) }), base.Table)
	_, err := s.UpdateBatch(ctx, "t", b.ID, func(b *batch.Batch) error { return b.To(batch.Finalizing, time.Now()) })
	got, gerr := base.GetBatch(ctx, "t", b.ID)
	if err != nil || gerr != nil || got.Status != batch.Finalizing || in.Total() != 2 {
		t.Fatalf("update after %d conflicts: %v; batch %s (%v): want it finalizing", in.Total(), err, got.Status, gerr)
	}
}
