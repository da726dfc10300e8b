package part

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/provider"
)

// TestLinesCut: rows set out of order, the run stopped with a gap; the
// part of the rows before the first gap is Build's of those rows alone:
// the lines, the counts, the usage and its events of later rows are gone.
func TestLinesCut(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	b := batch.Batch{ID: "batch_x", Tenant: "t"}
	outs := make([]Outcome, 8)
	for i := range outs {
		outs[i] = Outcome{CustomID: fmt.Sprint("r", i), Result: provider.Result{StatusCode: []int{200, 400}[i%2],
			Body: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Model: []string{"m", "n"}[i%3%2],
			Usage: provider.Usage{InputTokens: int64(i + 1), TotalTokens: int64(i + 1)}}}
	}
	l := NewLines(b, 10, len(outs), now)
	for _, i := range []int{1, 0, 4, 2, 6} { // 3 never answered
		l.Set(i, outs[i])
	}
	if got := l.Answered(); got != 3 {
		t.Fatalf("Answered() = %d, want 3", got)
	}
	l.Cut(3)
	objs, cm, err := Commit(batch.Chunk{Batch: b.ID, FirstRow: 10}, l, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	got, want := readObjects(t, objs), Build(b, 10, outs[:3], now)
	if string(got["out"]) != string(want.Out) || string(got["err"]) != string(want.Err) || string(got["usage"]) != string(want.Usage) {
		t.Fatalf("part of the cut lines differs from Build's of rows 0-2")
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
