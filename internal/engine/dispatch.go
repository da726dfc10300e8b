package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/workflow"
)

// planLease is how long one dispatcher may plan a batch before another may
// take over (the first one crashed).
const planLease = 2 * time.Minute

// normalizedObjectSize bounds each object of a normalized (CSV) input.
const normalizedObjectSize = 8 << 20

// Dispatch is the dispatcher function's SQS handler.
//
// A release pass reads every active batch, and every chunk commit sends a
// release message, so the messages of one invocation share one pass after
// the plans and ticks: up to ten times fewer passes when the queue is busy.
// If that pass fails, the whole batch of messages comes back; each of them
// is idempotent.
func (e *Engine) Dispatch(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	release := false
	resp, err := eachMessage(ctx, e.Log, ev, func(ctx context.Context, m Message) error {
		switch m.Type {
		case MsgPlan:
			release = true
			return e.Plan(ctx, m.Tenant, m.Batch)
		case MsgRelease:
			release = true
			return nil
		case MsgTick:
			release = true
			return e.sweep(ctx)
		}
		e.Log.WarnContext(ctx, "unknown dispatch message dropped", "type", m.Type)
		return nil
	})
	if err != nil || !release {
		return resp, err
	}
	if err := e.Release(ctx); err != nil {
		return events.SQSEventResponse{}, fmt.Errorf("release: %w", err)
	}
	return resp, nil
}

