package engine

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/provider"
)

func TestBuildPart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b := batch.Batch{ID: "batch_x", Tenant: "t", KeyID: "k"}
	c := batch.Chunk{Batch: "batch_x", Tenant: "t", Index: 3, FirstRow: 30, Slots: 8}
	ok := func(id string, tokens int64) outcome {
		return outcome{customID: id, res: provider.Result{StatusCode: 200, Body: json.RawMessage(`{"ok":true}`), Model: "m",
			Usage: provider.Usage{InputTokens: tokens, OutputTokens: 1, TotalTokens: tokens + 1}}}
	}
	outs := []outcome{
		ok("a", 10),
		{customID: "b", res: provider.Result{StatusCode: 400, Body: json.RawMessage(`{"error":{}}`), Model: "m"}},
		{customID: "c", code: CodeExpired, message: "late", expired: true},
		{customID: "f", code: CodeExpired, message: "a callback's own code"},
		{customID: "g", code: CodeCancelled, message: "cancelled", cancelled: true},
		{customID: "d", res: provider.Result{ErrCode: "request_timeout", ErrMessage: "slow"}},
		ok("e", 5),
	}
	parts, cm := buildPart(b, c, outs, 0, now)
	if cm.Chunk.Pattern != "oeeeeeo" || cm.Completed != 2 || cm.Failed != 5 || cm.Expired != 1 || cm.Cancelled != 1 {
		t.Fatalf("pattern %q completed %d failed %d expired %d cancelled %d", cm.Chunk.Pattern, cm.Completed, cm.Failed, cm.Expired, cm.Cancelled)
	}
	if cm.Usage.InputTokens != 15 || cm.UsageByModel["m"].Requests != 3 || cm.Day != "2026-12-01" {
		t.Fatalf("usage %+v by model %+v day %s", cm.Usage, cm.UsageByModel, cm.Day)
	}
	if int64(len(parts["out"])) != cm.Chunk.OutBytes || int64(len(parts["err"])) != cm.Chunk.ErrBytes {
		t.Fatalf("recorded sizes differ from the parts")
	}
	lines := bytes.Split(bytes.TrimSpace(parts["err"]), []byte("\n"))
	if len(lines) != 5 {
		t.Fatalf("error lines: got %d", len(lines))
	}
	var l Line
	json.Unmarshal(lines[0], &l)
	if l.CustomID != "b" || l.Response == nil || l.Response.StatusCode != 400 || l.Error != nil || l.ID != lineID("batch_x", 31) {
		t.Fatalf("an upstream 400 keeps its response: got %+v", l)
	}
	json.Unmarshal(lines[4], &l)
	if l.CustomID != "d" || l.Response != nil || l.Error == nil || l.Error.Code != "request_timeout" {
		t.Fatalf("a row without an answer gets an error: got %+v", l)
	}
	if n := bytes.Count(parts["usage"], []byte("\n")); n != 3 {
		t.Fatalf("usage events: got %d, want one per row with an upstream answer", n)
	}
}

func TestDue(t *testing.T) {
	t.Parallel()
	at := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		b    batch.Batch
		want int64
		ok   bool
	}{
		{"terminal", batch.Batch{Status: batch.Completed}, 0, false},
		{"template", batch.Batch{Status: batch.Scheduled}, 0, false},
		{"planning", batch.Batch{Status: batch.Validating, CreatedAt: 100}, 120, true},
		{"plan lease later", batch.Batch{Status: batch.Validating, CreatedAt: 100, PlanLease: 500}, 500, true},
		{"planning past its window", batch.Batch{Status: batch.Validating, CreatedAt: 100, PlanLease: 500, ExpiresAt: at(300)}, 300, true},
		{"planned, not started", batch.Batch{Status: batch.InProgress, CreatedAt: 100, ChunksTotal: 3, ExpiresAt: at(9000)}, 120, true},
		{"running: its window", batch.Batch{Status: batch.InProgress, ChunksTotal: 3, ChunksDone: 1, Started: true, ExpiresAt: at(9000)}, 9000, true},
		{"cancelling: the drain", batch.Batch{Status: batch.Cancelling, ChunksTotal: 3, Started: true, CancellingAt: at(400), ExpiresAt: at(9000)}, 420, true},
		{"every chunk done: the finalize", batch.Batch{Status: batch.InProgress, ChunksTotal: 3, ChunksDone: 3, Started: true, FinalizeDue: 700, ExpiresAt: at(9000)}, 700, true},
		{"rechecked later", batch.Batch{Status: batch.InProgress, ChunksTotal: 3, Started: true, ExpiresAt: at(9000), Recheck: 9100}, 9100, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tt.b.Due()
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Due() = %d, %v; want %d, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestBuildPartBodyNotJSON(t *testing.T) {
	t.Parallel()
	outs := []outcome{{customID: "x", res: provider.Result{StatusCode: 200, Body: json.RawMessage(`{"cut`), Model: "m"}}}
	parts, cm := buildPart(batch.Batch{ID: "batch_x"}, batch.Chunk{}, outs, 0, time.Now())
	var l Line
	if err := json.Unmarshal(bytes.TrimSpace(parts["err"]), &l); err != nil || l.Error == nil || l.Error.Code != "invalid_upstream_response" {
		t.Fatalf("error part %q: %v", parts["err"], err)
	}
	if cm.Failed != 1 || cm.Completed != 0 || len(parts["out"]) != 0 || cm.Chunk.Pattern != "e" {
		t.Fatalf("counts %+v pattern %q out %q", cm, cm.Chunk.Pattern, parts["out"])
	}
}
