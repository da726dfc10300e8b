package plan

import (
	"testing"

	"github.com/relaybatch/relay/internal/batch"
)

// A plan that runs again after claims took some of its chunks puts each
// model's entry at its first chunk still pending, following NextSame, and
// none for a model with no chunk left: an entry at a taken chunk could
// point a commit at its own chunk.
func TestReadyEntriesOnlyAtPendingChunks(t *testing.T) {
	t.Parallel()
	chunks := []batch.Chunk{
		{Index: 0, Model: "a", State: batch.ChunkDone, NextSame: 1},
		{Index: 1, Model: "a", State: batch.ChunkClaimed, NextSame: 3},
		{Index: 2, Model: "b", State: batch.ChunkClaimed, NextSame: -1},
		{Index: 3, Model: "a", State: batch.ChunkPending, NextSame: 4},
		{Index: 4, Model: "a", State: batch.ChunkPending, NextSame: -1},
		{Index: 5, Model: "c", State: batch.ChunkPending, NextSame: -1},
	}
	for i := range chunks {
		chunks[i].Batch, chunks[i].Tenant = "x", "t"
	}
	got := map[string]int{}
	for _, r := range ReadyEntries(chunks, 0) {
		got[r.Model] = r.Next
		if r.Total != 6 || !r.Mixed {
			t.Errorf("entry %+v: want total 6, mixed", r)
		}
	}
	if len(got) != 2 || got["a"] != 3 || got["c"] != 5 {
		t.Fatalf("entries at %v, want a at 3, c at 5, none for b", got)
	}
}