// Plan validates a batch's input in one streaming pass and records its
// chunks as byte ranges of N rows of one model; an invalid input fails the
// batch with line-numbered errors and no upstream call.
func (e *Engine) Plan(ctx context.Context, tenant, id string) error {
	now := e.now()
	b, err := e.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
		if b.ChunksTotal > 0 || b.Status.Terminal() || now.Unix() < b.PlanLease {
			return errSkip
		}
		if b.Status != batch.Validating && b.Status != batch.Cancelling {
			return errSkip
		}
		b.PlanLease = now.Add(planLease).Unix()
		return nil
	})
	if errors.Is(err, errSkip) || errors.Is(err, store.ErrBatchNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	log := e.Log.With("batch_id", id, "tenant", tenant)

	input, err := e.Store.GetFile(ctx, tenant, b.InputFileID)
	if err != nil {
		return e.failValidation(ctx, b, []jsonl.LineError{{Code: "input_file_missing", Message: fmt.Sprintf("input file %s is gone", b.InputFileID)}})
	}
	format, err := jsonl.FormatOf(input.Filename)
	if err != nil {
		return e.failValidation(ctx, b, []jsonl.LineError{{Code: "invalid_file_format", Message: err.Error()}})
	}
	opts := jsonl.Options{Format: format, Endpoint: b.Endpoint, Model: b.CSVModel, KnownModel: func(m string) bool {
		_, ok := e.Models.Lookup(m)
		return ok
	}}
	if b.Endpoint == MessagesEndpoint {
		// Anthropic's Message Batches limits (SPEC §9).
		opts.MaxRows, opts.MaxBytes = 100_000, 256*1000*1000
	}
	rc := e.Blobs.Concat(ctx, input.Objects)
	defer closeQuietly(rc)

	// CSV rows are rewritten as JSONL so every executor reads one format.
	var norm *objectWriter
	var normOff int64
	if format == jsonl.CSV {
		norm = &objectWriter{ctx: ctx, blobs: e.Blobs, prefix: fmt.Sprintf("files/%s/%s/normalized/", tenant, b.InputFileID+"-"+b.ID), limit: normalizedObjectSize}
	}
	var chunks []batch.Chunk
	// A workflow record (SPEC §10) gets a chunk of its own: it runs for
	// many steps and commits when it ends, which must hold up no other row.
	lastAlone := false
	add := func(r jsonl.Row, start, end int64) {
		n := len(chunks)
		alone := workflow.InRow(r.JSON)
		if n == 0 || alone || lastAlone || chunks[n-1].Rows == e.chunkRows() || chunks[n-1].Model != r.Model {
			chunks = append(chunks, batch.Chunk{Batch: b.ID, Tenant: tenant, Index: n, Start: start, FirstRow: r.Index, Model: r.Model, State: batch.ChunkPending})
			n++
		}
		chunks[n-1].Rows++
		chunks[n-1].End = end
		lastAlone = alone
	}
	res, err := jsonl.Scan(rc, opts, func(r jsonl.Row) error {
		if norm == nil {
			add(r, r.Start, r.End)
			return nil
		}
		line := append(r.JSON, '\n')
		if _, err := norm.Write(line); err != nil {
			return err
		}
		add(r, normOff, normOff+int64(len(line)))
		normOff += int64(len(line))
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan input of %s: %w", id, err)
	}
	if len(res.Errors) > 0 {
		log.InfoContext(ctx, "batch input invalid", "errors", len(res.Errors))
		return e.failValidation(ctx, b, res.Errors)
	}
	var objs []batch.Object
	if norm != nil {
		if objs, err = norm.Close(); err != nil {
			return fmt.Errorf("write normalized input of %s: %w", id, err)
		}
	} else {
		for _, k := range input.Objects {
			size, err := e.Blobs.Size(ctx, k)
			if err != nil {
				return fmt.Errorf("size of %s: %w", k, err)
			}
			objs = append(objs, batch.Object{Key: k, Size: size})
		}
	}
	if err := e.Store.PutChunks(ctx, chunks); err != nil {
		return err
	}
	_, err = e.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
		if b.ChunksTotal > 0 {
			return errSkip
		}
		b.Input, b.ChunksTotal, b.RequestCounts.Total = objs, len(chunks), int64(res.Rows)
		if res.Model != "" {
			m := res.Model
			b.Model = &m
		}
		if b.Status == batch.Validating {
			return b.To(batch.InProgress, e.now())
		}
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	log.InfoContext(ctx, "batch planned", "rows", res.Rows, "chunks", len(chunks))
	return err
}

var errSkip = errors.New("engine: nothing to do")

func (e *Engine) failValidation(ctx context.Context, b batch.Batch, lineErrs []jsonl.LineError) error {
	nb, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, func(b *batch.Batch) error {
		if b.Status.Terminal() {
			return errSkip // then only the terminal event may be missing
		}
		b.ErrorList = lineErrs
		if b.Status == batch.Cancelling {
			return b.To(batch.Cancelled, e.now())
		}
		return b.To(batch.Failed, e.now())
	})
	if errors.Is(err, errSkip) {
		return e.terminal(ctx, nb)
	}
	if err != nil {
		return err
	}
	return e.terminal(ctx, nb)
}

func (e *Engine) terminal(ctx context.Context, b batch.Batch) error {
	if err := e.releaseInflight(ctx, b); err != nil {
		return err
	}
	if e.OnTerminal == nil {
		return nil
	}
	return e.OnTerminal(ctx, b)
}

