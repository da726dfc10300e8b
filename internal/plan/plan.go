// Package plan cuts a batch's input into chunks (docs/design.md "Chunks"):
// byte ranges of its valid rows, all of one model, and the ready entries
// that start them. It is pure: internal/engine's Plan reads the input from
// S3, writes a CSV input's JSONL rewrite, and records what it returns.
package plan

import (
	"io"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/workflow"
)

// Chunker splits a batch's valid input rows into chunks of one model
// each, wherever the model's rows sit in the input (docs/design.md
// "Chunks"): it keeps one open chunk per model and adds each row to its
// model's, as a new span when the row does not follow the chunk's last. A
// chunk closes at MaxRows(model) rows (NoCallRows for rows NoCall refuses),
// and before its bytes from its first
// row to its last would pass MaxBytes, so reading it stays one ranged GET
// of bounded size (a row longer than that gets a chunk of its own). A
// workflow record (docs/api.md "Workflow records") gets a chunk of its
// own: it runs for many steps and commits when it ends, which must hold up
// no other row. A row NoCall says is refused without an upstream call goes
// to a chunk of such rows of its model (batch.Chunk.NoCall), apart from
// the model's others. Chunks are numbered in the order they open; once
// the input is read, a model's last round is cut over its lanes (Lanes,
// spread) and every chunk numbered again in order.
type Chunker struct {
	Batch, Tenant string
	// MaxRows is the row limit of a chunk of a model (Limits.RowsFor).
	MaxRows func(model string) int
	// NoCallRows, if set, is the row limit of a chunk of rows NoCall
	// refuses (Limits.Rows): they take no slot, so no model's capacity
	// sizes their chunks.
	NoCallRows int
	MaxBytes   int64
	// NoCall, if set, says whether a row is refused without an upstream
	// call (Models.NoCall).
	NoCall func(r jsonl.Row) bool
	// ValidRecord reports whether a workflow record's row passes its
	// checks (workflow.CheckRow); nil passes every one. A record that does
	// not gets a chunk marked Invalid, outside its model's chain.
	ValidRecord func(row []byte) bool
	// Cost, if set, is the most a row may cost (a batch with a max_cost):
	// each chunk's MostCost sums its rows'.
	Cost func(r jsonl.Row) float64
	// Lanes, if set, is how many chunks of a model run at once and the
	// slots each holds (Limits.LanesFor): the chunks of a model's last
	// round are cut anew over all its lanes once the input is read
	// (spread).
	Lanes func(model string) (lanes, slots int)
	// Chunks are the chunks so far, numbered from 0.
	Chunks []batch.Chunk
	open   map[string]int   // lane (laneOf) → its open chunk
	tails  map[string]*tail // lane → its last chunks, while Lanes is set
}

// add puts row r, at bytes [start, end) of the file the chunks are ranges
// of, in its lane's open chunk or in a new one.
func (k *Chunker) add(r jsonl.Row, start, end int64) {
	var cost float64
	if k.Cost != nil {
		cost = k.Cost(r)
	}
	i, lane := k.place(r, start, end)
	k.Chunks[i].MostCost += cost
	k.keep(lane, i, batch.Span{Start: start, End: end, Row: r.Index, Rows: 1}, cost)
}

// place puts row r in its lane's open chunk or in a new one, and returns
// the chunk's index and its lane ("" for a workflow record's chunk, which
// is no lane's).
func (k *Chunker) place(r jsonl.Row, start, end int64) (int, string) {
	if workflow.InRow(r.JSON) {
		i := k.openChunk(r, start, end, false)
		k.Chunks[i].Invalid = k.ValidRecord != nil && !k.ValidRecord(r.JSON)
		return i, ""
	}
	noCall := k.NoCall != nil && k.NoCall(r)
	lane := laneOf(r.Model, noCall)
	i, ok := k.open[lane]
	if ok && k.Chunks[i].Rows < k.rowLimit(r.Model, noCall) && end-k.Chunks[i].Start <= k.MaxBytes {
		addRow(&k.Chunks[i], r.Index, start, end)
		return i, lane
	}
	if k.open == nil {
		k.open = map[string]int{}
	}
	k.open[lane] = k.openChunk(r, start, end, noCall)
	return k.open[lane], lane
}

// rowLimit is the row limit of a chunk of model's rows, those NoCall
// refuses if noCall.
func (k *Chunker) rowLimit(model string, noCall bool) int {
	if noCall && k.NoCallRows > 0 {
		return k.NoCallRows
	}
	return k.MaxRows(model)
}

