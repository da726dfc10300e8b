package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/workflow"
)

// Workflow records (docs/api.md "Workflow records"). Plan gives each one a
// chunk of its own; the executor hands such a chunk to Engine.Workflow
// (internal/wfhost) instead of its row pool, and the
// record's line goes through the normal commit when it ends
// (CommitRecord). What else the adapter uses of the engine: its chunk's
// slots (TakeSlots, ReturnSlots), the re-send of its work message
// (SendAgain) and ErrStop.

// isWorkflowChunk reports whether a chunk is a workflow record's own.
func isWorkflowChunk(c batch.Chunk, reqs []jsonl.Request) bool {
	return c.Rows == 1 && len(reqs) == 1 && workflow.InBody(reqs[0].Body)
}

// deadRecord is dead-letter line o of one-row chunk c with what the steps
// of its workflow record, if it is one, saved and spent: the batch's usage
// counts it, as the record's own end would, and the tenant's daily usage
// too unless its steps counted it already (docs/design.md "Governance").
func (e *Engine) deadRecord(ctx context.Context, b batch.Batch, c batch.Chunk, o part.Outcome) (part.Outcome, error) {
	u, counted, err := e.Workflow.Spent(ctx, b, c)
	if err != nil {
		return o, fmt.Errorf("spend of the record of chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	if u != (inference.Usage{}) {
		o.Result.Model, o.Result.Usage, o.Counted = c.Model, u, counted
	}
	return o, nil
}

// runRecord runs the workflow record of r's chunk on Workflow.
func (e *Engine) runRecord(ctx context.Context, r *chunkRun) error {
	status := func() batch.Status { return r.status.Load().(batch.Status) }
	return e.Workflow.Run(ctx, r.ctx, r.b, r.c, r.reqs[0], status)
}

// CommitRecord commits c, a workflow record's own chunk, with the record's
// line, as any chunk's commit (counters, usage, the hand-on of its slots):
// internal/wfhost calls it when a record ends. status is the batch's as
// the record last saw it: the engine alone counts the line as expired (a
// batch_expired line past the window) or cancelled (a batch_cancelled line
// once the batch is cancelling), never for the code a callback chose.
func (e *Engine) CommitRecord(ctx context.Context, b batch.Batch, c batch.Chunk, status batch.Status, o part.Outcome) error {
	o.Expired = o.Code == part.CodeExpired && b.PastExpiry(e.Now())
	o.Cancelled = o.Code == part.CodeCancelled && status.Stopping()
	return e.CommitRows(ctx, b, c, part.LinesOf(b, c, []part.Outcome{o}, e.Now()))
}

// CommitRows commits claimed chunk c with its rows' lines (every row set;
// it closes them), as a run of it would: internal/native imports a
// provider batch's results so, setting each row's line as its answer is
// read rather than holding the answers (docs/design.md "Memory").
func (e *Engine) CommitRows(ctx context.Context, b batch.Batch, c batch.Chunk, rows *part.Lines) error {
	_, err := e.commitRows(ctx, b, c, rows, 0)
	return err
}

// TakeSlots has claimed chunk c, holding none, take up to as many of its
// model's slots as a chunk claims, from the first capacity shard with room
// (the one it claimed from first, then the others), and returns c holding
// them, with their shard: internal/wfhost calls it when a record that
// waited resumes, internal/native for an import's rescue rows. Trying
// every shard, and taking what a shard has left, keeps such a chunk from
// starving behind continuations that hold one shard's slots. The store's
// errors are SetChunkSlots's (store.ErrNoCapacity: the model is full).
func (e *Engine) TakeSlots(ctx context.Context, c batch.Chunk) (batch.Chunk, error) {
	m, _ := e.Models.Lookup(c.Model)
	quotas := sched.Quotas(m.MaxConcurrency)
	free, err := e.Store.FreeSlots(ctx, c.Model, quotas)
	if err != nil {
		return c, err
	}
	first := min(c.Shard, len(quotas)-1)
	for i := range quotas {
		k := (first + i) % len(quotas)
		if free[k] <= 0 {
			continue
		}
		nc := c
		nc.Shard = k
		want := min(e.limits().Slots, free[k])
		switch err := e.Store.SetChunkSlots(ctx, nc, want, quotas[k]); {
		case errors.Is(err, store.ErrNoCapacity):
			continue // taken by others meanwhile
		case err != nil:
			return c, err
		}
		nc.Slots = want
		return nc, nil
	}
	return c, store.ErrNoCapacity
}

// ReturnSlots gives claimed chunk c's slots back to its model's shard, the
// chunk staying its run's: internal/wfhost calls it while a record waits.
func (e *Engine) ReturnSlots(ctx context.Context, c batch.Chunk) error {
	return e.Store.SetChunkSlots(ctx, c, 0, e.shardQuota(c))
}

// shardQuota is the quota of the capacity shard c's slots come from.
func (e *Engine) shardQuota(c batch.Chunk) int {
	m, _ := e.Models.Lookup(c.Model)
	q := sched.Quotas(m.MaxConcurrency)
	return q[min(c.Shard, len(q)-1)]
}
