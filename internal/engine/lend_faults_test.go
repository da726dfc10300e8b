package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
)

// whenLent waits until model x has 4 requests in flight: chunk 1's rows
// took chunk 0's 2 slots beside its own 2, while chunk 0 commits.
func whenLent(p *peakProvider) {
	for deadline := time.Now().Add(10 * time.Second); p.inflightX() < 4 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// TestFailedCommitKeepsItsLeaseWhileItsSlotsAreLent: chunk 0's commit
// fails (its part's write, say) while chunk 1's long rows run on chunk 0's
// slots. Until those rows end the slots are chunk 0's, so chunk 0 keeps
// its lease, or stops its model at its lease less the margin: once the
// lease ended a takeover may hand the slots to another invocation
// (docs/design.md "Scheduling", lease rule). Before, the failed run
// stopped its lease at once and waited for the rows: x had 4 requests in
// flight here when chunk 0's lease ended, and chunk 1 holds 2 slots.
func TestFailedCommitKeepsItsLeaseWhileItsSlotsAreLent(t *testing.T) {
	t.Parallel()
	e, table, p := lendFixture(t, false, 6)
	p.rowDelay = func(n int) time.Duration {
		if n < 2 { // chunk 0's rows
			return 20 * time.Millisecond
		}
		return 2500 * time.Millisecond
	}
	e.Lease = time.Second
	e.BeforeCommit = func(c batch.Chunk) error {
		if c.Index != 0 {
			return nil
		}
		whenLent(p)
		return errors.New("RequestTimeout: write the part")
	}
	// The tick's view: x's requests in flight here once chunk 0's lease
	// has ended.
	lapsed, done := make(chan int, 1), make(chan struct{})
	go func() {
		for ; ; time.Sleep(time.Millisecond) {
			select {
			case <-done:
				lapsed <- 0
				return
			default:
			}
			if !time.Now().Before(time.UnixMilli(table.chunkAt(0).Lease)) {
				lapsed <- p.inflightX()
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	_, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")})
	close(done)

	if err != nil {
		t.Fatal(err)
	}
	if n := <-lapsed; n > 2 {
		t.Errorf("chunk 0's lease ended with %d requests of x in flight here; chunk 1 holds 2 slots", n)
	}
}
