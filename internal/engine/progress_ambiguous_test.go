package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
)

// progressTable is a runsTable whose first progress report takes effect
// and then fails (an AWS call that timed out after its write).
type progressTable struct {
	*runsTable
	mu      sync.Mutex
	reports int
	// failRead fails the chunk's next read after the failed report.
	failRead bool
}

func (f *progressTable) GetChunk(ctx context.Context, b string, i int) (batch.Chunk, error) {
	f.mu.Lock()
	fail := f.failRead && f.reports == 1
	f.failRead = f.failRead && !fail
	f.mu.Unlock()
	if fail {
		return batch.Chunk{}, errors.New("RequestCanceled: the invocation's context ended")
	}
	return f.runsTable.GetChunk(ctx, b, i)
}

func (f *progressTable) ReportProgress(ctx context.Context, c batch.Chunk, done batch.Counts) (batch.Counts, error) {
	to, err := f.runsTable.ReportProgress(ctx, c, done)
	if to == (batch.Counts{Completed: c.ReportedCompleted, Failed: c.ReportedFailed}) || err != nil {
		return to, err // nothing reported
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reports++; f.reports == 1 {
		return batch.Counts{}, errors.New("RequestTimeout: the report took effect")
	}
	return to, nil
}

// TestProgressReportThatTookEffectAlthoughItFailed: a progress report that
// took effect although its call failed is still taken out of the batch's
// progress by the chunk's commit (docs/design.md "Progress"). Before, the
// run kept the counts it knew before the report, every later report failed
// its condition, and the commit took out too little: the batch's progress
// stayed above zero for good, its counts past its rows.
func TestProgressReportThatTookEffectAlthoughItFailed(t *testing.T) {
	t.Parallel()
	for _, failRead := range []bool{false, true} {
		t.Run(fmt.Sprintf("read after it fails: %v", failRead), func(t *testing.T) {
			t.Parallel()
			testProgressReportTookEffect(t, failRead)
		})
	}
}

// testProgressReportTookEffect: failRead also fails the read of the chunk
// that follows the failed report (its context ended with the invocation's
// run time): the commit reads the chunk's counts itself.
func testProgressReportTookEffect(t *testing.T, failRead bool) {
	p := newPeakProvider(20 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 200, 1}) // about 4 s: past a report (statusRefresh)
	pt := &progressTable{runsTable: table, failRead: failRead}
	e.Store = pt

	failed, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	if pt.reports == 0 || len(table.committed()) != 1 {
		t.Fatalf("%d reports, %d commits: want a report before the commit", pt.reports, len(table.committed()))
	}
	if b := table.b(); b.ProgressCompleted != 0 || b.ProgressFailed != 0 {
		t.Errorf("batch progress %d completed, %d failed after the chunk's commit, want 0", b.ProgressCompleted, b.ProgressFailed)
	}
}
