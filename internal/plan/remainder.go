package plan

import (
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
)

// Remainder splits chunk c, whose run answered its first answered rows
// before it stopped for want of time or lease, into what the run commits
// (those rows) and the rest: a new pending chunk numbered index, of the
// rows that follow (docs/design.md "Scheduling", split). data is c's
// bytes of the input. Chunks stay contiguous: rows answered after the
// first unanswered one run again.
func Remainder(c batch.Chunk, data []byte, answered, index int) (done, rest batch.Chunk) {
	at := c.Start + int64(jsonl.RowOffset(data, answered))
	done = c
	done.End, done.Rows = at, answered
	rest = batch.Chunk{Batch: c.Batch, Tenant: c.Tenant, Index: index, Start: at, End: c.End,
		FirstRow: c.FirstRow + answered, Rows: c.Rows - answered, Model: c.Model, State: batch.ChunkPending, NextSame: -1}
	return done, rest
}