// laneOf keys the chunks a model's ready entry steps through (the model)
// apart from its rows settled without a call, which no entry steps to.
func laneOf(model string, noCall bool) string {
	if noCall {
		return "\x00" + model
	}
	return model
}

// openChunk appends a chunk of row r alone and returns its index.
func (k *Chunker) openChunk(r jsonl.Row, start, end int64, noCall bool) int {
	n := len(k.Chunks)
	k.Chunks = append(k.Chunks, batch.Chunk{Batch: k.Batch, Tenant: k.Tenant, Index: n, Start: start, End: end,
		FirstRow: r.Index, Rows: 1, Model: r.Model, State: batch.ChunkPending, NoCall: noCall})
	return n
}

// addRow adds row, at bytes [start, end) after c's last row, to c: to its
// last span when it is the row after that span's, else as a new span.
func addRow(c *batch.Chunk, row int, start, end int64) {
	if len(c.Spans) == 0 && row == c.FirstRow+c.Rows {
		c.Rows++
		c.End = end
		return
	}
	if len(c.Spans) == 0 {
		c.Spans = c.Runs()
	}
	last := &c.Spans[len(c.Spans)-1]
	if row == last.Row+last.Rows {
		last.Rows++
		last.End = end
	} else {
		c.Spans = append(c.Spans, batch.Span{Start: start, End: end, Row: row, Rows: 1})
	}
	c.Rows++
	c.End = end
}

// SplitInput scans an input file (jsonl.Scan with opts) and adds each
// valid row to k. With norm nil the chunks are byte ranges of the input
// (JSONL); otherwise (CSV, simple rows) each row is written to norm as a
// normalized JSONL line and the chunks are byte ranges of what norm received.
func SplitInput(input io.Reader, opts jsonl.Options, k *Chunker, norm io.Writer) (jsonl.Result, error) {
	var normOff int64
	res, err := jsonl.Scan(input, opts, func(r jsonl.Row) error {
		if norm == nil {
			k.add(r, r.Start, r.End)
			return nil
		}
		line := append(r.JSON, '\n')
		if _, err := norm.Write(line); err != nil {
			return err
		}
		k.add(r, normOff, normOff+int64(len(line)))
		normOff += int64(len(line))
		return nil
	})
	if err == nil {
		k.spread()
	}
	return res, err
}

// LinkChunks sets each chunk's NextSame (the batch's next chunk of the
// same model) and returns the batch's ready entries, one per model, each
// at the model's first chunk. A chunk that runs alone (NoCall, Invalid) is
// in no chain: the engine claims it without capacity (Alone).
func LinkChunks(chunks []batch.Chunk, priority int) []sched.Ready {
	last := map[string]int{}
	for i := len(chunks) - 1; i >= 0; i-- {
		c := &chunks[i]
		c.NextSame = -1
		if c.RunsAlone() {
			continue
		}
		if j, ok := last[c.Model]; ok {
			c.NextSame = j
		}
		last[c.Model] = i
	}
	return ReadyEntries(chunks, priority)
}

// ReadyEntries are a batch's ready entries, one per model with a chunk
// left to claim, each at the model's first chunk not taken by a claim
// (docs/design.md "Scheduling"): a plan that runs again after claims
// took some of its chunks must not point an entry at one of them, or a
// commit of that chunk would pick its own chunk as its continuation.
//
// A chunk that runs alone (Chunk.RunsAlone) has no entry, but makes its
// batch's entries step by NextSame (Mixed), as a second model does: an
// entry's next chunk is then read from its chunk's NextSame, never taken
// to be the chunk after.
func ReadyEntries(chunks []batch.Chunk, priority int) []sched.Ready {
	models := map[string]bool{}
	alone := false
	for _, c := range chunks {
		if c.RunsAlone() {
			alone = true
			continue
		}
		models[c.Model] = true
	}
	var entries []sched.Ready
	for _, c := range chunks {
		taken := c.State == batch.ChunkClaimed || c.State == batch.ChunkDone
		if taken || c.RunsAlone() || !models[c.Model] {
			continue
		}
		models[c.Model] = false // the model's first chunk not taken
		entries = append(entries, sched.Ready{Model: c.Model, Tenant: c.Tenant, Batch: c.Batch, Priority: priority,
			Next: c.Index, Total: len(chunks), Mixed: len(models) > 1 || alone})
	}
	return entries
}

// Alone are the chunks of chunks that run alone, holding no capacity, as
// soon as the plan is recorded: those still pending of RunsAlone.
func Alone(chunks []batch.Chunk) []batch.Chunk {
	var alone []batch.Chunk
	for _, c := range chunks {
		if c.RunsAlone() && c.State == batch.ChunkPending {
			alone = append(alone, c)
		}
	}
	return alone
}
