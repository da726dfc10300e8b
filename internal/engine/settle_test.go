package engine

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/msg"
)

// A batch whose terminal status was written but whose follow-ups
// (Lifecycle.Terminal: its completion webhook queued, its slots given
// back) failed on every delivery of its finalize message is due to the
// tick, which sends the finalize again; once they are done, it is not.
// Before, a terminal batch was never due: make chaos (seed 88) ended with a
// completed batch whose webhook nothing had queued.
func TestTerminalFollowUpsOutliveTheirMessage(t *testing.T) {
	t.Parallel()
	ended := int64(1000)
	table := newMemTable()
	table.putBatch(batch.Batch{Tenant: "t", ID: "b", Status: batch.Completed, Started: true, ChunksTotal: 1, ChunksDone: 1, CompletedAt: &ended})
	var terminal []string
	fail := errors.New("webhook queue throttled")
	life := lifecycleFunc(func(_ context.Context, b batch.Batch) error {
		terminal = append(terminal, b.ID)
		return fail
	})
	models, err := config.ParseModels([]byte("models:\n  - {name: a, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	q := &fakeQueue{}
	now := time.Unix(ended, 0)
	e := testEngine(&Engine{Store: table, Queue: q, Lifecycle: life, Models: models, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	ctx := context.Background()

	if err := e.FinalizeBatch(ctx, "t", "b"); !errors.Is(err, fail) {
		t.Fatalf("finalize of a terminal batch whose follow-ups fail: %v, want %v", err, fail)
	}
	now = now.Add(batch.Grace) // every delivery of its message failed or was lost
	if err := e.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if want := (msg.Message{Type: msg.Finalize, Tenant: "t", Batch: "b"}); len(q.sent) != 1 || q.sent[0] != want {
		t.Fatalf("tick sent %+v, want %+v", q.sent, want)
	}
	fail = nil
	if err := e.FinalizeBatch(ctx, "t", "b"); err != nil {
		t.Fatal(err)
	}
	if !table.batch("b").Settled {
		t.Fatal("follow-ups done, not recorded")
	}
	now = now.Add(time.Hour)
	if err := e.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if len(q.sent) != 1 || len(terminal) != 2 {
		t.Fatalf("after the follow-ups: %d finalizes sent, follow-ups run %d times; want 1 and 2", len(q.sent), len(terminal))
	}
}
