package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/fanout"
	"github.com/relaybatch/relay/internal/msg"
)

// afterClaimAloneTable is a memTable whose ClaimAlone takes effect and
// then fails, as an AWS call that timed out after its write.
type afterClaimAloneTable struct{ *memTable }

func (f *afterClaimAloneTable) ClaimAlone(ctx context.Context, c batch.Chunk, run string, lease time.Time) error {
	if err := f.memTable.ClaimAlone(ctx, c, run, lease); err != nil {
		return err
	}
	return errors.New("RequestTimeout: the claim took effect")
}

// TestClaimAloneThatTookEffectAlthoughItFailed: a chunk that runs alone
// (here a NoCall chunk at the plan's start) whose claim took effect
// although its call failed still gets its run's work message, and the
// claim is no error. Before, claimAlone dropped the message and failed:
// the plan's next attempt found the chunk claimed (not plan.Alone any
// more), so it waited a whole lease for the tick's takeover and spent a
// second attempt.
func TestClaimAloneThatTookEffectAlthoughItFailed(t *testing.T) {
	t.Parallel()
	f := &afterClaimAloneTable{memTable: newMemTable()}
	b := batch.Batch{ID: "b", Tenant: "t"}
	c := batch.Chunk{Tenant: "t", Batch: "b", Index: 2, Model: "m", State: batch.ChunkPending, NoCall: true, NextSame: -1}
	f.putChunk(c)
	q := &fakeQueue{}
	e := testEngine(&Engine{Store: f, Queue: q, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Unix(1000, 0) }})

	err := e.claimAlone(context.Background(), b, []batch.Chunk{c})

	got := f.chunk("b", 2)
	if err != nil || got.State != batch.ChunkClaimed || len(q.sent) != 1 || q.sent[0].Type != msg.Chunk ||
		q.sent[0].Chunk != 2 || q.sent[0].Run != got.Run {
		t.Fatalf("err %v, chunk %+v, sent %+v; want no error and chunk 2's message for its run", err, got, q.sent)
	}
}

// TestStopOfARunHoldingNoSlotsLeavesItsModelRunning: a run holding no
// slots (a NoCall chunk's, claimed alone) that is stopped (its lease
// ended, or its chunk was taken over) does not stop its model's other
// runs in the invocation, nor the model's runs that start after: none of
// their rows can be on its slots, and a takeover of its chunk hands on
// none. A run holding slots still stops them (docs/design.md
// "Scheduling", lease rule). Before, any run's stop cut the model's runs
// here into splits and kept the model's continuations out of the
// invocation.
func TestStopOfARunHoldingNoSlotsLeavesItsModelRunning(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		slots     int
		cutsModel bool
	}{{"alone, no slots", 0, false}, {"holding slots", 4, true}} {
		t.Run(tt.name, func(t *testing.T) {
			in := &invocation{stopped: map[string]bool{}}
			run := func(c batch.Chunk) *chunkRun {
				r := &chunkRun{c: c}
				r.ctx, r.cancel = context.WithCancel(context.Background())
				in.add(r)
				return r
			}
			other := run(batch.Chunk{Batch: "b", Index: 0, Model: "m", Slots: 4})
			stopped := run(batch.Chunk{Batch: "b", Index: 1, Model: "m", Slots: tt.slots, NoCall: tt.slots == 0})

			in.stopRun(stopped)

			cut := other.ctx.Err() != nil
			if stopped.ctx.Err() == nil || cut != tt.cutsModel || in.stopped["m"] != tt.cutsModel {
				t.Fatalf("stopped run ended %v, other run cut %v, model stopped %v; want true, %v, %v",
					stopped.ctx.Err() != nil, cut, in.stopped["m"], tt.cutsModel, tt.cutsModel)
			}
		})
	}
}

