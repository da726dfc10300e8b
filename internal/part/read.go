package part

import (
	"bufio"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/relaybatch/relay/internal/batch"
)

// The letters of a chunk's pattern (batch.Chunk.Pattern): where each row's
// line is, in the chunk's .out part or its .err part.
const (
	KindOut byte = 'o' // a 2xx answer: a line of the output file
	KindErr byte = 'e' // any other: a line of the error file
)

// HasErrors says whether done chunk c has lines in the error file.
func HasErrors(c batch.Chunk) bool {
	return strings.IndexByte(c.Pattern, KindErr) >= 0
}

// InErr says whether row i of done chunk c has its line in the error file.
func InErr(c batch.Chunk, i int) bool {
	return i < len(c.Pattern) && c.Pattern[i] == KindErr
}

// Read calls fn with the lines of done chunks in input row order, with the
// line's index in its chunk and its kind (KindOut, KindErr): each chunk's
// lines are in its row order (batch.Chunk.Row), read from its .out and .err
// parts as its pattern says, and chunks of several models interleave, so it
// merges them, a chunk's parts opened when its first row comes and closed
// after its last. It streams: memory is a line and two read buffers per
// open chunk (docs/design.md "Memory"). fn must not keep line.
func Read(chunks []batch.Chunk, get func(key string) (io.ReadCloser, error), fn func(c batch.Chunk, i int, kind byte, line []byte) error) error {
	var h cursors
	for _, c := range chunks {
		if len(c.Pattern) > 0 {
			h = append(h, &cursor{c: c, runs: c.Runs()})
		}
	}
	heap.Init(&h)
	defer func() {
		for _, k := range h {
			k.close()
		}
	}()
	for len(h) > 0 {
		k := h[0]
		if err := k.open(get); err != nil {
			return err
		}
		i := k.i
		kind, line, err := k.next()
		if err != nil {
			return err
		}
		if err := fn(k.c, i, kind, line); err != nil {
			return err
		}
		if k.i == len(k.c.Pattern) {
			k.close()
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
	}
	return nil
}

// cursor reads a done chunk's lines in its row order, interleaving its
// output and error parts by its pattern.
type cursor struct {
	c         batch.Chunk
	runs      []batch.Span
	i         int // lines read
	span, in  int // where line i's row is: c's span and row in it
	opened    bool
	out, errp *lineReader
}

// row is the input row of the cursor's next line.
func (k *cursor) row() int {
	if k.span >= len(k.runs) {
		return k.runs[len(k.runs)-1].Row + k.runs[len(k.runs)-1].Rows + k.in
	}
	return k.runs[k.span].Row + k.in
}

func (k *cursor) open(get func(key string) (io.ReadCloser, error)) error {
	if k.opened {
		return nil
	}
	k.opened = true
	part := func(kind string, n int64) (*lineReader, error) {
		if n == 0 {
			return &lineReader{}, nil
		}
		rc, err := get(k.c.Parts(kind))
		if err != nil {
			return nil, err
		}
		return &lineReader{rc: rc, r: bufio.NewReaderSize(rc, 64<<10)}, nil
	}
	var err error
	if k.out, err = part("out", k.c.OutBytes); err != nil {
		return err
	}
	k.errp, err = part("err", k.c.ErrBytes)
	return err
}

// next reads the next line and its kind.
func (k *cursor) next() (byte, []byte, error) {
	kind := k.c.Pattern[k.i]
	src := k.out
	if kind == KindErr {
		src = k.errp
	}
	line, err := src.next()
	if err != nil {
		return 0, nil, fmt.Errorf("chunk %d of %s: line %d: %w", k.c.Index, k.c.Batch, k.i, err)
	}
	k.i++
	if k.in++; k.span < len(k.runs) && k.in == k.runs[k.span].Rows {
		k.span, k.in = k.span+1, 0
	}
	return kind, line, nil
}

func (k *cursor) close() {
	if k.out != nil {
		k.out.close()
	}
	if k.errp != nil {
		k.errp.close()
	}
}

// cursors are a heap of cursors by the row of their next line.
type cursors []*cursor

func (h cursors) Len() int           { return len(h) }
func (h cursors) Less(i, j int) bool { return h[i].row() < h[j].row() }
func (h cursors) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cursors) Push(x any)        { *h = append(*h, x.(*cursor)) }
func (h *cursors) Pop() any {
	old := *h
	k := old[len(old)-1]
	*h = old[:len(old)-1]
	return k
}

// lineReader reads a part line by line, reusing its buffer.
type lineReader struct {
	rc   io.ReadCloser
	r    *bufio.Reader
	line []byte
}

// next returns the next line with its newline, valid until the next call.
func (l *lineReader) next() ([]byte, error) {
	if l.r == nil {
		return nil, errors.New("part shorter than its pattern")
	}
	l.line = l.line[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		l.line = append(l.line, frag...)
		switch {
		case err == nil:
			return l.line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, errors.New("part shorter than its pattern")
		default:
			return nil, err
		}
	}
}

func (l *lineReader) close() {
	if l.rc != nil {
		l.rc.Close()
		l.rc = nil
	}
}
