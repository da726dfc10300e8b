package engine

import (
	"context"
	"log/slog"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/store"
)

// A chunk that takes slots again (a native import's rescue rows, a
// workflow record that resumes) tries every capacity shard of its model,
// not only the one it claimed from: with shard 0 held by continuations it
// would otherwise starve while others have room.
func TestTakeSlotsTriesEveryShard(t *testing.T) {
	t.Parallel()
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 3000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := newMemTable()
	f.setInflight("m", 1000, 1000, 990)
	for _, i := range []int{3, 4} {
		f.putChunk(batch.Chunk{Batch: "b", Index: i, Model: "m", State: batch.ChunkClaimed, Run: "r"})
	}
	e := testEngine(&Engine{Store: f, Models: models, Log: slog.New(slog.DiscardHandler)})
	c, err := e.TakeSlots(context.Background(), f.chunk("b", 3))
	if err != nil {
		t.Fatalf("take slots: %v (shard 2 has 10 free)", err)
	}
	if stored := f.chunk("b", 3); c.Shard != 2 || c.Slots != 10 || stored.Shard != 2 || stored.Slots != 10 {
		t.Fatalf("got chunk on shard %d with %d slots (stored %+v), want shard 2 with 10", c.Shard, c.Slots, stored)
	}
	if n := f.inflightOf("m", 2); n != 1000 {
		t.Errorf("shard 2 in flight: %d, want 1000", n)
	}
	// Every shard full: no capacity.
	if _, err := e.TakeSlots(context.Background(), f.chunk("b", 4)); err != store.ErrNoCapacity {
		t.Errorf("all shards full: got %v, want store.ErrNoCapacity", err)
	}
}
