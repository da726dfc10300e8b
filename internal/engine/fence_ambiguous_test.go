package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/queue"
)

// afterFenceTable is a runsTable whose first TakeFence takes effect and
// then fails, as an AWS call that timed out after its write.
type afterFenceTable struct {
	*runsTable
	once sync.Once
}

func (f *afterFenceTable) TakeFence(ctx context.Context, b string, i int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	c, err := f.runsTable.TakeFence(ctx, b, i, run, exec, now, until)
	f.once.Do(func() {
		if err == nil {
			c, err = batch.Chunk{}, errors.New("RequestTimeout: the fence was taken")
		}
	})
	return c, err
}

// TestFenceTakenAlthoughItFailed: a run whose TakeFence took effect
// although its call failed goes back to the queue (a transient error)
// without keeping the fence, so its next delivery runs it. Before, the
// execution did not know the fence was its own, left it held until the
// lease it set, and the next delivery was dropped as a duplicate: the
// chunk waited for the tick's takeover and spent an attempt.
func TestFenceTakenAlthoughItFailed(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 4, 1})
	e.Store = &afterFenceTable{runsTable: table}
	q := e.Queue.(*lockedQueue)

	failed, err := e.Execute(context.Background(), []queue.Delivery{workDelivery(t, table.chunks[0], "d0")})

	if err != nil || len(failed) > 0 || len(q.sent) != 1 {
		t.Fatalf("first delivery: failed %v, err %v, %d sent: want the run sent again", failed, err, len(q.sent))
	}
	m, _ := json.Marshal(q.sent[0])
	if _, err := e.Execute(context.Background(), []queue.Delivery{{ID: "d1", Body: string(m), ReceiveCount: 1}}); err != nil {
		t.Fatal(err)
	}
	if len(table.commits) != 1 || table.chunks[0].State != batch.ChunkDone {
		t.Errorf("%d commits, chunk %s after the run's next delivery: want it run and committed", len(table.commits), table.chunks[0].State)
	}
}
