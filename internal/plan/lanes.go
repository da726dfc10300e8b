package plan

import "github.com/relaybatch/relay/internal/batch"

// tail is a lane's last chunks, as many as its last round may hold (its
// lanes less one), with their rows, and how many chunks the lane opened.
type tail struct {
	model  string
	opened int
	chunks []int       // indices in Chunker.Chunks, in order
	rows   [][]keptRow // each chunk's rows
}

// keptRow is a row of a chunk of a tail: its bytes and its most cost.
type keptRow struct {
	span batch.Span
	cost float64
}

// keep notes row (its span, cost) of chunk i of lane, for spread: only
// while Lanes is set, for a model of more than one lane, and for chunks
// that take a model's capacity (not a workflow record's, nor NoCall's).
func (k *Chunker) keep(lane string, i int, row batch.Span, cost float64) {
	c := k.Chunks[i]
	if k.Lanes == nil || lane == "" || c.NoCall {
		return
	}
	lanes, _ := k.Lanes(c.Model)
	if lanes <= 1 {
		return
	}
	if k.tails == nil {
		k.tails = map[string]*tail{}
	}
	t := k.tails[lane]
	if t == nil {
		t = &tail{model: c.Model}
		k.tails[lane] = t
	}
	if n := len(t.chunks); n == 0 || t.chunks[n-1] != i {
		t.opened++
		if n == lanes-1 {
			t.rows[0] = nil
			t.chunks, t.rows = t.chunks[1:], t.rows[1:]
		}
		t.chunks, t.rows = append(t.chunks, i), append(t.rows, nil)
	}
	last := len(t.rows) - 1
	t.rows[last] = append(t.rows[last], keptRow{row, cost})
}

// spread cuts each lane's last round anew over the model's lanes: the
// chunks its count leaves over a multiple of its lanes would run on that
// many claims while the model's other claims idle (docs/design.md
// "Chunks"). Their rows become as many chunks as the model has lanes,
// each of at least a claim's slots of rows (a round), of equal rows, and
// within MaxBytes; they take the place of the first of the chunks they
// replace, and every chunk is numbered again in order.
func (k *Chunker) spread() {
	cut := map[int][]batch.Chunk{} // the first chunk of a last round → its rows cut anew
	gone := map[int]bool{}         // the chunks of a last round
	for _, t := range k.tails {
		lanes, slots := k.Lanes(t.model)
		round := t.opened % lanes
		if round == 0 {
			continue
		}
		from := len(t.chunks) - round
		var rows []keptRow
		for _, r := range t.rows[from:] {
			rows = append(rows, r...)
		}
		pieces := min(lanes, (len(rows)+slots-1)/slots)
		if pieces <= round {
			continue
		}
		for _, i := range t.chunks[from:] {
			gone[i] = true
		}
		first := t.chunks[from]
		cut[first] = k.cut(k.Chunks[first], rows, (len(rows)+pieces-1)/pieces)
	}
	if len(cut) == 0 {
		return
	}
	var chunks []batch.Chunk
	for i, c := range k.Chunks {
		if pieces, ok := cut[i]; ok {
			chunks = append(chunks, pieces...)
		} else if !gone[i] {
			chunks = append(chunks, c)
		}
	}
	for i := range chunks {
		chunks[i].Index = i
	}
	k.Chunks, k.open, k.tails = chunks, nil, nil
}

// cut is rows as chunks like c of at most size rows each, closing one
// before its bytes from its first row to its last would pass MaxBytes.
func (k *Chunker) cut(c batch.Chunk, rows []keptRow, size int) []batch.Chunk {
	var chunks []batch.Chunk
	for len(rows) > 0 {
		n := 1
		for n < min(size, len(rows)) && rows[n].span.End-rows[0].span.Start <= k.MaxBytes {
			n++
		}
		spans := make([]batch.Span, n)
		var cost float64
		for j, r := range rows[:n] {
			spans[j], cost = r.span, cost+r.cost
		}
		piece := withRows(c, spans)
		piece.MostCost = cost
		chunks = append(chunks, piece)
		rows = rows[n:]
	}
	return chunks
}
