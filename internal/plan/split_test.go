package plan

import (
	"context"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
)

// Split cuts a chunk between any of its rows, contiguous or spread among
// other models' rows: each side reads back (ReadChunk) as exactly its
// rows, each at its input row index.
func TestSplit(t *testing.T) {
	t.Parallel()
	lines := func(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
	alternating := lines(row("a", "m1"), row("x", "m2"), row("b", "m1"), row("c", "m1"), row("y", "m2"), row("d", "m1"), row("e", "m1"))
	blanks := "\n" + row("a", "m1") + "\r\n\r\n" + row("b", "m1") + "\n  \n" + row("c", "m1") + "\r\n" + row("d", "m1")
	ids := map[string][]string{alternating: {"a", "x", "b", "c", "y", "d", "e"}, blanks: {"a", "b", "c", "d"}}
	tests := []struct {
		name     string
		input    string
		answered string // a letter per row of the chunk of m1: 'y' answered
		wantDone []string
		wantRest []string
	}{
		{"spread: every other row", alternating, "y.y.y", []string{"a", "c", "e"}, []string{"b", "d"}},
		{"spread: the first rows", alternating, "yy...", []string{"a", "b"}, []string{"c", "d", "e"}},
		{"spread: all answered", alternating, "yyyyy", []string{"a", "b", "c", "d", "e"}, nil},
		{"spread: none answered", alternating, ".....", nil, []string{"a", "b", "c", "d", "e"}},
		{"spread: one in the middle left", alternating, "yy.yy", []string{"a", "b", "d", "e"}, []string{"c"}},
		{"blank lines and CRLF", blanks, "y..y", []string{"a", "d"}, []string{"b", "c"}},
		{"blank lines: the last rows left", blanks, "yy..", []string{"a", "b"}, []string{"c", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			chunks, file := split(t, tt.input, jsonl.JSONL, 512, 1<<40)
			c := chunks[0]
			c.State, c.Run, c.Index = batch.ChunkClaimed, "run1", 0
			bucket := &fileBucket{file: file}
			data, _ := bucket.ReadRange(context.Background(), nil, c.Start, c.End)
			rows, err := RowSpans(c, data)
			if err != nil || len(rows) != c.Rows {
				t.Fatalf("row spans: %d of %d, %v", len(rows), c.Rows, err)
			}
			answered := make([]bool, c.Rows)
			for i := range answered {
				answered[i] = tt.answered[i] == 'y'
			}
			done, rest := Split(c, rows, answered)
			if done.Run != "run1" || done.State != batch.ChunkClaimed || rest.State != batch.ChunkPending || rest.Run != "" || rest.Model != "m1" || rest.Batch != c.Batch {
				t.Fatalf("done %+v, rest %+v", done, rest)
			}
			check := func(side string, c batch.Chunk, want []string) {
				t.Helper()
				if c.Rows != len(want) {
					t.Fatalf("%s: %d rows, want %d", side, c.Rows, len(want))
				}
				if c.Rows == 0 {
					return
				}
				checkSpans(t, c)
				reqs, err := ReadChunk(context.Background(), bucket, batch.Batch{}, c)
				if err != nil {
					t.Fatalf("%s: %v", side, err)
				}
				for i, r := range reqs {
					if r.CustomID != want[i] || ids[tt.input][c.Row(i)] != want[i] {
						t.Fatalf("%s row %d: %s at input row %d, want %s", side, i, r.CustomID, c.Row(i), want[i])
					}
				}
			}
			check("done", done, tt.wantDone)
			check("rest", rest, tt.wantRest)
		})
	}
}

// A range that no longer holds the chunk's rows cannot be split.
func TestRowSpansBadRange(t *testing.T) {
	t.Parallel()
	c := batch.Chunk{Batch: "b", Start: 0, End: 10, Rows: 2}
	if _, err := RowSpans(c, []byte(row("a", "m1")+"\n")); err == nil {
		t.Fatal("one row where two were planned: no error")
	}
	if _, err := RowSpans(c, []byte("not json\n")); err == nil {
		t.Fatal("a line that is no request: no error")
	}
}
