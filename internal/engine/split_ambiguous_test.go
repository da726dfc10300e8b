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

// afterSplitTable is a runsTable whose first CommitSplit takes effect and
// then fails, as an AWS call that timed out after its write (docs/design.md
// "Fault model").
type afterSplitTable struct {
	*runsTable
	once sync.Once
}

func (f *afterSplitTable) CommitSplit(ctx context.Context, tenant string, cm sched.Commit, rest batch.Chunk, run string, lease time.Time) error {
	err := f.runsTable.CommitSplit(ctx, tenant, cm, rest, run, lease)
	f.once.Do(func() {
		if err == nil {
			err = errors.New("RequestTimeout: the split took effect")
		}
	})
	return err
}

// TestSplitThatTookEffectAlthoughItFailed: a split whose CommitSplit took
// effect although its call failed keeps the parts its done chunk points
// to, and sends the rest's work message. Before, the retry found the
// chunk done (ErrChunkDone), took it for another run's commit and deleted
// the committed parts: the answered rows were lost.
func TestSplitThatTookEffectAlthoughItFailed(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(20 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 40, 2})
	bucket := e.Blobs.(*memBucket)
	e.Store = &afterSplitTable{runsTable: table}
	q := e.Queue.(*lockedQueue)
	ctx, cancel := context.WithTimeout(context.Background(), 2200*time.Millisecond)
	defer cancel()

	_, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil {
		t.Fatal(err)
	}
	done := table.chunkAt(0)
	if done.State != batch.ChunkDone || table.chunkAt(1).State != batch.ChunkClaimed {
		t.Fatalf("chunk 0 %s, rest %s: want the split recorded", done.State, table.chunkAt(1).State)
	}
	for _, k := range bucket.deletedKeys() {
		for _, kind := range []string{"out", "err", "usage"} {
			if k == done.Parts(kind) {
				t.Errorf("committed part %s deleted: the answered rows are lost", k)
			}
		}
	}
	if len(q.sent) != 1 || q.sent[0].Chunk != 1 || q.sent[0].Run != table.chunkAt(1).Run {
		t.Errorf("messages sent %+v, want the rest's (chunk 1, run %s)", q.sent, table.chunkAt(1).Run)
	}
}
