package batches

import (
	"testing"

	"github.com/relaybatch/relay/internal/batch"
)

// A page of rows reads committed chunks after its cursor; one of failed
// rows (the dead-letter list) skips, by its pattern, a chunk whose rows
// all went to the output file, without reading its parts.
func TestRowsQueryLists(t *testing.T) {
	t.Parallel()
	done := func(i int, pattern string) batch.Chunk {
		return batch.Chunk{Index: i, State: batch.ChunkDone, Pattern: pattern}
	}
	tests := []struct {
		name string
		q    RowsQuery
		c    batch.Chunk
		want bool
	}{
		{"a committed chunk", RowsQuery{After: -1}, done(0, "oo"), true},
		{"the cursor's chunk", RowsQuery{After: 3}, done(3, "oe"), false},
		{"a chunk not committed yet", RowsQuery{After: -1}, batch.Chunk{Index: 4, State: batch.ChunkClaimed}, false},
		{"failed rows, a chunk with one", RowsQuery{After: -1, Failed: true}, done(1, "oeo"), true},
		{"failed rows, a chunk with none", RowsQuery{After: -1, Failed: true}, done(1, "ooo"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.q.lists(tt.c); got != tt.want {
				t.Errorf("lists: got %v, want %v", got, tt.want)
			}
		})
	}
}
