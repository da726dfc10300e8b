//go:build bench

package localstack

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/plan"
)

// lastRound is a batch's chunks and its last round: its last chunks (in
// index order, as the ready index hands them out), one per lane of its
// model (plan.Limits.LanesFor), which run while no chunk waits and the
// model's other claims give their slots back (docs/design.md "Chunks").
// The largest of them, in round trips of its slots, is how long the batch
// runs below its capacity at its end, counted rather than timed.
type lastRound struct {
	chunks, lanes, most, slots int
}

func lastRoundOf(t *testing.T, rt *benchRuntime, batchID string, capacity int) lastRound {
	t.Helper()
	chunks, err := rt.App.Store.Chunks(context.Background(), batchID)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(chunks, func(a, b batch.Chunk) int { return a.Index - b.Index })
	lanes, slots := plan.Limits{}.OrDefaults().LanesFor(capacity)
	r := lastRound{chunks: len(chunks), lanes: lanes, slots: slots}
	for _, c := range chunks[max(0, len(chunks)-lanes):] {
		r.most = max(r.most, c.Rows)
	}
	return r
}

func (r lastRound) String() string {
	return fmt.Sprintf("%d chunks on %d lanes; the last %d hold at most %d rows, %d round trips of %d slots",
		r.chunks, r.lanes, r.lanes, r.most, (r.most+r.slots-1)/r.slots, r.slots)
}
