package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/quote"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
)

// Dispatch is the dispatcher function's SQS handler: plans, drains of
// cancelled batches and the periodic tick. Each message is idempotent.
func (e *Engine) Dispatch(ctx context.Context, ds []msg.Delivery) ([]string, error) {
	return msg.Each(ctx, e.Log, ds, func(ctx context.Context, m msg.Message) error {
		switch m.Type {
		case msg.Plan:
			return e.Plan(ctx, m.Tenant, m.Batch)
		case msg.Drain:
			b, err := e.Store.GetBatch(ctx, m.Tenant, m.Batch)
			if err != nil {
				return gone(err)
			}
			return e.drain(ctx, b)
		case msg.Tick:
			// Not given back to the queue when a unit failed: each is
			// logged, and the next tick does it (docs/design.md
			// "Scheduling", tick); a tick delivered again would repeat
			// every unit, and pile up behind the ticks that follow.
			if err := e.Tick(ctx); err != nil {
				e.Log.WarnContext(ctx, "tick incomplete; the next tick does the rest", "err", err)
			}
			return nil
		}
		e.Log.WarnContext(ctx, "unknown dispatch message dropped", "type", m.Type)
		return nil
	})
}

// Plan plans a batch (docs/design.md "A row's journey", step 3): under its
// plan lease, it validates the input in one streaming pass and records its
// chunks as byte ranges of rows of one model ("Chunks"); an invalid input
// fails the batch with line-numbered errors and no upstream call
// ("Liveness").
func (e *Engine) Plan(ctx context.Context, tenant, id string) error {
	taken := e.Now()
	b, ok, err := e.takePlanLease(ctx, tenant, id)
	if err != nil || !ok {
		return err
	}
	writeBy := batch.PlanWriteBy(taken, b.PlanLease)
	if b.ChunksTotal > 0 {
		// Planned by an attempt that stopped before its chunks were in the
		// ready index.
		err = e.restart(ctx, b, writeBy)
	} else {
		err = e.planInput(ctx, b, writeBy)
		var bad plan.Invalid
		if errors.As(err, &bad) {
			e.Log.With("batch_id", b.ID, "tenant", b.Tenant).InfoContext(ctx, "batch input invalid", "errors", len(bad))
			err = e.failValidation(ctx, b, bad)
		}
	}
	if err != nil {
		// A throttle or a timeout, before or after the chunks were
		// recorded: the plan message comes back and tries again, without
		// waiting for this attempt's lease to run out.
		e.releasePlanLease(ctx, tenant, id)
	}
	return err
}

// restart starts a batch whose chunks an earlier attempt recorded.
func (e *Engine) restart(ctx context.Context, b batch.Batch, writeBy time.Time) error {
	chunks, err := e.Store.Chunks(ctx, b.ID)
	if err != nil {
		return err
	}
	return e.startPlanned(ctx, b, plan.ReadyEntries(chunks, b.Priority), plan.Alone(chunks), writeBy)
}

// takePlanLease takes a batch's plan lease for this attempt; false when
// there is nothing to plan (gone, started, ended, or another attempt's
// lease still runs). The tick re-sends the plan while the batch is due
// (docs/design.md "Tick").
func (e *Engine) takePlanLease(ctx context.Context, tenant, id string) (batch.Batch, bool, error) {
	now := e.Now()
	b, err := e.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
		if b.Started || b.Status.Terminal() || now.Unix() < b.PlanLease {
			return errSkip
		}
		if b.ChunksTotal == 0 && b.Status != batch.Validating && b.Status != batch.Cancelling {
			return errSkip
		}
		b.PlanLease = batch.PlanLeaseUntil(ctx, now)
		return nil
	})
	if errors.Is(err, errSkip) || errors.Is(err, store.ErrBatchNotFound) {
		return b, false, nil
	}
	return b, err == nil, err
}

// planInput plans a batch not planned yet: it scans its input into chunks
// (internal/plan), records them and the input's objects, and starts the
// batch. An input that cannot be planned is a plan.Invalid error.
func (e *Engine) planInput(ctx context.Context, b batch.Batch, writeBy time.Time) error {
	f, err := e.Store.GetFile(ctx, b.Tenant, b.InputFileID)
	if errors.Is(err, file.ErrNotFound) && b.RetryOf != nil {
		f, err = e.Lifecycle.RetryInput(ctx, b)
	}
	if errors.Is(err, file.ErrNotFound) {
		return plan.Invalid{{Code: batch.CodeInputMissing, Message: fmt.Sprintf("input file %s is gone", b.InputFileID)}}
	}
	if err != nil {
		return fmt.Errorf("read input file of %s: %w", b.ID, err)
	}
	allowed, err := e.Govern.Start(ctx, b)
	if err != nil {
		return err
	}
	capacity := func(model string) int {
		m, _ := e.Models.Lookup(model)
		return m.MaxConcurrency
	}
	var cost func(jsonl.Row) float64
	if b.MaxCost != nil {
		cost = func(r jsonl.Row) float64 { return quote.RowMost(e.Models, r, b.Fallback()) }
	}
	in, err := plan.Scan(ctx, e.Blobs, b, f, e.limits(), capacity, plan.Models{
		Cost: cost,
		Known: func(m string) bool {
			_, ok := e.Models.Lookup(m)
			return ok
		},
		Allowed: allowed,
		Default: endpoint.DefaultModel(e.Models, b.Endpoint),
		Record:  func(row []byte) bool { return e.Workflow.ValidRow(b, row) },
		NoCall: func(r jsonl.Row) bool {
			_, refused := provider.Refusal(e.Models, b.Endpoint, r.Body)
			return refused
		},
	})
	if err != nil {
		return err
	}
	return e.recordPlan(ctx, b, in, writeBy)
}