// TestNoCallRowsNoLongerRefusedRunOnCapacity: a NoCall chunk (claimed
// alone, holding no slot) beside a chunk of its model holding 2 slots, in
// one invocation, whose rows are no longer refused when it runs (the
// models file changed since the plan): its run sends none of them
// upstream, so the model never has more than its 2 slots' requests in
// flight, and its commit leaves them to a pending fallback chunk of their
// own model with a ready entry, which the model's free capacity claims
// holding slots (docs/design.md "Scheduling", rows settled without a
// call).
func TestNoCallRowsNoLongerRefusedRunOnCapacity(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(20 * time.Millisecond)
	e, table := runsFixture(t, p, chunkSpec{"x", 12, 2}, chunkSpec{"x", 3, 0})
	models, err := config.ParseModels([]byte("models:\n  - {name: x, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.Models = models
	c := table.chunkAt(1)
	c.NoCall = true
	table.putChunk(c)

	failed, err := e.Execute(context.Background(), []msg.Delivery{
		workDelivery(t, table.chunkAt(0), "d0"), workDelivery(t, table.chunkAt(1), "d1")})

	if err != nil || len(failed) > 0 {
		t.Fatalf("Execute: failed %v, err %v", failed, err)
	}
	for row := 12; row < 15; row++ {
		if p.sent[row] != 0 {
			t.Errorf("row %d of the NoCall chunk sent %d times by its run, want 0", row, p.sent[row])
		}
	}
	if p.peak["x"] > 2 {
		t.Errorf("x peaked at %d in flight, over the 2 slots held", p.peak["x"])
	}
	fb := table.chunkAt(2)
	if b := table.b(); b.ChunksTotal != 3 || !fb.Fallback || fb.NoCall || fb.Model != "x" || fb.Rows != 3 || fb.FirstRow != 12 {
		t.Fatalf("%d chunks, chunk 2 %+v; want 3, a fallback chunk of x holding rows 12-14", b.ChunksTotal, fb)
	}
	if fb.State != batch.ChunkClaimed || fb.Slots == 0 {
		t.Fatalf("fallback chunk %s holding %d slots, want claimed from x's capacity", fb.State, fb.Slots)
	}
}

// TestStoppedNoCallRunThatAnsweredEveryRowCommits: a NoCall run (holding
// no slot) whose context ends before its rows (here: it starts in an
// invocation where its model was stopped) still answers every row with
// its refusal, unsent, and commits them, as any run that answered every
// row does. Before, commitAnswered stopped every run holding no slot
// (ErrStop): the message came back and the run repeated it all.
func TestStoppedNoCallRunThatAnsweredEveryRowCommits(t *testing.T) {
	t.Parallel()
	p := newPeakProvider(0)
	e, table := runsFixture(t, p, chunkSpec{"x", 3, 0})
	// x is no model of the models file any more: its rows are refused.
	models, err := config.ParseModels([]byte("models:\n  - {name: y, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.Models = models
	c := table.chunkAt(0)
	c.NoCall = true
	table.putChunk(c)
	ctx := context.Background()
	in := &invocation{e: e, ctx: ctx, runCtx: ctx, pool: fanout.NewPool(),
		batches: map[string]*cachedBatch{}, statuses: map[string]*atomic.Value{}, sending: map[string]chan struct{}{},
		stopped: map[string]bool{"x": true}}
	r := &chunkRun{msg: msg.Message{Type: msg.Chunk, Tenant: c.Tenant, Batch: c.Batch, Chunk: c.Index, Run: c.Run, Attempt: 1},
		done: make(chan struct{})}

	in.start(r, nil)
	in.work.Wait()
	in.keepers.Wait()

	if got := table.chunkAt(0); r.err != nil || got.State != batch.ChunkDone || got.Rows != 3 || len(p.sent) != 0 {
		t.Fatalf("run err %v, chunk %s of %d rows, %d rows sent; want committed, 3 rows, none sent", r.err, got.State, got.Rows, len(p.sent))
	}
}
