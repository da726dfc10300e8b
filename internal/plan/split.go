package plan

import (
	"bytes"
	"fmt"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
)

// RowSpans are c's rows one by one, each its own span, found in data (c's
// bytes from c.Start to c.End, as ReadChunk reads them): what Split needs
// to cut a chunk between any two of its rows. A range that does not hold
// the planned rows is a BadRange error.
func RowSpans(c batch.Chunk, data []byte) ([]batch.Span, error) {
	if len(c.Spans) > 0 && int64(len(data)) != c.End-c.Start {
		return nil, BadRange{fmt.Errorf("chunk %d of %s: %d bytes read of its %d", c.Index, c.Batch, len(data), c.End-c.Start)}
	}
	rows := make([]batch.Span, 0, c.Rows)
	for _, s := range c.Runs() {
		b, off := data, c.Start
		if len(c.Spans) > 0 {
			b, off = data[s.Start-c.Start:s.End-c.Start], s.Start
		}
		row := s.Row
		for _, line := range bytes.SplitAfter(b, []byte("\n")) {
			reqs, err := jsonl.ParseRequests(line)
			if err != nil {
				return nil, BadRange{fmt.Errorf("chunk %d of %s: row %d: %w", c.Index, c.Batch, row, err)}
			}
			if len(reqs) == 1 { // else a blank line
				rows = append(rows, batch.Span{Start: off, End: off + int64(len(line)), Row: row, Rows: 1})
				row++
			}
			off += int64(len(line))
		}
		if row != s.Row+s.Rows {
			return nil, BadRange{fmt.Errorf("chunk %d of %s: %d rows in the range of rows from %d, %d planned", c.Index, c.Batch, row-s.Row, s.Row, s.Rows)}
		}
	}
	return rows, nil
}

// Split cuts chunk c, whose rows are rows (RowSpans), by answered (a flag
// per row): done is c with only its answered rows, to commit; rest holds
// the others as a pending chunk of their own, of c's model and kind (a
// fallback chunk's rest runs on the fallback too), to run later (its Index
// and NextSame are the caller's to set). Either has 0 rows when no row is
// on its side.
func Split(c batch.Chunk, rows []batch.Span, answered []bool) (done, rest batch.Chunk) {
	var doneRows, restRows []batch.Span
	for i, r := range rows {
		if answered[i] {
			doneRows = append(doneRows, r)
		} else {
			restRows = append(restRows, r)
		}
	}
	done = withRows(c, doneRows)
	rest = withRows(batch.Chunk{Batch: c.Batch, Tenant: c.Tenant, Model: c.Model, Fallback: c.Fallback, PriorAttempts: c.PriorAttempts, MostCost: c.MostCost, State: batch.ChunkPending, NextSame: -1}, restRows)
	return done, rest
}

// withRows is c holding rows, in row order: its range from the first to
// the last, adjacent rows merged into one span, no spans when one is
// enough.
func withRows(c batch.Chunk, rows []batch.Span) batch.Chunk {
	c.Spans, c.Rows, c.Start, c.End, c.FirstRow = nil, 0, 0, 0, 0
	if len(rows) == 0 {
		return c
	}
	var spans []batch.Span
	for _, r := range rows {
		c.Rows += r.Rows
		if n := len(spans); n > 0 && spans[n-1].Row+spans[n-1].Rows == r.Row {
			spans[n-1].Rows += r.Rows
			spans[n-1].End = r.End
			continue
		}
		spans = append(spans, r)
	}
	c.Start, c.End, c.FirstRow = spans[0].Start, spans[len(spans)-1].End, spans[0].Row
	if len(spans) > 1 {
		c.Spans = spans
	}
	return c
}
