package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/files"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// DeadLetter is the deadletter function's handler for the work DLQ. A
// chunk that ran out of attempts (counted on its item: the tick sends it
// here) is closed with a dead_letter error line per row (none of its rows
// was committed: a chunk commits all or nothing), and its rows join the
// batch's dead-letter list once that commit took effect, so a late run
// that commits first never leaves phantom dead letters. A message that
// reached the DLQ by SQS's receive count while its chunk still has
// attempts left (it shared invocations that crashed) goes back to work.
func (e *Engine) DeadLetter(ctx context.Context, ds []queue.Delivery) ([]string, error) {
	return eachMessage(ctx, e.Log, ds, func(ctx context.Context, m Message) error {
		b, err := e.Store.GetBatch(ctx, m.Tenant, m.Batch)
		if errors.Is(err, store.ErrBatchNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		c, err := e.Store.GetChunk(ctx, m.Batch, m.Chunk)
		if err != nil {
			return err
		}
		switch {
		case c.State == batch.ChunkDone:
			if c.Dead && c.Run == m.Run {
				// The commit took effect; its dead-letter items may not have.
				ids, err := e.customIDs(ctx, b, c)
				if err != nil {
					return err
				}
				if err := e.Store.PutDeadLetters(ctx, b.ID, deadLetters(c, ids)); err != nil {
					return err
				}
			}
			return e.sweepParts(ctx, c)
		case c.Run != m.Run:
			return nil // an old run's message: the chunk went on without it
		case m.Type == MsgChunk && c.Attempts <= resources.WorkMaxReceiveCount:
			m.Attempt = c.Attempts
			return e.send(ctx, resources.Work, m)
		}
		ids, err := e.customIDs(ctx, b, c)
		if err != nil {
			return err
		}
		outs := make([]outcome, c.Rows)
		for i := range outs {
			outs[i] = outcome{customID: ids[i], code: CodeDeadLetter, message: deadLetterMessage}
		}
		c.Dead = true
		ours, err := e.commitRows(ctx, b, c, outs, int64(len(outs)))
		if err != nil || !ours {
			return err
		}
		e.Log.WarnContext(ctx, "chunk dead-lettered", "batch_id", b.ID, "chunk", c.Index, "rows", c.Rows)
		return e.Store.PutDeadLetters(ctx, b.ID, deadLetters(c, ids))
	})
}

// customIDs returns the custom ids of a chunk's rows when its range still
// parses; a poison range that does not is reported by row number. A range
// that cannot be read now (a throttle) is an error: the message comes back.
func (e *Engine) customIDs(ctx context.Context, b batch.Batch, c batch.Chunk) ([]string, error) {
	data, err := e.readRange(ctx, b.Input, c.Start, c.End)
	if err != nil {
		return nil, fmt.Errorf("read chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	ids := make([]string, c.Rows)
	if reqs, err := jsonl.ParseRequests(data); err == nil && len(reqs) == c.Rows {
		for i, r := range reqs {
			ids[i] = r.CustomID
		}
	}
	return ids, nil
}

const deadLetterMessage = "the request's chunk failed on every attempt (executor crash or timeout) and was moved to the dead-letter queue"

// deadLetters are the dead-letter items of a dead chunk's rows, keyed by
// row: a second write of the same rows replaces them.
func deadLetters(c batch.Chunk, ids []string) []batch.DeadLetter {
	dls := make([]batch.DeadLetter, c.Rows)
	for i := range dls {
		dls[i] = batch.DeadLetter{Error: deadLetterMessage, Attempts: resources.WorkMaxReceiveCount, Row: c.FirstRow + i}
		if i < len(ids) {
			dls[i].CustomID = ids[i]
		}
	}
	return dls
}

// Finalize is the finalizer function's handler.
func (e *Engine) Finalize(ctx context.Context, ds []queue.Delivery) ([]string, error) {
	return eachMessage(ctx, e.Log, ds, func(ctx context.Context, m Message) error {
		return e.FinalizeBatch(ctx, m.Tenant, m.Batch)
	})
}

// FinalizeBatch assembles the output and error files from the committed
// chunk parts (a file is an ordered list of objects: no row is downloaded
// or re-uploaded), removes parts of runs that lost, and sets the terminal
// status. It is idempotent: a duplicate finalize message changes nothing.
func (e *Engine) FinalizeBatch(ctx context.Context, tenant, id string) error {
	b, err := e.Store.GetBatch(ctx, tenant, id)
	if errors.Is(err, store.ErrBatchNotFound) {
		return nil
	}
	if err != nil {
		return err
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
	chunks, err := e.Store.Chunks(ctx, id)
	if err != nil {
		return err
	}
	var outKeys, errKeys []string
	var outBytes, errBytes int64
	keep := map[string]bool{}
	for _, c := range chunks {
		if c.State != batch.ChunkDone {
			return fmt.Errorf("finalize %s: chunk %d is %s", id, c.Index, c.State)
		}
		if c.OutBytes > 0 {
			outKeys = append(outKeys, c.Parts("out"))
			outBytes += c.OutBytes
		}
		if c.ErrBytes > 0 {
			errKeys = append(errKeys, c.Parts("err"))
			errBytes += c.ErrBytes
		}
		for _, kind := range []string{"out", "err", "usage"} {
			keep[c.Parts(kind)] = true
		}
	}
	if _, err := e.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
		if b.Status == batch.Finalizing || b.Status.Terminal() {
			return errSkip
		}
		return b.To(batch.Finalizing, e.now())
	}); err != nil && !errors.Is(err, errSkip) {
		return err
	}
	// File ids derive from the batch id, so a second finalizer writes the same records.
	suffix := strings.TrimPrefix(id, "batch_")
	outID, errID := "", ""
	if len(outKeys) > 0 {
		outID = "file-" + suffix + "-output"
		if err := e.putOutputFile(ctx, b, outID, "batch_"+suffix+"_output.jsonl", outKeys, outBytes); err != nil {
			return err
		}
	}
	if len(errKeys) > 0 {
		errID = "file-" + suffix + "-errors"
		if err := e.putOutputFile(ctx, b, errID, "batch_"+suffix+"_error.jsonl", errKeys, errBytes); err != nil {
			return err
		}
	}
	// Parts of runs that lost a race or crashed before committing.
	all, err := e.Blobs.List(ctx, batch.PartsPrefix(tenant, id))
	if err != nil {
		return fmt.Errorf("finalize %s: list parts: %w", id, err)
	}
	var stray []string
	for _, k := range all {
		if !keep[k] {
			stray = append(stray, k)
		}
	}
	if err := e.Blobs.Delete(ctx, stray...); err != nil {
		return err
	}
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
		return b.To(finalStatus(b), e.now())
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

// finalStatus is the terminal status a finalized batch ends in: cancelled
// once a cancel was asked for (whatever ran meanwhile), expired when a row
// got batch_expired, else completed, however many rows failed (OpenAI's
// batches complete with failed rows; failed is for an input that breaks
// a rule, see invalidInputStatus).
func finalStatus(b *batch.Batch) batch.Status {
	switch {
	case b.CancellingAt != nil:
		return batch.Cancelled
	case b.ExpiredRows > 0:
		return batch.Expired
	}
	return batch.Completed
}

// outputLifetime is how long output files live by default: the bucket's
// lifecycle expires chunk parts after this.
func (e *Engine) putOutputFile(ctx context.Context, b batch.Batch, id, name string, keys []string, size int64) error {
	now := e.now()
	exp := now.Add(e.Set.PartsExpiry).Unix()
	if b.OutputExpiresAfter != nil {
		exp = min(exp, b.CreatedAt+*b.OutputExpiresAfter)
	}
	return e.Store.PutFileOverwrite(ctx, files.File{
		ID: id, Bytes: size, CreatedAt: now.Unix(), Filename: name, Purpose: files.PurposeBatchOutput,
		Status: files.StatusProcessed, ExpiresAt: &exp, Tenant: b.Tenant, Objects: keys,
	})
}
