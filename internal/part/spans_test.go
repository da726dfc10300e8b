package part

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
)

// spread is a chunk whose five rows sit apart in the input (other models'
// rows between them): input rows 0, 1, 5, 9 and 10.
var spread = batch.Chunk{Batch: "batch_x", Tenant: "t", Index: 2, Start: 0, End: 1100, FirstRow: 0, Rows: 5, Spans: []batch.Span{
	{Start: 0, End: 200, Row: 0, Rows: 2}, {Start: 500, End: 600, Row: 5, Rows: 1}, {Start: 900, End: 1100, Row: 9, Rows: 2}}}

var spreadRows = []int{0, 1, 5, 9, 10}

// lineRows parses a part's lines and returns each line's row, found by its
// id among the batch's rows, and its custom id.
func lineRows(t *testing.T, data []byte) (rows []int, ids []string) {
	t.Helper()
	for _, raw := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var l Line
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("line %s: %v", raw, err)
		}
		row := -1
		for r := range 20 {
			if LineID("batch_x", r) == l.ID {
				row = r
			}
		}
		rows, ids = append(rows, row), append(ids, l.CustomID)
	}
	return rows, ids
}

// The lines of a chunk whose rows are not contiguous carry their input
// rows' ids (c.Row), output and error lines alike, in row order.
func TestLinesOfSpreadRows(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	b := batch.Batch{ID: "batch_x", Tenant: "t"}
	var outs []Outcome
	for i, row := range spreadRows {
		o := Outcome{CustomID: fmt.Sprintf("request-%d", row), Code: CodeExpired, Message: "late"}
		if i%2 == 0 {
			o = Outcome{CustomID: fmt.Sprintf("request-%d", row), Result: inference.Result{StatusCode: 200, Body: json.RawMessage(`{}`), Model: "m"}}
		}
		outs = append(outs, o)
	}
	objs, cm, err := Commit(spread, LinesOf(b, spread, outs, now), 0, now)
	if err != nil {
		t.Fatal(err)
	}
	got := readObjects(t, objs)
	outRows, outIDs := lineRows(t, got["out"])
	errRows, errIDs := lineRows(t, got["err"])
	if !slices.Equal(outRows, []int{0, 5, 10}) || !slices.Equal(outIDs, []string{"request-0", "request-5", "request-10"}) ||
		!slices.Equal(errRows, []int{1, 9}) || !slices.Equal(errIDs, []string{"request-1", "request-9"}) || cm.Chunk.Pattern != "oeoeo" {
		t.Fatalf("output rows %v %v, error rows %v %v, pattern %q", outRows, outIDs, errRows, errIDs, cm.Chunk.Pattern)
	}
}

// Dead letters (read from the rows' generations) and input_file_changed
// lines of such a chunk name its rows by their input row index; a dead
// row's generation is of its chunk's model, a fallback chunk's rows count
// the attempts made on their own model.
func TestDeadLettersOfSpreadRows(t *testing.T) {
	t.Parallel()
	c := spread
	c.Model, c.Fallback, c.PriorAttempts = "m", true, 4
	outs := make([]Outcome, c.Rows)
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		outs[i] = Outcome{CustomID: id, Code: CodeDeadLetter, Message: DeadLetterMessage, Result: inference.Result{Attempts: 3}}
	}
	outs[4] = Outcome{CustomID: "e", Result: inference.Result{StatusCode: 500, Body: json.RawMessage(`{}`), Model: "m", Fallback: true, Attempts: 2}}
	objs, _, err := Commit(c, LinesOf(batch.Batch{ID: "batch_x"}, c, outs, time.Unix(1_800_000_000, 0)), 4, time.Unix(1_800_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	var dls []DeadLetter
	var rows []int
	for line := range bytes.Lines(readObjects(t, objs)["usage"]) {
		var ev UsageEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatal(err)
		}
		dls, rows = append(dls, ev.DeadLetter()), append(rows, ev.Row)
	}
	if !slices.Equal(rows, spreadRows) || dls[2] != (DeadLetter{CustomID: "c", Row: 5, Reason: CodeDeadLetter, Error: DeadLetterMessage, Attempts: 7, Model: "m"}) {
		t.Fatalf("dead letters %+v, want rows %v, the third c's of model m, 4+3 attempts", dls, spreadRows)
	}
	if d := dls[4]; d.Reason != CodeUpstream || d.LastStatus == nil || *d.LastStatus != 500 || d.Attempts != 6 || !d.Fallback {
		t.Fatalf("an upstream 500 on the fallback: %+v, want upstream_error, last status 500, 4+2 attempts", d)
	}
	now := time.Unix(1_800_000_000, 0)
	objs, _, err = Commit(spread, InputChanged(batch.Batch{ID: "batch_x"}, spread, now), 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := lineRows(t, readObjects(t, objs)["err"]); !slices.Equal(got, spreadRows) {
		t.Fatalf("input_file_changed lines of rows %v, want %v", got, spreadRows)
	}
}

func TestChunkRow(t *testing.T) {
	t.Parallel()
	for i, want := range spreadRows {
		if got := spread.Row(i); got != want {
			t.Errorf("Row(%d) = %d, want %d", i, got, want)
		}
	}
	plain := batch.Chunk{FirstRow: 40, Rows: 3, Start: 10, End: 40}
	if plain.Row(2) != 42 || len(plain.Runs()) != 1 || plain.Runs()[0] != (batch.Span{Start: 10, End: 40, Row: 40, Rows: 3}) || plain.Bytes() != 30 {
		t.Fatalf("a chunk without spans: Row(2) %d, runs %+v, bytes %d", plain.Row(2), plain.Runs(), plain.Bytes())
	}
	if spread.Bytes() != 500 {
		t.Fatalf("spread bytes %d, want 500", spread.Bytes())
	}
}
