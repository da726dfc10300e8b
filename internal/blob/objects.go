package blob

import (
	"bytes"
	"context"
	"fmt"

	"github.com/relaybatch/relay/internal/batch"
)

// ReadRange reads bytes [start, end) of a file made of objects, with one
// ranged GET per object the range touches: the executor reads a chunk's
// rows with it, internal/batches the rows a retry runs again.
func (s *Store) ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error) {
	// Room for every byte and the slack bytes.Buffer.ReadFrom asks for:
	// the objects' bytes are read into it as they come, never copied.
	out := make([]byte, 0, max(0, end-start)+bytes.MinRead)
	var off int64
	for _, o := range objs {
		lo, hi := max(start, off), min(end, off+o.Size)
		if lo < hi {
			var err error
			if out, err = s.GetRange(ctx, out, o.Key, o.ETag, lo-off, hi-off); err != nil {
				return nil, err
			}
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
