package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/msg"
)

// preloadFaults is a runsTable whose reads of chunk 1 (a continuation's
// preload) fail the first getFails times.
type preloadFaults struct {
	*runsTable
	getFails atomic.Int32
}

func (f *preloadFaults) GetChunk(ctx context.Context, b string, i int) (batch.Chunk, error) {
	if i == 1 && f.getFails.Add(-1) >= 0 {
		return batch.Chunk{}, errors.New("ThrottlingException: rate exceeded")
	}
	return f.runsTable.GetChunk(ctx, b, i)
}

// goneAfter is a memBucket whose input is deleted once reads ranges
// were read (Blobs.ReadRange answers blob.ErrNotFound).
type goneAfter struct {
	*memBucket
	reads atomic.Int32
}

func (f *goneAfter) ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error) {
	if f.reads.Add(-1) < 0 {
		return nil, blob.ErrNotFound
	}
	return f.memBucket.ReadRange(ctx, objs, start, end)
}

// TestContinuationPreloadFails: the read of a continuation's chunk beside
// the commit that claims it fails (a throttled GetChunk), or its input is
// deleted after chunk 0's rows were read. The continuation falls back to a
// delivered run's start under the fence its claim took: a throttle costs
// nothing more, and a deleted input ends the chunk with an error line per
// row (docs/design.md "Scheduling", continuations; SECURITY.md "Presigned
// URLs"), its slots given back, instead of holding them through retries.
func TestContinuationPreloadFails(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name               string
		getFails, rangeOK  int32
		completed, failed  int64
		wantBatchErrorCode string
	}{
		{"chunk read throttled", 1, 100, 8, 0, ""},
		{"input deleted", 0, 1, 0, 8, batch.CodeInputMissing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, table, _ := continuationFixture(t)
			ft := &preloadFaults{runsTable: table}
			ft.getFails.Store(tt.getFails)
			e.Store = ft
			bucket := &goneAfter{memBucket: e.Blobs.(*memBucket)}
			bucket.reads.Store(tt.rangeOK)
			e.Blobs = bucket
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()

			failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

			if err != nil || len(failed) > 0 {
				t.Fatalf("Execute: failed %v, err %v", failed, err)
			}
			if len(table.committed()) != 2 || table.chunkAt(1).State != batch.ChunkDone {
				t.Fatalf("%d commits, chunk 1 %s: want the continuation run and committed", len(table.committed()), table.chunkAt(1).State)
			}
			if cm := table.committed()[1]; cm.Completed != tt.completed || cm.Failed != tt.failed || cm.Next != nil {
				t.Errorf("chunk 1's commit: %d completed, %d failed, next %+v; want %d and %d, its slots given back",
					cm.Completed, cm.Failed, cm.Next, tt.completed, tt.failed)
			}
			if ms := workMessages(e.Queue.(*lockedQueue)); len(ms) > 0 {
				t.Errorf("work messages %v: the continuation went back to the queue", ms)
			}
			if tt.wantBatchErrorCode != "" && (len(table.b().ErrorList) != 1 || table.b().ErrorList[0].Code != tt.wantBatchErrorCode) {
				t.Errorf("batch errors %+v, want %s", table.b().ErrorList, tt.wantBatchErrorCode)
			}
		})
	}
}
