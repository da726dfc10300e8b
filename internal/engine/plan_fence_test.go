package engine

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/sched"
)

// fencedPlanTable is a memTable of one batch for recordPlan that counts
// the plan's writes; putChunks, if set, answers PutChunks.
type fencedPlanTable struct {
	*memTable
	id                  string
	chunkPuts, readyPut int
	putChunks           error
}

// newFencedPlanTable holds b, its model m's capacity (4) all taken: a plan
// recorded claims nothing.
func newFencedPlanTable(b batch.Batch) *fencedPlanTable {
	f := &fencedPlanTable{memTable: newMemTable(), id: b.ID}
	f.putBatch(b)
	f.setInflight("m", 4)
	return f
}

func (f *fencedPlanTable) b() batch.Batch { return f.batch(f.id) }

func (f *fencedPlanTable) PutChunks(ctx context.Context, cs []batch.Chunk) error {
	f.chunkPuts++
	if f.putChunks != nil {
		return f.putChunks
	}
	return f.memTable.PutChunks(ctx, cs)
}

func (f *fencedPlanTable) PutReady(ctx context.Context, r sched.Ready) error {
	f.readyPut++
	return f.memTable.PutReady(ctx, r)
}

func fencedPlanEngine(t *testing.T, f *fencedPlanTable, now time.Time) *Engine {
	t.Helper()
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return testEngine(&Engine{Store: f, Queue: &fakeQueue{}, Models: models, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
}

// input is a plan's result: n pending chunks of model m.
func input(id string, n int) plan.Input {
	in := plan.Input{Result: jsonl.Result{Rows: n}}
	for i := range n {
		in.Chunks = append(in.Chunks, batch.Chunk{Batch: id, Tenant: "t", Index: i, Rows: 1, Model: "m", State: batch.ChunkPending})
	}
	return in
}

// A plan that finishes after the tick expired its batch (its window ended
// while the plan read the input) records nothing onto the expired batch
// and starts no claim (docs/design.md "Scheduling", plans are fenced).
func TestPlanNeverRecordsOntoTerminalBatch(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	planning := batch.Batch{ID: "batch_p", Tenant: "t", Status: batch.Validating, PlanLease: now.Unix() + 60}
	expired := planning
	if err := expired.To(batch.Expired, now); err != nil {
		t.Fatal(err)
	}
	f := newFencedPlanTable(expired)
	if err := fencedPlanEngine(t, f, now).recordPlan(context.Background(), planning, input(planning.ID, 2), batch.PlanWriteBy(now, planning.PlanLease)); err != nil {
		t.Fatal(err)
	}
	if f.chunkPuts != 0 || f.readyPut != 0 || f.b().ChunksTotal != 0 || f.b().Status != batch.Expired || f.b().Started {
		t.Fatalf("after the plan: %d chunk writes, %d ready entries, batch %s with %d chunks, started %v; want nothing recorded",
			f.chunkPuts, f.readyPut, f.b().Status, f.b().ChunksTotal, f.b().Started)
	}
}

// A plan attempt stops writing a skew margin before its lease ends: a
// second attempt may take the lease then, on a clock a little ahead.
func TestPlanStopsWritingBeforeItsLeaseEnds(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	b := batch.Batch{ID: "batch_p", Tenant: "t", Status: batch.Validating, PlanLease: now.Add(time.Minute).Unix()}
	f := newFencedPlanTable(b)
	writeBy := batch.PlanWriteBy(now.Add(-time.Second), b.PlanLease)
	now = now.Add(time.Minute - batch.PlanSkew + time.Second) // within the margin
	err := fencedPlanEngine(t, f, now).recordPlan(context.Background(), b, input(b.ID, 2), writeBy)
	if !errors.Is(err, ErrStop) {
		t.Fatalf("recordPlan past its write time: %v, want ErrStop", err)
	}
	if f.chunkPuts != 0 || f.readyPut != 0 || f.b().ChunksTotal != 0 {
		t.Fatalf("%d chunk writes, %d ready entries, %d chunks recorded; want none", f.chunkPuts, f.readyPut, f.b().ChunksTotal)
	}
}

// A plan attempt whose chunks an earlier attempt wrote, and a cancel's
// drain claimed before the plan was recorded, records the plan: the
// drained chunks' runs wait for the batch's chunk count (before, the
// attempt stopped at the claimed chunks and the batch never ended). One
// that finds the plan recorded records nothing more.
func TestLatePlanRecordsWhatIsMissing(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	b := batch.Batch{ID: "batch_p", Tenant: "t", Status: batch.Cancelling, PlanLease: now.Unix() + 60}
	f := newFencedPlanTable(b)
	// Its chunks, as the earlier attempt wrote them and the drain claimed
	// them.
	for _, c := range input(b.ID, 2).Chunks {
		c.State, c.Run = batch.ChunkClaimed, "drain"
		f.putChunk(c)
	}
	if err := fencedPlanEngine(t, f, now).recordPlan(context.Background(), b, input(b.ID, 2), batch.PlanWriteBy(now, b.PlanLease)); err != nil {
		t.Fatal(err)
	}
	if f.chunkPuts != 1 || f.b().ChunksTotal != 2 || f.b().RequestCounts.Total != 2 {
		t.Fatalf("%d chunk writes, batch %+v: want the plan recorded", f.chunkPuts, f.b())
	}
	recorded := f.b()
	if err := fencedPlanEngine(t, f, now).recordPlan(context.Background(), b, input(b.ID, 2), batch.PlanWriteBy(now, b.PlanLease)); err != nil {
		t.Fatal(err)
	}
	if f.readyPut != 0 || f.b().ChunksTotal != recorded.ChunksTotal {
		t.Fatalf("%d ready entries, batch %+v after a second attempt: want nothing more", f.readyPut, f.b())
	}
}
