package part

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/store"
)

// Commit is the part of chunk c from its rows' lines, once every row is
// set, and the commit that records it: the chunk's pattern and part sizes,
// the rows' counts, and their usage under the UTC day of now. It returns
// the part's objects by kind ("out", "err", "usage"; batch.Chunk.Parts).
func Commit(c batch.Chunk, rows *Lines, deadLetters int64, now time.Time) (map[string]Object, store.Commit, error) {
	objs, p, err := rows.part()
	if err != nil {
		return nil, store.Commit{}, err
	}
	c.Pattern, c.OutBytes, c.ErrBytes = p.Pattern, objs["out"].Size, objs["err"].Size
	cm := store.Commit{Chunk: c, Completed: p.Completed, Failed: p.Failed, Expired: p.Expired, Cancelled: p.Cancelled,
		DeadLetters: deadLetters, Usage: p.Tokens, UsageByModel: map[string]store.UsageAgg{}, Day: now.UTC().Format("2006-01-02")}
	for m, u := range p.ByModel {
		cm.UsageByModel[m] = store.UsageAgg(u)
	}
	return objs, cm, nil
}

// Putter writes one object (internal/blob).
type Putter interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
}

// Write writes a commit's part objects, those with bytes, under its chunk's
// keys (batch.Chunk.Parts) and returns the keys written.
func Write(ctx context.Context, p Putter, cm store.Commit, objs map[string]Object) ([]string, error) {
	var written []string
	for _, kind := range []string{"out", "err", "usage"} {
		if objs[kind].Size == 0 {
			continue
		}
		k := cm.Chunk.Parts(kind)
		if err := p.Put(ctx, k, objs[kind].Body, objs[kind].Size); err != nil {
			return written, fmt.Errorf("write part %s: %w", k, err)
		}
		written = append(written, k)
	}
	return written, nil
}