// recordPlan records a batch's chunks, then its input and chunk count
// (validating → in_progress), and starts it. A second attempt that finds
// the plan recorded stops, and so does one whose batch ended meanwhile (the
// tick expired it): a plan never records onto a terminal batch. One whose
// chunks an earlier attempt wrote, some of them taken since (a cancel's
// drain claims them before the plan is recorded), records the plan: the
// runs of those chunks wait for it.
func (e *Engine) recordPlan(ctx context.Context, b batch.Batch, in plan.Input, writeBy time.Time) error {
	log := e.Log.With("batch_id", b.ID, "tenant", b.Tenant)
	entries := plan.LinkChunks(in.Chunks, b.Priority)
	if err := e.planMayWrite(b, writeBy); err != nil {
		return err
	}
	if cur, err := e.Store.GetBatch(ctx, b.Tenant, b.ID); err != nil || cur.Status.Terminal() {
		return gone(err)
	}
	// Chunks taken since an earlier attempt wrote them are kept as they
	// are; the batch's record below says whether the plan is recorded.
	if err := e.Store.PutChunks(ctx, in.Chunks); err != nil {
		return err
	}
	if err := e.planMayWrite(b, writeBy); err != nil {
		return err
	}
	planned, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, func(b *batch.Batch) error {
		if b.ChunksTotal > 0 || b.Status.Terminal() {
			return errSkip
		}
		b.Input, b.ChunksTotal, b.RequestCounts.Total = in.Objects, len(in.Chunks), int64(in.Result.Rows)
		if in.Result.Model != "" {
			m := in.Result.Model
			b.Model = &m
		}
		if b.Status == batch.Validating {
			return b.To(batch.InProgress, e.Now())
		}
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "batch planned", "rows", in.Result.Rows, "chunks", len(in.Chunks))
	return e.startPlanned(ctx, planned, entries, plan.Alone(in.Chunks), writeBy)
}

// planMayWrite is nil while the plan attempt of b may still write: until
// writeBy (batch.PlanWriteBy), a skew margin before its lease ends
// (docs/design.md "Scheduling", plans are fenced). After, ErrStop: the
// plan message comes back.
func (e *Engine) planMayWrite(b batch.Batch, writeBy time.Time) error {
	if e.Now().Before(writeBy) {
		return nil
	}
	return fmt.Errorf("plan of %s: its lease ends within the skew margin: %w", b.ID, ErrStop)
}

// startPlanned puts a planned batch's chunks in the ready index (or, once
// cancelled, drains them), starts the chunks that run alone (plan.Alone)
// and what free capacity allows. The batch records its chunks first: no
// run can claim a chunk whose input the batch does not point to yet. Until
// Started is recorded the tick sends the plan again, which comes back
// here; a second ready entry of a batch is harmless (it finds its chunk
// claimed and is dropped), and so is a second claim of a chunk alone.
func (e *Engine) startPlanned(ctx context.Context, b batch.Batch, entries []sched.Ready, alone []batch.Chunk, writeBy time.Time) error {
	if !b.Started {
		// Validated: batch.queued goes before any chunk can start, and
		// before Started says it went (delivery.Service.Enqueue).
		if err := e.Lifecycle.Announce(ctx, b, webhook.Queued); err != nil {
			return err
		}
	}
	if b.Status == batch.Cancelling {
		if err := e.drain(ctx, b); err != nil {
			return err
		}
	} else {
		if err := e.planMayWrite(b, writeBy); err != nil {
			return err
		}
		if err := e.claimAlone(ctx, b, alone); err != nil {
			return err
		}
		rest, err := e.Native.Start(ctx, b, entries)
		if err != nil {
			return err
		}
		for _, r := range rest {
			if err := e.Store.PutReady(ctx, r); err != nil {
				return err
			}
		}
	}
	_, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, func(b *batch.Batch) error {
		if b.Started {
			return errSkip
		}
		b.Started = true
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		return err
	}
	for _, r := range entries {
		if err := e.start(ctx, r.Model); err != nil {
			return err
		}
	}
	return nil
}

var errSkip = errors.New("engine: nothing to do")

// releasePlanLease gives up a plan attempt's lease, so the next attempt
// need not wait for it; if this fails the lease runs out on its own.
func (e *Engine) releasePlanLease(ctx context.Context, tenant, id string) {
	_, err := e.Store.UpdateBatch(context.WithoutCancel(ctx), tenant, id, func(b *batch.Batch) error {
		if b.Started || b.PlanLease == 0 {
			return errSkip
		}
		b.PlanLease = 0
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		e.Log.WarnContext(ctx, "release plan lease", "batch_id", id, "err", err)
	}
}

func (e *Engine) failValidation(ctx context.Context, b batch.Batch, lineErrs []jsonl.LineError) error {
	nb, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, func(b *batch.Batch) error {
		if b.Status.Terminal() {
			return errSkip // then only the terminal event may be missing
		}
		b.ErrorList = lineErrs
		return b.To(batch.InvalidInputStatus(b.Status), e.Now())
	})
	if err != nil && !errors.Is(err, errSkip) {
		return err
	}
	return e.terminal(ctx, nb)
}

// terminal does what follows a batch's terminal state (Lifecycle.Terminal),
// which may run more than once, and records it done (batch.Batch.Settled):
// until then the tick sends the batch's finalize again, so a follow-up
// whose every try failed is not lost with its message.
func (e *Engine) terminal(ctx context.Context, b batch.Batch) error {
	if err := e.Lifecycle.Terminal(ctx, b); err != nil {
		return err
	}
	if b.Settled || b.Schedule != nil {
		return nil
	}
	_, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, func(b *batch.Batch) error {
		if b.Settled {
			return errSkip
		}
		b.Settled = true
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	return gone(err)
}
