package engine

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
)

// afterTakeoverTable is a memTable whose Takeover takes effect and then
// fails, as an AWS call that timed out after its write.
type afterTakeoverTable struct{ *memTable }

func (f *afterTakeoverTable) Takeover(ctx context.Context, c batch.Chunk, run string, now, lease time.Time) (batch.Chunk, error) {
	if _, err := f.memTable.Takeover(ctx, c, run, now, lease); err != nil {
		return c, err
	}
	return c, errors.New("RequestTimeout: the takeover took effect")
}

// TestTakeoverThatTookEffectAlthoughItFailed: a takeover that took effect
// although its call failed still sends the new run's work message. Before,
// the tick only logged the error: the new run had no message, the chunk
// waited a whole lease for the next takeover and spent a second attempt
// (a chunk so sent to the dead-letter path an attempt early).
func TestTakeoverThatTookEffectAlthoughItFailed(t *testing.T) {
	t.Parallel()
	f := &afterTakeoverTable{memTable: newMemTable()}
	// A chunk whose lease ended.
	f.putChunk(batch.Chunk{Tenant: "t", Batch: "b", Index: 3, State: batch.ChunkClaimed, Run: "old", Attempts: 1, Lease: 900_000})
	q := &fakeQueue{}
	e := testEngine(&Engine{Store: f, Queue: q, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Unix(1000, 0) }})

	_ = e.takeOver(context.Background(), e.Now())

	if c := f.chunk("b", 3); c.Run == "old" || len(q.sent) != 1 || q.sent[0].Type != msg.Chunk || q.sent[0].Run != c.Run || q.sent[0].Chunk != 3 {
		t.Fatalf("sent %+v, want chunk 3's message for its new run %s", q.sent, c.Run)
	}
}
