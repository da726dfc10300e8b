package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// DeadLetter is the deadletter function's handler for the work DLQ
// (docs/design.md "Message types", dead). Its rows join the batch's
// dead-letter list through their generations, written by the commit
// (docs/api.md "Dead letters"), so a late run that commits first never
// leaves phantom dead letters.
func (e *Engine) DeadLetter(ctx context.Context, ds []msg.Delivery) ([]string, error) {
	return msg.Each(ctx, e.Log, ds, func(ctx context.Context, m msg.Message) error {
		if msg.IsNative(m.Type) {
			return e.Native.Handle(ctx, m, true)
		}
		b, err := e.Store.GetBatch(ctx, m.Tenant, m.Batch)
		if err != nil {
			return gone(err)
		}
		c, err := e.Store.GetChunk(ctx, m.Batch, m.Chunk)
		if err != nil {
			return err
		}
		switch {
		case c.State == batch.ChunkDone:
			return e.sweepParts(ctx, c)
		case c.Run != m.Run:
			return nil // an old run's message: the chunk went on without it
		case m.Type == msg.Chunk && c.Attempts <= resources.WorkMaxReceiveCount:
			m.Attempt = c.Attempts
			return e.send(ctx, resources.Work, m)
		}
		ids, err := e.customIDs(ctx, b, c)
		if err != nil {
			return err
		}
		outs := make([]part.Outcome, c.Rows)
		for i := range outs {
			outs[i] = part.Outcome{CustomID: ids[i], Code: part.CodeDeadLetter, Message: part.DeadLetterMessage,
				Result: inference.Result{Model: c.Model, Attempts: deadRuns(c)}}
		}
		if c.Rows == 1 {
			if outs[0], err = e.deadRecord(ctx, b, c, outs[0]); err != nil {
				return err
			}
		}
		c.Dead = true
		ours, err := e.commitRows(ctx, b, c, part.LinesOf(b, c, outs, e.Now()), int64(len(outs)))
		if err != nil || !ours {
			return err
		}
		e.Log.WarnContext(ctx, "chunk dead-lettered", "batch_id", b.ID, "chunk", c.Index, "rows", c.Rows)
		return nil
	})
}

// deadRuns is how many runs chunk c had before it was dead-lettered, the
// attempts its rows' generations count: its claims, less the one that
// found it out of attempts (Engine.takeOver). A native group's chunk,
// claimed only to be dead-lettered, had its group's step out of its
// receives instead.
func deadRuns(c batch.Chunk) int {
	if c.Attempts > resources.WorkMaxReceiveCount {
		return c.Attempts - 1
	}
	return resources.WorkMaxReceiveCount
}

// customIDs returns the custom ids of a chunk's rows when its range still
// parses; a poison range that does not, or an input object replaced or
// deleted since the plan (it never reads again), is reported by row
// number. A range that cannot be read now (a throttle) is an error: the
// message comes back.
func (e *Engine) customIDs(ctx context.Context, b batch.Batch, c batch.Chunk) ([]string, error) {
	reqs, err := plan.ReadChunk(ctx, e.Blobs, b, c)
	var poison plan.BadRange
	if errors.As(err, &poison) || errors.Is(err, blob.ErrChanged) || errors.Is(err, blob.ErrNotFound) {
		return make([]string, c.Rows), nil
	}
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.CustomID
	}
	return ids, err
}

// Finalize is the finalizer function's handler.
func (e *Engine) Finalize(ctx context.Context, ds []msg.Delivery) ([]string, error) {
	return msg.Each(ctx, e.Log, ds, func(ctx context.Context, m msg.Message) error {
		return e.FinalizeBatch(ctx, m.Tenant, m.Batch)
	})
}