// Release hands pending chunks to the work queue: highest priority first;
// within a priority, one chunk per batch in turn so no batch starves the
// others; each within its model's max_concurrency. A cancelled or expired
// batch's chunks go without capacity: they only write error lines.
func (e *Engine) Release(ctx context.Context) error {
	refs, err := e.Store.ActiveBatches(ctx)
	if err != nil {
		return err
	}
	type cursor struct {
		b    batch.Batch
		next batch.Chunk
		ok   bool
	}
	full := map[string]bool{} // models whose capacity ran out in this pass
	for i := 0; i < len(refs); {
		j := i
		for j < len(refs) && refs[j].Priority == refs[i].Priority {
			j++
		}
		var level []*cursor
		for _, r := range refs[i:j] {
			b, err := e.Store.GetBatch(ctx, r.Tenant, r.ID)
			if err != nil || b.ChunksTotal == 0 || b.Released >= b.ChunksTotal {
				continue
			}
			level = append(level, &cursor{b: b})
		}
		// Round robin: the next chunk goes to the batch that has had the
		// fewest so far (the oldest on a tie), so no batch starves another
		// of its priority.
		blocked := map[*cursor]bool{}
		for {
			var c *cursor
			for _, cand := range level {
				if blocked[cand] || cand.b.Released >= cand.b.ChunksTotal {
					continue
				}
				if c == nil || cand.b.Released < c.b.Released {
					c = cand
				}
			}
			if c == nil {
				break
			}
			if !c.ok {
				ch, err := e.Store.GetChunk(ctx, c.b.ID, c.b.Released)
				if err != nil {
					return err
				}
				c.next, c.ok = ch, true
			}
			ch := c.next
			slots, max := 0, 0
			draining := c.b.Status == batch.Cancelling || c.b.PastExpiry(e.now())
			if !draining {
				if full[ch.Model] {
					blocked[c] = true
					continue
				}
				m, _ := e.Models.Lookup(ch.Model)
				max = m.MaxConcurrency
				slots = min(e.chunkSlots(), max)
			}
			switch err := e.Store.Release(ctx, ch, slots, max); {
			case errors.Is(err, store.ErrNoCapacity):
				full[ch.Model] = true
				blocked[c] = true
				continue
			case errors.Is(err, store.ErrChunkDone):
				// Someone else released it; catch up with the batch.
				nb, gerr := e.Store.GetBatch(ctx, c.b.Tenant, c.b.ID)
				if gerr != nil {
					return gerr
				}
				if nb.Released <= c.b.Released {
					blocked[c] = true // not ours to release now
				}
				c.b, c.ok = nb, false
				continue
			case err != nil:
				return err
			}
			if err := e.send(ctx, resources.Work, Message{Type: MsgChunk, Tenant: ch.Tenant, Batch: ch.Batch, Chunk: ch.Index}); err != nil {
				return err
			}
			c.b.Released++
			c.ok = false
		}
		i = j
	}
	return nil
}

// Tick is the dispatcher's periodic sweep: it releases what the window
// expiry or freed capacity allows, finalizes batches whose finalize message
// was lost, and publishes the age of the oldest unfinished batch.
func (e *Engine) Tick(ctx context.Context) error {
	if err := e.sweep(ctx); err != nil {
		return err
	}
	return e.Release(ctx)
}

// sweep is Tick without its release pass.
func (e *Engine) sweep(ctx context.Context) error {
	refs, err := e.Store.ActiveBatches(ctx)
	if err != nil {
		return err
	}
	var oldest int64
	now := e.now()
	for _, r := range refs {
		b, err := e.Store.GetBatch(ctx, r.Tenant, r.ID)
		if err != nil {
			continue
		}
		oldest = max(oldest, now.Unix()-b.CreatedAt)
		if b.ChunksTotal > 0 && b.ChunksDone >= b.ChunksTotal {
			if err := e.send(ctx, resources.Finalize, Message{Type: MsgFinalize, Tenant: b.Tenant, Batch: b.ID}); err != nil {
				return err
			}
		}
		if b.ChunksTotal == 0 && (b.Status == batch.Validating || b.Status == batch.Cancelling) && now.Unix() >= b.PlanLease {
			if err := e.send(ctx, resources.Dispatch, Message{Type: MsgPlan, Tenant: b.Tenant, Batch: b.ID}); err != nil {
				return err
			}
		}
	}
	e.Log.InfoContext(ctx, "tick", "active_batches", len(refs),
		"_aws", map[string]any{"Timestamp": now.UnixMilli(), "CloudWatchMetrics": []any{map[string]any{
			"Namespace": resources.MetricNamespace, "Dimensions": [][]string{{resources.MetricDimension}},
			"Metrics": []any{map[string]string{"Name": resources.MetricOldestBatchAge, "Unit": "Seconds"}},
		}}},
		resources.MetricDimension, e.Set.Prefix, resources.MetricOldestBatchAge, oldest)
	return nil
}
