package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// commitTable is a memTable of one claimed chunk whose commits answer
// with errs in turn (the last one repeats); the first commit takes effect
// whatever it answers, as a commit whose call timed out may.
type commitTable struct {
	*memTable
	errs  []error
	calls int
}

func (f *commitTable) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	f.calls++
	if f.calls == 1 {
		if err := f.memTable.CommitChunk(ctx, tenant, cm); err != nil {
			return err
		}
	}
	return f.errs[min(f.calls, len(f.errs))-1]
}

// A commit that took effect although every try of it answered an error
// (a timeout, then throttles) is a success, learnt from the chunk: never
// an error that would run the chunk's rows again upstream.
func TestCommitOutcomeSettledByTheChunk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		errs []error
	}{
		{"timeouts and throttles", []error{errors.New("timeout"), errors.New("throttled")}},
		{"a token refused as another request", []error{fmt.Errorf("commit: %w", store.ErrCommitUnknown)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := batch.Batch{ID: "batch_c", Tenant: "t", ChunksTotal: 2}
			c := batch.Chunk{Batch: b.ID, Tenant: "t", Rows: 1, State: batch.ChunkClaimed, Run: "run1", Model: "m"}
			f := &commitTable{memTable: oneChunk(b, c), errs: tt.errs}
			e := testEngine(&Engine{Store: f, Queue: &fakeQueue{}, Log: slog.New(slog.DiscardHandler)})
			cm := sched.Commit{Chunk: c, Completed: 1}
			cm.Chunk.Attempt = "att1"
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ok, err := e.commit(ctx, b, cm, nil, nil)
			if !ok || err != nil {
				t.Fatalf("commit after %d calls: %v %v, want it settled as ours", f.calls, ok, err)
			}
		})
	}
}

// The commit of chunk 0, after a plan that ran again put an entry at
// chunk 0 back, claims chunk 1 as its continuation, not itself.
func TestCommitNeverContinuesWithItself(t *testing.T) {
	t.Parallel()
	stale := sched.Ready{Model: "m", Batch: "x", Seq: 0, Next: 0, Total: 3}
	moved := sched.Ready{Model: "m", Batch: "x", Seq: 1, Next: 1, Total: 3}
	b := batch.Batch{ID: "x", Tenant: "t", ChunksTotal: 3}
	c := batch.Chunk{Batch: "x", Tenant: "t", Index: 0, State: batch.ChunkClaimed, Run: "run0", Slots: 2, Model: "m"}
	f := newSchedTable([]sched.Ready{moved, stale}, c)
	f.putBatch(b)
	e := testEngine(&Engine{Store: f, Queue: &fakeQueue{}, Log: slog.New(slog.DiscardHandler)})
	ok, err := e.commit(context.Background(), b, sched.Commit{Chunk: c, ChunksTotal: 3}, nil, nil)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if cms := f.committed(); len(cms) != 1 || cms[0].Next == nil || cms[0].Next.Entry.Batch != "x" || cms[0].Next.Entry.Next != 1 {
		t.Fatalf("commits %+v, want one continuing with chunk 1 of x", cms)
	}
	if c1 := f.chunk("x", 1); c1.State != batch.ChunkClaimed || c1.Slots != 2 {
		t.Fatalf("chunk 1 %+v, want claimed with chunk 0's 2 slots", c1)
	}
}

// countingCommits is a memTable that counts CommitChunk calls.
type countingCommits struct {
	*memTable
	calls int
}

func (f *countingCommits) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	f.calls++
	return f.memTable.CommitChunk(ctx, tenant, cm)
}

// The commit of a batch's only chunk is its last: one transaction, not
// one refused as not the last and a second (a small batch's turnaround,
// docs/design.md "Scheduling"); the finalize message follows it.
func TestCommitOfAnOnlyChunkIsTheLastAtOnce(t *testing.T) {
	t.Parallel()
	b := batch.Batch{ID: "batch_one", Tenant: "t", ChunksTotal: 1}
	c := batch.Chunk{Batch: b.ID, Tenant: "t", Rows: 10, State: batch.ChunkClaimed, Run: "run1", Model: "m"}
	f := &countingCommits{memTable: oneChunk(b, c)}
	q := &fakeQueue{}
	e := testEngine(&Engine{Store: f, Queue: q, Log: slog.New(slog.DiscardHandler)})
	ok, err := e.commit(context.Background(), b, sched.Commit{Chunk: c, Completed: 10}, nil, nil)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if cms := f.committed(); f.calls != 1 || len(cms) != 1 || !cms[0].Last {
		t.Fatalf("%d commit calls, committed %+v; want one, the last", f.calls, cms)
	}
	if len(q.sent) != 1 || q.sent[0].Type != msg.Finalize {
		t.Fatalf("sent %+v, want the finalize", q.sent)
	}
}
