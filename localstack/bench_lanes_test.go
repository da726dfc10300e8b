//go:build bench

package localstack

import (
	"context"
	"fmt"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
)

// lanes is how a batch's chunks ran side by side: its chains of
// continuations (a commit's Next, the chunk it claimed for the same
// slots; a chunk no commit claimed starts one), and the upstream round
// trips of each (a chunk's rows ÷ its slots, rounded up). The busiest
// chain's rounds against the batch's rows ÷ capacity are what its chunks'
// sizes cost in wall time, counted rather than timed (docs/design.md
// "Chunks", lanes).
type lanes struct {
	chains, fewest, most int // chains, and the fewest and most chunks one ran
	rounds, ideal        int // the busiest chain's round trips; rows ÷ capacity
}

func laneCounts(t *testing.T, rt *benchRuntime, batchID string, capacity int) lanes {
	t.Helper()
	chunks, err := rt.App.Store.Chunks(context.Background(), batchID)
	if err != nil {
		t.Fatal(err)
	}
	byIndex, claimed := map[int]batch.Chunk{}, map[int]bool{}
	rows := 0
	for _, c := range chunks {
		byIndex[c.Index] = c
		rows += c.Rows
		if c.Next != nil && c.Next.Batch == batchID {
			claimed[c.Next.Chunk] = true
		}
	}
	l := lanes{fewest: len(chunks), ideal: (rows + capacity - 1) / capacity}
	for _, c := range chunks {
		if claimed[c.Index] {
			continue
		}
		n, rounds := 0, 0
		for ok := true; ok; c, ok = nextOf(byIndex, c) {
			n++
			rounds += (c.Rows + max(c.Slots, 1) - 1) / max(c.Slots, 1)
		}
		l.chains++
		l.fewest, l.most, l.rounds = min(l.fewest, n), max(l.most, n), max(l.rounds, rounds)
	}
	return l
}

// nextOf is the chunk c's commit claimed, if any.
func nextOf(byIndex map[int]batch.Chunk, c batch.Chunk) (batch.Chunk, bool) {
	if c.Next == nil || c.Next.Batch != c.Batch {
		return batch.Chunk{}, false
	}
	next, ok := byIndex[c.Next.Chunk]
	return next, ok
}

func (l lanes) String() string {
	return fmt.Sprintf("%d chains of %d–%d chunks; the busiest %d round trips, rows ÷ capacity %d (%.2f×)",
		l.chains, l.fewest, l.most, l.rounds, l.ideal, float64(l.rounds)/float64(max(l.ideal, 1)))
}
