package engine

import (
	"context"
	"log/slog"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/store"
)

// slotsTable is a hand-written Store of capacity shards for TakeSlots.
type slotsTable struct {
	*fakePool
	set []batch.Chunk // the chunks SetChunkSlots wrote, with their slots
}

func (f *slotsTable) SetChunkSlots(_ context.Context, c batch.Chunk, to, quota int) error {
	if f.inflight[c.Shard]+to-c.Slots > quota {
		return store.ErrNoCapacity
	}
	f.inflight[c.Shard] += to - c.Slots
	c.Slots = to
	f.set = append(f.set, c)
	return nil
}

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
	f := &slotsTable{fakePool: &fakePool{fakeSched: &fakeSched{}, inflight: []int{1000, 1000, 990}}}
	e := testEngine(&Engine{Store: f, Models: models, Log: slog.New(slog.DiscardHandler)})
	c, err := e.TakeSlots(context.Background(), batch.Chunk{Batch: "b", Index: 3, Model: "m", State: batch.ChunkClaimed, Run: "r"})
	if err != nil {
		t.Fatalf("take slots: %v (shard 2 has 10 free)", err)
	}
	if c.Shard != 2 || c.Slots != 10 || len(f.set) != 1 || f.set[0].Shard != 2 {
		t.Fatalf("got chunk on shard %d with %d slots (writes %+v), want shard 2 with 10", c.Shard, c.Slots, f.set)
	}
	if f.inflight[2] != 1000 {
		t.Errorf("shard 2 in flight: %d, want 1000", f.inflight[2])
	}
	// Every shard full: no capacity.
	if _, err := e.TakeSlots(context.Background(), batch.Chunk{Batch: "b", Index: 4, Model: "m", State: batch.ChunkClaimed, Run: "r"}); err != store.ErrNoCapacity {
		t.Errorf("all shards full: got %v, want store.ErrNoCapacity", err)
	}
}
