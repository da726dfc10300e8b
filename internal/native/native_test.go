package native

import (
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

func TestGroupsSplitWithinLimits(t *testing.T) {
	t.Parallel()
	b := batch.Batch{ID: "batch_x", Tenant: "t"}
	var chunks []batch.Chunk
	for i := range 7 {
		model := "n"
		if i == 3 {
			model = "d" // a direct model's chunk between them
		}
		chunks = append(chunks, batch.Chunk{Index: i, Model: model, Rows: 10, Start: int64(i * 1000), End: int64(i*1000 + 1000)})
	}
	tests := []struct {
		name string
		lim  Limit
		want [][]int
	}{
		{"one group", Limit{Rows: 100, Bytes: 1 << 20}, [][]int{{0, 1, 2, 4, 5, 6}}},
		{"by rows", Limit{Rows: 20, Bytes: 1 << 20}, [][]int{{0, 1}, {2, 4}, {5, 6}}},
		{"by bytes", Limit{Rows: 100, Bytes: 2 * (1000 + 10*rowOverhead)}, [][]int{{0, 1}, {2, 4}, {5, 6}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gs := Groups(b, chunks, map[string]bool{"n": true}, func(string) Limit { return tt.lim })
			if len(gs) != len(tt.want) {
				t.Fatalf("got %d groups %+v, want %d", len(gs), gs, len(tt.want))
			}
			for i, g := range gs {
				if g.Index != i || g.Model != "n" || g.State != batch.GroupPending || g.Rows != 10*len(tt.want[i]) || len(g.Chunks) != len(tt.want[i]) {
					t.Fatalf("group %d: got %+v, want chunks %v", i, g, tt.want[i])
				}
				for j, c := range tt.want[i] {
					if g.Chunks[j] != c {
						t.Fatalf("group %d: got chunks %v, want %v", i, g.Chunks, tt.want[i])
					}
				}
			}
		})
	}
}

func TestCustomIDsMapBackToRows(t *testing.T) {
	t.Parallel()
	tg := tag("batch_x", 3)
	if tg == tag("batch_x", 4) || len(customID(tg, 99999)) > 64 {
		t.Fatalf("tags must differ per group and custom ids fit Anthropic's 64 characters: %s", customID(tg, 99999))
	}
	for _, tt := range []struct {
		id   string
		want int
	}{{customID(tg, 42), 42}, {customID(tag("batch_x", 4), 42), -1}, {tg + "-rx", -1}, {"r42", -1}} {
		if got := rowOf(tg, tt.id); got != tt.want {
			t.Errorf("rowOf(%q) = %d, want %d", tt.id, got, tt.want)
		}
	}
}

func TestPollBacksOff(t *testing.T) {
	t.Parallel()
	s := &Service{PollMin: time.Second, PollMax: 5 * time.Second}
	for n, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := s.pollDelay(n); got != want {
			t.Errorf("poll %d: got %v, want %v", n, got, want)
		}
	}
}

func TestCloseToEndOfWindow(t *testing.T) {
	t.Parallel()
	exp := int64(100_000)
	b := batch.Batch{CreatedAt: exp - 24*3600, ExpiresAt: &exp}
	for _, tt := range []struct {
		at   int64
		want bool
	}{{exp - 3*3600, false}, {exp - 2*3600 + 1, true}} {
		s := &Service{Now: func() time.Time { return time.Unix(tt.at, 0) }}
		if got := s.closeToEnd(b); got != tt.want {
			t.Errorf("%d s before the end: got %v, want %v", exp-tt.at, got, tt.want)
		}
	}
}

// A NoCall chunk of a native model (rows refused unsent) is in no group:
// the engine claims and runs it without capacity.
func TestGroupsLeaveNoCallChunks(t *testing.T) {
	t.Parallel()
	chunks := []batch.Chunk{{Index: 0, Model: "n", Rows: 10}, {Index: 1, Model: "n", Rows: 2, NoCall: true}, {Index: 2, Model: "n", Rows: 10}}
	gs := Groups(batch.Batch{ID: "batch_x"}, chunks, map[string]bool{"n": true}, func(string) Limit { return Limit{Rows: 100, Bytes: 1 << 20} })
	if len(gs) != 1 || len(gs[0].Chunks) != 2 || gs[0].Chunks[0] != 0 || gs[0].Chunks[1] != 2 || gs[0].Rows != 20 {
		t.Fatalf("groups %+v, want one of chunks 0 and 2", gs)
	}
}

// A refused workflow record's chunk (Invalid) of a native model is in no
// group either: the engine's plan claims it alone (plan.Alone) and runs it
// to its invalid_workflow line. Before, Groups left out NoCall chunks only,
// so the group's import took the record's chunk over from the engine's run
// (native.Service.claim), two runs of one chunk at once.
func TestGroupsLeaveInvalidRecordChunks(t *testing.T) {
	t.Parallel()
	chunks := []batch.Chunk{{Index: 0, Model: "n", Rows: 10}, {Index: 1, Model: "n", Rows: 1, Invalid: true}, {Index: 2, Model: "n", Rows: 10}}
	gs := Groups(batch.Batch{ID: "batch_x"}, chunks, map[string]bool{"n": true}, func(string) Limit { return Limit{Rows: 100, Bytes: 1 << 20} })
	if len(gs) != 1 || len(gs[0].Chunks) != 2 || gs[0].Chunks[0] != 0 || gs[0].Chunks[1] != 2 || gs[0].Rows != 20 {
		t.Fatalf("groups %+v, want one of chunks 0 and 2", gs)
	}
}
