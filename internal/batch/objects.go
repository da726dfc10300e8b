package batch

import (
	"bytes"
	"context"
	"fmt"
	"io"
)

// objectSize is the size past which an ObjectWriter starts a new object.
const objectSize = 8 << 20

// Putter writes one object (internal/blob's Store.PutTagged).
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
	objs   []Object
	// Tag is the objects' expiry class (Putter.PutTagged), set before the
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
	w.objs = append(w.objs, Object{Key: key, Size: int64(len(w.buf))})
	w.buf = w.buf[:0]
	return nil
}

// Close writes what is buffered and returns the objects written.
func (w *ObjectWriter) Close() ([]Object, error) {
	return w.objs, w.flush()
}