// FinalizeBatch finalizes a batch whose chunks are all done
// (docs/design.md "Message types", finalize). It is idempotent: a
// duplicate finalize message changes nothing. The batch and its chunks are
// read side by side, and then `finalizing`, the output and error file
// records and the sweep of stray parts are written side by side: the
// batch's end waits for three round trips in a row, not eight.
func (e *Engine) FinalizeBatch(ctx context.Context, tenant, id string) error {
	var chunks []batch.Chunk
	var chunksErr error
	var read sync.WaitGroup
	read.Go(func() { chunks, chunksErr = e.Store.Chunks(ctx, id) })
	b, err := e.Store.GetBatch(ctx, tenant, id)
	read.Wait()
	if err != nil {
		return gone(err)
	}
	if b.Status.Terminal() {
		// A redelivery after the status was set: make sure the terminal
		// event went out (its id derives from the batch, so receivers see
		// one event however often this runs).
		return e.terminal(ctx, b)
	}
	if b.ChunksTotal == 0 || b.ChunksDone < b.ChunksTotal {
		return nil
	}
	if chunksErr != nil || !allDone(chunks, b.ChunksTotal) {
		// Read before the last commit landed: its chunks are all done now.
		if chunks, err = e.Store.Chunks(ctx, id); err != nil {
			return err
		}
	}
	parts, err := part.Committed(id, chunks)
	if err != nil {
		return err
	}
	var ids [2]string // output, error
	var writes sync.WaitGroup
	errs := make([]error, 4)
	writes.Go(func() {
		_, err := e.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
			if b.Status == batch.Finalizing || b.Status.Terminal() {
				return errSkip
			}
			return b.To(batch.Finalizing, e.Now())
		})
		if !errors.Is(err, errSkip) {
			errs[0] = err
		}
	})
	for i, f := range parts.Records(b, e.Now(), e.Set.PartsExpiry) {
		if f == nil {
			continue
		}
		if b.Endpoint == endpoint.Messages {
			// A message batch's results read these files' parts until the
			// batch is deleted: a delete through the Files API hides them
			// and keeps the parts (files.Service.Hold; docs/api.md
			// "Message Batches").
			f.Readers = []string{b.ID}
		}
		ids[i] = f.ID
		writes.Go(func() { errs[1+i] = e.Store.PutBatchFile(ctx, *f, id) })
	}
	// Parts no commit points to: those of runs that lost a race or crashed
	// before committing.
	writes.Go(func() { errs[3] = blob.DeleteExcept(ctx, e.Blobs, batch.PartsPrefix(tenant, id), parts.Keep) })
	writes.Wait()
	if errors.Is(errs[1], store.ErrBatchEnded) || errors.Is(errs[2], store.ErrBatchEnded) {
		// Another finalizer ended it since the read: its records stand,
		// or the user deleted them since, and they stay deleted.
		if b, err = e.Store.GetBatch(ctx, tenant, id); err != nil {
			return gone(err)
		}
		return e.terminal(ctx, b)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return e.endBatch(ctx, tenant, id, ids[0], ids[1])
}

// allDone reports whether chunks are a batch's total chunks, every one
// done.
func allDone(chunks []batch.Chunk, total int) bool {
	if len(chunks) != total {
		return false
	}
	for _, c := range chunks {
		if c.State != batch.ChunkDone {
			return false
		}
	}
	return true
}

// endBatch sets a finalized batch's files and terminal status
// (batch.FinalStatus) and does what follows it (terminal); a batch already
// terminal was ended by another finalizer.
func (e *Engine) endBatch(ctx context.Context, tenant, id, outID, errID string) error {
	final, err := e.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
		if b.Status.Terminal() {
			return errSkip
		}
		if outID != "" {
			b.OutputFileID = &outID
		}
		if errID != "" {
			b.ErrorFileID = &errID
		}
		return b.To(batch.FinalStatus(b), e.Now())
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	e.Log.InfoContext(ctx, "batch finalized", "batch_id", id, "status", final.Status,
		"completed", final.RequestCounts.Completed, "failed", final.RequestCounts.Failed, "total", final.RequestCounts.Total)
	return e.terminal(ctx, final)
}
