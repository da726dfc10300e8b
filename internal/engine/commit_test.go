package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// commitTable is a hand-written Store of one claimed chunk whose commits
// answer with errs in turn (the last one repeats); the first commit takes
// effect whatever it answers, as a commit whose call timed out may.
type commitTable struct {
	Store
	b     batch.Batch
	c     batch.Chunk
	errs  []error
	calls int
}

func (f *commitTable) GetBatch(context.Context, string, string) (batch.Batch, error) { return f.b, nil }
func (f *commitTable) GetChunk(context.Context, string, int) (batch.Chunk, error)    { return f.c, nil }

func (f *commitTable) CommitChunk(_ context.Context, _ string, cm sched.Commit) error {
	f.calls++
	if f.calls == 1 {
		f.c.State, f.c.Attempt = batch.ChunkDone, cm.Chunk.Attempt
		f.b.ChunksDone++
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
			f := &commitTable{b: b, c: c, errs: tt.errs}
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

// selfTable is a Store with a ready index that records the commit.
type selfTable struct {
	Store
	*fakeSched
	cm sched.Commit
}

func (f *selfTable) ReadyHead(ctx context.Context, m string) (sched.Ready, bool, error) {
	return f.fakeSched.ReadyHead(ctx, m)
}
func (f *selfTable) DeleteReady(ctx context.Context, r sched.Ready) error {
	return f.fakeSched.DeleteReady(ctx, r)
}
func (f *selfTable) GetChunk(ctx context.Context, id string, i int) (batch.Chunk, error) {
	return f.fakeSched.GetChunk(ctx, id, i)
}
func (f *selfTable) CommitChunk(_ context.Context, _ string, cm sched.Commit) error {
	f.cm = cm
	return nil
}

// The commit of chunk 0, after a plan that ran again put an entry at
// chunk 0 back, claims chunk 1 as its continuation, not itself.
func TestCommitNeverContinuesWithItself(t *testing.T) {
	t.Parallel()
	stale := sched.Ready{Model: "m", Batch: "x", Seq: 0, Next: 0, Total: 3}
	moved := sched.Ready{Model: "m", Batch: "x", Seq: 1, Next: 1, Total: 3}
	f := &selfTable{fakeSched: &fakeSched{ready: map[string][]sched.Ready{"m": {moved, stale}}}}
	e := testEngine(&Engine{Store: f, Queue: &fakeQueue{}, Log: slog.New(slog.DiscardHandler)})
	c := batch.Chunk{Batch: "x", Tenant: "t", Index: 0, State: batch.ChunkClaimed, Run: "run0", Slots: 2, Model: "m"}
	ok, err := e.commit(context.Background(), batch.Batch{ID: "x", Tenant: "t", ChunksTotal: 3}, sched.Commit{Chunk: c}, nil, nil)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if n := f.cm.Next; n == nil || n.Entry.Batch != "x" || n.Entry.Next != 1 {
		t.Fatalf("continuation %+v, want chunk 1 of x", n)
	}
}
