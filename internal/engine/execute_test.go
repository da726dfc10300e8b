package engine

import (
	"testing"

	"github.com/relaybatch/relay/internal/batch"
)

func TestDue(t *testing.T) {
	t.Parallel()
	at := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		b    batch.Batch
		want int64
		ok   bool
	}{
		{"terminal", batch.Batch{Status: batch.Completed, Settled: true}, 0, false},
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
