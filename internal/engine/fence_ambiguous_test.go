package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
)

// afterFenceTable is a runsTable whose first fails TakeFence calls take
// effect and then fail, as AWS calls that timed out after their write.
type afterFenceTable struct {
	*runsTable
	mu    sync.Mutex
	fails int
}

func (f *afterFenceTable) TakeFence(ctx context.Context, b string, i int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	c, err := f.runsTable.TakeFence(ctx, b, i, run, exec, now, until)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.fails > 0 {
		f.fails--
		c, err = batch.Chunk{}, errors.New("RequestTimeout: the fence was taken")
	}
	return c, err
}

// TestFenceTakenAlthoughItFailed: a run whose TakeFence took effect
// although its call failed takes it again under the same execution id and
// runs. Before, the run went back to the queue for a second or more (and
// before that, its next delivery was dropped as a duplicate and the chunk
// waited for the tick's takeover, spending an attempt).
func TestFenceTakenAlthoughItFailed(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 4, 1})
	e.Store = &afterFenceTable{runsTable: table, fails: 1}
	q := e.Queue.(*lockedQueue)

	failed, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 || len(table.committed()) != 1 || table.chunkAt(0).State != batch.ChunkDone {
		t.Fatalf("failed %v, err %v, %d commits, chunk %s: want the run to take its fence again, run and commit",
			failed, err, len(table.committed()), table.chunkAt(0).State)
	}
	for _, m := range q.sent {
		if m.Type == msg.Chunk && m.Batch == table.chunkAt(0).Batch && m.Chunk == 0 {
			t.Errorf("the run was sent again: %+v", m)
		}
	}
}

// TestFenceNeverTakenGoesBack: a run whose every TakeFence try failed
// (each took effect) goes back to the queue without keeping the fence, so
// its next delivery runs it.
func TestFenceNeverTakenGoesBack(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 4, 1})
	e.Store = &afterFenceTable{runsTable: table, fails: fenceTries}
	q := e.Queue.(*lockedQueue)

	failed, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 || len(q.sent) != 1 {
		t.Fatalf("first delivery: failed %v, err %v, %d sent: want the run sent again", failed, err, len(q.sent))
	}
	m, _ := json.Marshal(q.sent[0])
	if _, err := e.Execute(context.Background(), []msg.Delivery{{ID: "d1", Body: string(m), ReceiveCount: 1}}); err != nil {
		t.Fatal(err)
	}
	if len(table.committed()) != 1 || table.chunkAt(0).State != batch.ChunkDone {
		t.Errorf("%d commits, chunk %s after the run's next delivery: want it run and committed", len(table.committed()), table.chunkAt(0).State)
	}
}
