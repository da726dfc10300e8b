package part

import (
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/store"
)

// Commit builds chunk c's part from its rows' outcomes and the commit
// that records it: the chunk's pattern and part sizes, the rows' counts, and
// their usage under the UTC day of now. It returns the part's objects by
// kind ("out", "err", "usage"; batch.Chunk.Parts).
func Commit(b batch.Batch, c batch.Chunk, outs []Outcome, deadLetters int64, now time.Time) (map[string][]byte, store.Commit) {
	p := Build(b, c.FirstRow, outs, now)
	c.Pattern, c.OutBytes, c.ErrBytes = p.Pattern, int64(len(p.Out)), int64(len(p.Err))
	cm := store.Commit{Chunk: c, Completed: p.Completed, Failed: p.Failed, Expired: p.Expired, Cancelled: p.Cancelled,
		DeadLetters: deadLetters, Usage: p.Tokens, UsageByModel: map[string]store.UsageAgg{}, Day: now.UTC().Format("2006-01-02")}
	for m, u := range p.ByModel {
		cm.UsageByModel[m] = store.UsageAgg(u)
	}
	return map[string][]byte{"out": p.Out, "err": p.Err, "usage": p.Usage}, cm
}
