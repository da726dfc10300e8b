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

// afterTakeoverTable is a Store of one chunk whose lease ended, whose
// Takeover takes effect and then fails, as an AWS call that timed out
// after its write.
type afterTakeoverTable struct {
	Store
	c batch.Chunk
}

func (f *afterTakeoverTable) ExpiredLeases(context.Context, time.Time, int) ([]batch.Chunk, error) {
	return []batch.Chunk{f.c}, nil
}

func (f *afterTakeoverTable) Takeover(_ context.Context, c batch.Chunk, run string, _, lease time.Time) (batch.Chunk, error) {
	f.c.Run, f.c.Attempts, f.c.Lease = run, f.c.Attempts+1, lease.UnixMilli()
	return c, errors.New("RequestTimeout: the takeover took effect")
}

func (f *afterTakeoverTable) GetChunk(context.Context, string, int) (batch.Chunk, error) {
	return f.c, nil
}

// TestTakeoverThatTookEffectAlthoughItFailed: a takeover that took effect
// although its call failed still sends the new run's work message. Before,
// the tick only logged the error: the new run had no message, the chunk
// waited a whole lease for the next takeover and spent a second attempt
// (a chunk so sent to the dead-letter path an attempt early).
func TestTakeoverThatTookEffectAlthoughItFailed(t *testing.T) {
	t.Parallel()
	f := &afterTakeoverTable{c: batch.Chunk{Tenant: "t", Batch: "b", Index: 3, State: batch.ChunkClaimed, Run: "old", Attempts: 1}}
	q := &fakeQueue{}
	e := testEngine(&Engine{Store: f, Queue: q, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Unix(1000, 0) }})

	_ = e.takeOver(context.Background(), e.Now())

	if len(q.sent) != 1 || q.sent[0].Type != msg.Chunk || q.sent[0].Run != f.c.Run || q.sent[0].Chunk != 3 {
		t.Fatalf("sent %+v, want chunk 3's message for its new run %s", q.sent, f.c.Run)
	}
}
