package engine

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/sched"
)

// fallbackProvider is model x, whose odd rows (custom "n") fail
// transiently on every attempt, with fallback y, which answers: it plays
// provider.Client's routing (Route.Defer, Route.On) and records the
// requests each model got.
type fallbackProvider struct {
	mu      sync.Mutex
	sent    map[string][]int // rows by the model they were sent to
	failAll bool             // every row of x fails, not only odd ones
}

func (p *fallbackProvider) Do(_ context.Context, _ string, body json.RawMessage, route provider.Route) inference.Result {
	var row struct {
		Model string `json:"model"`
		N     int    `json:"n"`
	}
	_ = json.Unmarshal(body, &row)
	record := func(model string) {
		p.mu.Lock()
		p.sent[model] = append(p.sent[model], row.N)
		p.mu.Unlock()
	}
	ok := func(model string, fallback bool) inference.Result {
		return inference.Result{StatusCode: 200, Model: model, Fallback: fallback,
			Body: json.RawMessage(`{"id":"chatcmpl-1","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)}
	}
	if route.On != "" {
		record(route.On)
		return ok(route.On, true)
	}
	record(row.Model)
	switch {
	case row.Model != "x" || (row.N%2 == 0 && !p.failAll):
		return ok(row.Model, false)
	case route.Defer:
		return inference.Result{StatusCode: 503, Model: "x", FallbackTo: "y", Attempts: 4, Body: json.RawMessage(`{"error":{"message":"overloaded"}}`)}
	}
	record("y")
	return ok("y", true)
}

// TestFallbackRowsRunAsAChunkOfTheFallback: the rows of a chunk of x that
// fail transiently on x are not sent to their fallback y by x's run, which
// holds none of y's capacity: its commit adds them as a pending chunk of
// y with a ready entry for y, and that chunk's run, on y's slots, sends
// them to y and commits their lines (docs/design.md "Scheduling", fallback
// rows). Before, x's run sent them to y on x's slots, so y's
// max_concurrency could be passed by the fallbacks of other models.
func TestFallbackRowsRunAsAChunkOfTheFallback(t *testing.T) {
	t.Parallel()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 6, 2})
	p := &fallbackProvider{sent: map[string][]int{}}
	e.Provider = p
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("x's run: failed %v, err %v", failed, err)
	}
	if got := p.sent["y"]; len(got) > 0 {
		t.Fatalf("x's run sent rows %v to y, whose slots it does not hold", got)
	}
	if len(table.committed()) != 1 {
		t.Fatalf("%d commits after x's run, want 1", len(table.committed()))
	}
	first := table.committed()[0]
	if first.Chunk.Rows != 3 || first.Completed != 3 || first.Failed != 0 || first.Chunk.Row(1) != 2 {
		t.Errorf("x's commit: %d rows (%+v), %d completed, %d failed; want rows 0, 2, 4 completed", first.Chunk.Rows, first.Chunk.Runs(), first.Completed, first.Failed)
	}
	fb := table.chunkAt(1)
	if table.b().ChunksTotal != 2 || fb.State != batch.ChunkPending || fb.Model != "y" || !fb.Fallback || fb.Rows != 3 ||
		fb.Row(0) != 1 || fb.Row(1) != 3 || fb.Row(2) != 5 || fb.PriorAttempts != 4 {
		t.Fatalf("chunks %d, chunk 1 %+v: want a pending fallback chunk of y with rows 1, 3, 5, after 4 attempts on x", table.b().ChunksTotal, fb)
	}
	head, ok, _ := table.ReadyHead(ctx, "y")
	if !ok || head.Next != 1 || head.Total != 2 || head.Batch != table.b().ID {
		t.Fatalf("ready entry of y %+v (%v), want one at chunk 1, removed by its claim", head, ok)
	}

	// y's capacity claims it.
	if err := table.ClaimFromPool(ctx, 2, sched.Claim{Entry: head, After: -1, Run: "run-y", Slots: 1, Lease: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	fb = table.chunkAt(1)
	failed, err = e.Execute(ctx, []msg.Delivery{workDelivery(t, fb, "d1")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("y's run: failed %v, err %v", failed, err)
	}
	if got := p.sent["y"]; len(got) != 3 {
		t.Errorf("y got rows %v, want 1, 3, 5 once each", got)
	}
	if len(table.committed()) != 2 {
		t.Fatalf("%d commits, want 2", len(table.committed()))
	}
	second := table.committed()[1]
	if second.Chunk.Index != 1 || second.Completed != 3 || second.Fallback != nil || second.UsageByModel["y"].Requests != 3 {
		t.Errorf("y's commit: chunk %d, %d completed, fallback %v, usage %v; want chunk 1, 3 rows answered by y",
			second.Chunk.Index, second.Completed, second.Fallback, second.UsageByModel)
	}
	if table.chunkAt(1).State != batch.ChunkDone {
		t.Errorf("chunk 1 %s, want done", table.chunkAt(1).State)
	}
}

// TestFallbackOfEveryRow: a chunk none of whose rows x answered commits
// with none, and all of them go to the chunk of y.
func TestFallbackOfEveryRow(t *testing.T) {
	t.Parallel()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 4, 2})
	p := &fallbackProvider{sent: map[string][]int{}, failAll: true}
	e.Provider = p

	failed, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("x's run: failed %v, err %v", failed, err)
	}
	if len(table.committed()) != 1 || len(p.sent["y"]) > 0 {
		t.Fatalf("%d commits, rows %v sent to y: want 1 commit, none sent", len(table.committed()), p.sent["y"])
	}
	if c := table.committed()[0]; c.Chunk.Rows != 0 || c.Chunk.Pattern != "" || c.Completed+c.Failed != 0 {
		t.Errorf("x's commit: %d rows, pattern %q, %d counted; want none", c.Chunk.Rows, c.Chunk.Pattern, c.Completed+c.Failed)
	}
	if fb := table.chunkAt(1); fb.Model != "y" || !fb.Fallback || fb.Rows != 4 || fb.FirstRow != 0 || fb.State != batch.ChunkPending {
		t.Errorf("chunk 1 %+v: want the 4 rows pending on y", fb)
	}
}

// freeSlotsTable is a runsTable that records the models whose free
// capacity was asked for, and has none.
type freeSlotsTable struct {
	*runsTable
	mu    sync.Mutex
	asked []string
}

func (f *freeSlotsTable) FreeSlots(_ context.Context, model string, quotas []int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, model)
	return make([]int, len(quotas)), nil
}

// fallbackStartFixture is an engine over one chunk of model x (6 rows, 2
// slots) whose odd rows fall back to y, both configured (so the engine
// can start y), on a table that records the free capacity asked for.
func fallbackStartFixture(t *testing.T) (*Engine, *runsTable, *freeSlotsTable) {
	t.Helper()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 6, 2})
	e.Provider = &fallbackProvider{sent: map[string][]int{}}
	models, err := config.ParseModels([]byte("models:\n" +
		"  - {name: x, provider: openai, base_url: http://m/v1, api_key_env: K, max_concurrency: 2, fallback: y}\n" +
		"  - {name: y, provider: openai, base_url: http://m/v1, api_key_env: K, max_concurrency: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.Models = models
	return e, table, &freeSlotsTable{runsTable: table}
}

// TestFallbackChunkClaimedAtOnce: the commit that adds a chunk of fallback
// rows claims from the fallback model's free capacity, as a plan does for
// its first chunks; an idle fallback model would otherwise leave them to
// the tick, a minute away as deployed.
func TestFallbackChunkClaimedAtOnce(t *testing.T) {
	t.Parallel()
	e, table, ft := fallbackStartFixture(t)
	e.Store = ft
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	if failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")}); err != nil || len(failed) > 0 {
		t.Fatalf("x's run: failed %v, err %v", failed, err)
	}
	if table.b().ChunksTotal != 2 || !slices.Contains(ft.asked, "y") {
		t.Fatalf("chunks %d, free capacity asked of %v: want the fallback chunk added and y's capacity asked", table.b().ChunksTotal, ft.asked)
	}
}
