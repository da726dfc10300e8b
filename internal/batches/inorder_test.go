package batches

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
)

// closeCounter counts the parts open at once.
type closeCounter struct {
	io.Reader
	open, peak *int
}

func (c closeCounter) Close() error { *c.open--; return nil }

// Lines of chunks whose rows interleave (two models alternating, chunks of
// 4 rows each) come in input row order, each chunk's parts open only
// while its rows come: at most one chunk of each model open at once.
func TestLinesInOrder(t *testing.T) {
	t.Parallel()
	// Rows 0..15: model a at even rows, b at odd; chunks of 4 rows each,
	// numbered as the plan opens them: a0 (0,2,4,6), b0 (1,3,5,7), a1, b1.
	var chunks []batch.Chunk
	parts := map[string][]byte{}
	for i, first := range []int{0, 1, 8, 9} {
		c := batch.Chunk{Tenant: "t", Batch: "batch_1", Index: i, Attempt: "a", State: batch.ChunkDone, FirstRow: first, Rows: 4}
		var out, errb bytes.Buffer
		for j := range 4 {
			row := first + 2*j
			c.Spans = append(c.Spans, batch.Span{Start: int64(row * 10), End: int64(row*10 + 10), Row: row, Rows: 1})
			kind, buf := byte('o'), &out
			if row%3 == 0 {
				kind, buf = 'e', &errb
			}
			c.Pattern += string(kind)
			fmt.Fprintf(buf, "row %d\n", row)
		}
		c.OutBytes, c.ErrBytes = int64(out.Len()), int64(errb.Len())
		parts[c.Parts("out")], parts[c.Parts("err")] = out.Bytes(), errb.Bytes()
		chunks = append(chunks, c)
	}
	open, peak := 0, 0
	get := func(key string) (io.ReadCloser, error) {
		open++
		peak = max(peak, open)
		return closeCounter{bytes.NewReader(parts[key]), &open, &peak}, nil
	}
	var got []string
	err := linesInOrder(chunks, get, func(c batch.Chunk, i int, kind byte, line []byte) error {
		if want := fmt.Sprintf("row %d\n", c.Row(i)); string(line) != want || kind != c.Pattern[i] {
			t.Fatalf("chunk %d line %d: %q (%c), want %q", c.Index, i, line, kind, want)
		}
		got = append(got, string(bytes.TrimSpace(line)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for r := range 16 {
		want = append(want, fmt.Sprintf("row %d", r))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lines %v, want input order %v", got, want)
	}
	if open != 0 || peak > 4 { // two chunks, an out and an err part each
		t.Fatalf("parts open at the end %d, at most at once %d; want 0 and 4", open, peak)
	}
}
