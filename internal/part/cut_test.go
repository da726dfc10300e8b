package part

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
)

// TestLinesKeep: rows set out of order, the run stopped with rows 3, 5
// and 7 unanswered; the part it keeps is that of the answered rows alone:
// the lines, the counts, the usage and its events of the others are gone.
func TestLinesKeep(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	b := batch.Batch{ID: "batch_x", Tenant: "t"}
	outs := make([]Outcome, 8)
	for i := range outs {
		outs[i] = Outcome{CustomID: fmt.Sprint("r", i), Result: inference.Result{StatusCode: []int{200, 400}[i%2],
			Body: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Model: []string{"m", "n"}[i%3%2],
			Usage: inference.Usage{InputTokens: int64(i + 1), TotalTokens: int64(i + 1)}}}
	}
	l := NewLines(b, batch.Chunk{Batch: b.ID, FirstRow: 10, Rows: len(outs)}, now)
	for _, i := range []int{1, 0, 4, 2, 6} { // 3, 5 and 7 never answered
		l.Set(i, outs[i])
	}
	answered := l.Answered()
	if want := []bool{true, true, true, false, true, false, true, false}; fmt.Sprint(answered) != fmt.Sprint(want) {
		t.Fatalf("Answered() = %v, want %v", answered, want)
	}
	l.Keep(answered)
	kept := batch.Chunk{Batch: b.ID, Rows: 5, Spans: []batch.Span{{Row: 10, Rows: 3}, {Row: 14, Rows: 1}, {Row: 16, Rows: 1}}}
	objs, cm, err := Commit(kept, l, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	got := readObjects(t, objs)
	want, wantObjs := build(t, b, kept, []Outcome{outs[0], outs[1], outs[2], outs[4], outs[6]}, now)
	if string(got["out"]) != string(wantObjs["out"]) || string(got["err"]) != string(wantObjs["err"]) || string(got["usage"]) != string(wantObjs["usage"]) {
		t.Fatalf("part of the kept lines differs from that of the answered rows alone")
	}
	if cm.Chunk.Pattern != want.Pattern || cm.Completed != want.Completed || cm.Failed != want.Failed || cm.Usage != want.Tokens {
		t.Fatalf("commit %+v, want the counts of %+v", cm, want)
	}
	for m, u := range want.ByModel {
		if cm.UsageByModel[m].Requests != u.Requests || cm.UsageByModel[m].Total != u.Total {
			t.Errorf("usage of %s %+v, want %+v", m, cm.UsageByModel[m], u)
		}
	}
	if len(cm.UsageByModel) != len(want.ByModel) {
		t.Errorf("usage by model %+v, want %+v", cm.UsageByModel, want.ByModel)
	}
}
