package batches

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
)

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

// TestChunkLinesStreams checks that results are read line by line: when a
// line reaches the writer, only about that line and a read buffer have
// been read from its part, not the whole part (which /results once held in
// the API function's memory, part after part).
func TestChunkLinesStreams(t *testing.T) {
	t.Parallel()
	const lineSize, rows = 256 << 10, 40 // parts of 5 MiB each
	c := batch.Chunk{Tenant: "t", Batch: "batch_1", Index: 0, Run: "r", Attempt: "a", State: batch.ChunkDone}
	var out, errb bytes.Buffer
	for i := range rows {
		kind, buf := byte('o'), &out
		if i%2 == 1 {
			kind, buf = 'e', &errb
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
	err := chunkLines(c, get, func(_ batch.Chunk, i int, kind byte, line []byte) error {
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
