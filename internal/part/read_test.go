package part

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
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
func TestReadInOrder(t *testing.T) {
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
			kind, buf := KindOut, &out
			if row%3 == 0 {
				kind, buf = KindErr, &errb
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
	err := Read(chunks, get, func(c batch.Chunk, i int, kind byte, line []byte) error {
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

// countingReader counts the bytes read from a part.
type countingReader struct {
	r    io.Reader
	read *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.read += int64(n)
	return n, err
}

func (countingReader) Close() error { return nil }

// TestReadStreams checks that results are read line by line: when a
// line reaches the writer, only about that line and a read buffer have
// been read from its part, not the whole part (which /results once held in
// the API function's memory, part after part).
func TestReadStreams(t *testing.T) {
	t.Parallel()
	const lineSize, rows = 256 << 10, 40 // parts of 5 MiB each
	c := batch.Chunk{Tenant: "t", Batch: "batch_1", Index: 0, Run: "r", Attempt: "a", State: batch.ChunkDone}
	var out, errb bytes.Buffer
	for i := range rows {
		kind, buf := KindOut, &out
		if i%2 == 1 {
			kind, buf = KindErr, &errb
		}
		c.Pattern += string(kind)
		fmt.Fprintf(buf, "{\"row\":%d,\"pad\":%q}\n", i, strings.Repeat("x", lineSize))
	}
	c.OutBytes, c.ErrBytes = int64(out.Len()), int64(errb.Len())
	parts := map[string][]byte{c.Parts("out"): out.Bytes(), c.Parts("err"): errb.Bytes()}
	var read int64
	get := func(key string) (io.ReadCloser, error) {
		return countingReader{bytes.NewReader(parts[key]), &read}, nil
	}

	var got int
	err := Read([]batch.Chunk{c}, get, func(_ batch.Chunk, i int, kind byte, line []byte) error {
		if want := fmt.Sprintf("{\"row\":%d,", i); !bytes.HasPrefix(line, []byte(want)) || kind != c.Pattern[i] {
			t.Fatalf("line %d (%c) starts %.20q, want %q (%c)", i, kind, line, want, c.Pattern[i])
		}
		if max := int64(i+2)*(lineSize+64) + 2*(64<<10); read > max {
			t.Fatalf("at line %d, %d bytes were read from the parts, want at most %d (a line at a time)", i, read, max)
		}
		got++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != rows {
		t.Errorf("got %d lines, want %d", got, rows)
	}
}
