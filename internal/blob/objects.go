package blob

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/relaybatch/relay/internal/batch"
)

// ReadRange reads bytes [start, end) of a file made of objects, with one
// ranged GET per object the range touches: the executor reads a chunk's
// rows with it, internal/batches the rows a retry runs again.
func (s *Store) ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error) {
	out := make([]byte, 0, end-start)
	var off int64
	for _, o := range objs {
		lo, hi := max(start, off), min(end, off+o.Size)
		if lo < hi {
			b, err := s.GetRange(ctx, o.Key, o.ETag, lo-off, hi-off)
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
		}
		off += o.Size
		if off >= end {
			break
		}
	}
	if int64(len(out)) != end-start {
		return nil, fmt.Errorf("read range %d-%d: got %d bytes", start, end, len(out))
	}
	return out, nil
}

// objectSize is the size past which an ObjectWriter starts a new object.
const objectSize = 8 << 20

// Putter writes one object (Store.PutTagged).
type Putter interface {
	PutTagged(ctx context.Context, key string, r io.Reader, size int64, tag string) error
}

// ObjectWriter writes a stream as a file of objects of about 8 MiB (a file
// is the concatenation of its objects, docs/design.md "Data layout"):
// constant memory without multipart uploads. The plan writes a CSV input's
// rows as JSONL with it, and internal/batches the input files it makes.
type ObjectWriter struct {
	ctx    context.Context
	blobs  Putter
	prefix string
	buf    []byte
	objs   []batch.Object
	// Tag is the objects' expiry class (Store.PutTagged), set before the
	// first Write.
	Tag string
}

// NewObjectWriter returns an ObjectWriter of the objects <prefix>000000,
// <prefix>000001, … of blobs (see ObjectWriter for its users).
func NewObjectWriter(ctx context.Context, blobs Putter, prefix string) *ObjectWriter {
	return &ObjectWriter{ctx: ctx, blobs: blobs, prefix: prefix}
}

// Write buffers p, and writes the buffer as the next object once it
// holds objectSize bytes.
func (w *ObjectWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) >= objectSize {
		if err := w.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *ObjectWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	key := fmt.Sprintf("%s%06d", w.prefix, len(w.objs))
	if err := w.blobs.PutTagged(w.ctx, key, bytes.NewReader(w.buf), int64(len(w.buf)), w.Tag); err != nil {
		return err
	}
	w.objs = append(w.objs, batch.Object{Key: key, Size: int64(len(w.buf))})
	w.buf = w.buf[:0]
	return nil
}

// Close writes what is buffered and returns the objects written.
func (w *ObjectWriter) Close() ([]batch.Object, error) {
	return w.objs, w.flush()
}
