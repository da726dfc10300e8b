package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
)

// settleFaults is a runsTable whose first commit of chunk 0 takes effect
// and then fails, as an AWS call that timed out after its write, and whose
// batch reads fail once that commit is in (a throttle).
type settleFaults struct {
	*runsTable
	once     sync.Once
	armed    atomic.Bool
	getFails atomic.Int32
}

func (f *settleFaults) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	err := f.runsTable.CommitChunk(ctx, tenant, cm)
	if cm.Chunk.Index == 0 && err == nil {
		f.once.Do(func() {
			f.armed.Store(true)
			err = errors.New("RequestTimeout: the commit took effect")
		})
	}
	return err
}

func (f *settleFaults) GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error) {
	if f.armed.Load() && f.getFails.Add(-1) >= 0 {
		return batch.Batch{}, errors.New("ThrottlingException: rate exceeded")
	}
	return f.runsTable.GetBatch(ctx, tenant, id)
}

// TestAmbiguousCommitHandsItsClaimOnWithoutTheBatch: chunk 0's commit,
// which claims chunk 1 for its slots (the claim taking chunk 1's fence for
// the invocation), takes effect although its call failed; the batch read
// that follows (is it the batch's last chunk?) is throttled. The claimed
// chunk still runs (or gets its message), and the committed run is not
// reported as failed. Before, settleLost returned the read's error before
// it handed the claim on: chunk 1 stayed claimed with its fence, run by
// nothing and with no message until its lease ended (a takeover, an
// attempt), and chunk 0's delivery failed although it had committed.
func TestAmbiguousCommitHandsItsClaimOnWithoutTheBatch(t *testing.T) {
	t.Parallel()
	e, table, _ := continuationFixture(t)
	ft := &settleFaults{runsTable: table}
	ft.getFails.Store(1)
	e.Store = ft
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil {
		t.Fatal(err)
	}
	sent := false
	for _, m := range workMessages(e.Queue.(*lockedQueue)) {
		sent = sent || (m.Chunk == 1 && m.Run == table.chunkAt(1).Run)
	}
	if c1 := table.chunkAt(1); c1.State != batch.ChunkDone && !sent {
		t.Errorf("chunk 1 %s (run %q), no message: claimed by the commit and left to its lease's end", c1.State, c1.Run)
	}
	if len(failed) > 0 {
		t.Errorf("failed deliveries %v: chunk 0's commit took effect", failed)
	}
}

// chunkReadFails is a settleFaults whose reads of chunk 0 fail the first
// fails times once its ambiguous commit is in.
type chunkReadFails struct {
	*settleFaults
	fails atomic.Int32
}

func (f *chunkReadFails) GetChunk(ctx context.Context, b string, i int) (batch.Chunk, error) {
	if i == 0 && f.armed.Load() && f.fails.Add(-1) >= 0 {
		return batch.Chunk{}, errors.New("ThrottlingException: rate exceeded")
	}
	return f.runsTable.GetChunk(ctx, b, i)
}

// TestAmbiguousCommitStartsItsContinuationOnce: chunk 0's commit, whose
// claim of chunk 1 takes chunk 1's fence for the invocation, takes effect
// although its call failed. Settled by the chunk at once (settle), or by a
// retry that finds the chunk done when that read failed (lostCommit), the
// claim as made runs once, under its fence: chunk 1's rows are each sent
// once, it commits once, and no work message is sent (docs/design.md
// "Conflicts and ambiguous writes").
func TestAmbiguousCommitStartsItsContinuationOnce(t *testing.T) {
	t.Parallel()
	for _, readFails := range []int32{0, 1} {
		t.Run(fmt.Sprintf("%d chunk reads failed", readFails), func(t *testing.T) {
			t.Parallel()
			e, table, p := continuationFixture(t)
			ft := &chunkReadFails{settleFaults: &settleFaults{runsTable: table}}
			ft.fails.Store(readFails)
			e.Store = ft
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()

			failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

			if err != nil || len(failed) > 0 {
				t.Fatalf("Execute: failed %v, err %v", failed, err)
			}
			if len(table.committed()) != 2 || table.chunkAt(1).State != batch.ChunkDone {
				t.Fatalf("%d commits, chunk 1 %s: want chunk 1 run and committed once as the continuation", len(table.committed()), table.chunkAt(1).State)
			}
			for n := range 16 {
				if p.sent[n] != 1 {
					t.Errorf("row %d sent %d times, want once", n, p.sent[n])
				}
			}
			if ms := workMessages(e.Queue.(*lockedQueue)); len(ms) > 0 {
				t.Errorf("work messages %v: the continuation ran in the invocation", ms)
			}
		})
	}
}
