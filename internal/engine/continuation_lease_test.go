package engine

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
)

// slowCommit is a runsTable whose commits of chunk slow take wait (a
// throttled commit retried, a slow network) before they take effect.
type slowCommit struct {
	*runsTable
	slow int
	wait time.Duration
}

func (f *slowCommit) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	if cm.Chunk.Index == f.slow {
		time.Sleep(f.wait)
	}
	return f.runsTable.CommitChunk(ctx, tenant, cm)
}

// TestSlowCommitsContinuationKeepsItsLease: chunk 0's commit claims chunk
// 1 for the invocation with a lease counted from before the commit, and
// the commit takes a quarter of that lease, or most of it, to land. The
// continuation renews its lease before it must stop (lease rule), so it
// runs all its rows and commits in the invocation. Before, it started on
// the claim's lease as it was, and its first renewal came a third of a
// lease after its start, too late: it stopped after a few rows (a split,
// and every run of its model in the invocation stopped with it), or at
// once and went back to the queue.
func TestSlowCommitsContinuationKeepsItsLease(t *testing.T) {
	t.Parallel()
	// Seconds, not milliseconds: on a loaded machine a renewal due every
	// 333 ms came after a margin of 0.5 s, and the run stopped for that.
	for _, wait := range []time.Duration{time.Second, 2800 * time.Millisecond} {
		t.Run(wait.String(), func(t *testing.T) {
			t.Parallel()
			e, table, p := continuationFixture(t)
			p.delay = 600 * time.Millisecond
			e.Lease = 4 * time.Second // skew 2 s, renewals every 1.33 s
			e.Store = &slowCommit{runsTable: table, slow: 0, wait: wait}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()

			failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

			if err != nil || len(failed) > 0 {
				t.Fatalf("Execute: failed %v, err %v", failed, err)
			}
			if c1, ms := table.chunkAt(1), workMessages(e.Queue.(*lockedQueue)); c1.State != batch.ChunkDone || c1.Rows != 8 || len(ms) > 0 {
				t.Errorf("chunk 1 %s with %d of its 8 rows, work messages %v: want it run whole and committed as the continuation", c1.State, c1.Rows, ms)
			}
		})
	}
}
