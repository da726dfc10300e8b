package part

import (
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
