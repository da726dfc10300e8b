package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

// Which terminal status a batch ends in, and that the lifecycle lets it
// get there from where it stands.
func TestFinalStatus(t *testing.T) {
	t.Parallel()
	at := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		b    batch.Batch
		want batch.Status
	}{
		{"every row completed", batch.Batch{Status: batch.InProgress, RequestCounts: batch.Counts{Total: 3, Completed: 3}}, batch.Completed},
		{"some rows failed", batch.Batch{Status: batch.InProgress, RequestCounts: batch.Counts{Total: 3, Completed: 1, Failed: 2}}, batch.Completed},
		{"every row failed", batch.Batch{Status: batch.InProgress, RequestCounts: batch.Counts{Total: 3, Failed: 3}}, batch.Completed},
		{"dead-lettered rows", batch.Batch{Status: batch.InProgress, RequestCounts: batch.Counts{Total: 3, Completed: 2, Failed: 1}, DeadLetterCount: 1}, batch.Completed},
		{"window passed after every row ran", batch.Batch{Status: batch.InProgress, ExpiresAt: at(1), RequestCounts: batch.Counts{Total: 2, Completed: 2}}, batch.Completed},
		{"a row got batch_expired", batch.Batch{Status: batch.InProgress, ExpiresAt: at(1), ExpiredRows: 1, RequestCounts: batch.Counts{Total: 2, Completed: 1, Failed: 1}}, batch.Expired},
		{"every row expired", batch.Batch{Status: batch.InProgress, ExpiredRows: 2, RequestCounts: batch.Counts{Total: 2, Failed: 2}}, batch.Expired},
		{"cancelled", batch.Batch{Status: batch.Cancelling, CancellingAt: at(5), CancelledRows: 2, RequestCounts: batch.Counts{Total: 2, Failed: 2}}, batch.Cancelled},
		{"cancelled after every row ran", batch.Batch{Status: batch.Cancelling, CancellingAt: at(5), RequestCounts: batch.Counts{Total: 2, Completed: 2}}, batch.Cancelled},
		{"cancelled and expired", batch.Batch{Status: batch.Cancelling, CancellingAt: at(5), ExpiredRows: 1, CancelledRows: 1}, batch.Cancelled},
		{"already finalizing", batch.Batch{Status: batch.Finalizing, ExpiredRows: 1}, batch.Expired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.b
			if got := finalStatus(&b); got != tt.want {
				t.Fatalf("finalStatus = %s, want %s", got, tt.want)
			}
			// FinalizeBatch moves it to finalizing, then to its status.
			if b.Status != batch.Finalizing {
				if err := b.To(batch.Finalizing, time.Unix(10, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.To(finalStatus(&b), time.Unix(11, 0)); err != nil || !b.Status.Terminal() {
				t.Fatalf("to %s: %v", tt.want, err)
			}
		})
	}
}

// An input that cannot run fails its batch, unless the batch was being
// cancelled: then it ends cancelled.
func TestInvalidInputStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ from, want batch.Status }{
		{batch.Validating, batch.Failed},
		{batch.Cancelling, batch.Cancelled},
	} {
		if got := invalidInputStatus(tt.from); got != tt.want {
			t.Errorf("from %s: %s, want %s", tt.from, got, tt.want)
		}
		b := batch.Batch{Status: tt.from}
		if err := b.To(invalidInputStatus(tt.from), time.Unix(1, 0)); err != nil {
			t.Errorf("from %s: %v", tt.from, err)
		}
	}
}

// The output and error files are made of the parts the chunks committed, in
// chunk order, skipping empty ones; every committed part is kept.
func TestCommittedPartsOf(t *testing.T) {
	t.Parallel()
	done := func(i int, attempt string, out, errb int64) batch.Chunk {
		return batch.Chunk{Tenant: "t", Batch: "batch_x", Index: i, Attempt: attempt, State: batch.ChunkDone, OutBytes: out, ErrBytes: errb}
	}
	chunks := []batch.Chunk{done(0, "a", 10, 0), done(1, "b", 0, 5), done(2, "c", 7, 3)}
	p, err := committedPartsOf("batch_x", chunks)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{chunks[0].Parts("out"), chunks[2].Parts("out")}; !slices.Equal(p.out, want) || p.outBytes != 17 {
		t.Fatalf("output file: %v (%d bytes), want %v (17)", p.out, p.outBytes, want)
	}
	if want := []string{chunks[1].Parts("err"), chunks[2].Parts("err")}; !slices.Equal(p.err, want) || p.errBytes != 8 {
		t.Fatalf("error file: %v (%d bytes), want %v (8)", p.err, p.errBytes, want)
	}
	if len(p.keep) != 9 || !p.keep[chunks[1].Parts("usage")] || p.keep[batch.PartKey("t", "batch_x", 1, "lost", "out")] {
		t.Fatalf("keep: %v", p.keep)
	}
	chunks[1].State = batch.ChunkClaimed
	if _, err := committedPartsOf("batch_x", chunks); err == nil {
		t.Fatal("a chunk not done: want an error")
	}
}
