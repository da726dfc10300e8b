package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/relaybatch/relay/internal/backoff"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// lineID is a stable id for a row's line.
func lineID(batchID string, row int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s:%d", batchID, row))
	return "batch_req_" + hex.EncodeToString(sum[:12])
}

// buildPart turns a chunk's outcomes into its part (output, error and usage
// lines) and the counts its commit adds.
func buildPart(b batch.Batch, c batch.Chunk, outs []outcome, deadLetters int64, now time.Time) (map[string][]byte, store.Commit) {
	p := &part{b: b, now: now, cm: store.Commit{UsageByModel: map[string]store.UsageAgg{}, Day: now.UTC().Format("2006-01-02"), DeadLetters: deadLetters}}
	pattern := make([]byte, len(outs))
	for i, o := range outs {
		pattern[i] = p.add(lineID(b.ID, c.FirstRow+i), o)
	}
	c.Pattern, c.OutBytes, c.ErrBytes = string(pattern), int64(p.out.Len()), int64(p.errb.Len())
	p.cm.Chunk = c
	return map[string][]byte{"out": p.out.Bytes(), "err": p.errb.Bytes(), "usage": p.usage.Bytes()}, p.cm
}

// part is a chunk's part being built, with the counts its commit adds.
type part struct {
	b                batch.Batch
	now              time.Time
	out, errb, usage bytes.Buffer
	cm               store.Commit
}

// add writes a row's line, counting it, and returns its letter in the
// chunk's pattern: 'o' for the output file, 'e' for the error file.
func (p *part) add(id string, o outcome) byte {
	l := p.line(id, o)
	line, err := json.Marshal(l)
	if err != nil {
		// An upstream body that is not JSON cannot go into a line: the
		// row gets an error line instead of an empty one.
		l = Line{ID: l.ID, CustomID: l.CustomID, Error: &LineError{Code: "invalid_upstream_response", Message: "the upstream's answer is not valid JSON"}}
		line, _ = json.Marshal(l)
	}
	w, letter := &p.errb, byte('e')
	if l.Response != nil && l.Response.StatusCode >= 200 && l.Response.StatusCode < 300 {
		w, letter = &p.out, 'o'
		p.cm.Completed++
	} else {
		p.cm.Failed++
	}
	w.Write(line)
	w.WriteByte('\n')
	return letter
}

// line is a row's line; it counts the row's usage, and the rows the engine
// expired or cancelled.
func (p *part) line(id string, o outcome) Line {
	l := Line{ID: id, CustomID: o.customID}
	switch {
	case o.code != "":
		l.Error = &LineError{Code: o.code, Message: o.message}
		if o.expired {
			p.cm.Expired++
		}
		if o.cancelled {
			p.cm.Cancelled++
		}
		// A workflow record that failed after running requests used
		// upstream tokens all the same.
		if o.res.Model != "" && o.res.Usage != (provider.Usage{}) {
			p.addUsage(o)
		}
	case o.res.ErrCode != "":
		l.Error = &LineError{Code: o.res.ErrCode, Message: o.res.ErrMessage}
	default:
		l.Response = &LineResponse{StatusCode: o.res.StatusCode, RequestID: o.res.RequestID, Body: o.res.Body}
		l.Fallback = o.res.Fallback
		p.addUsage(o)
	}
	return l
}

// addUsage counts a row's usage and writes its usage event.
func (p *part) addUsage(o outcome) {
	u := o.res.Usage
	p.cm.Usage.InputTokens += u.InputTokens
	p.cm.Usage.OutputTokens += u.OutputTokens
	p.cm.Usage.TotalTokens += u.TotalTokens
	agg := p.cm.UsageByModel[o.res.Model]
	agg.Requests++
	agg.Input += u.InputTokens
	agg.Output += u.OutputTokens
	agg.Total += u.TotalTokens
	p.cm.UsageByModel[o.res.Model] = agg
	line, _ := json.Marshal(UsageEvent{Source: "batch", Tenant: p.b.Tenant, KeyID: p.b.KeyID, BatchID: p.b.ID, CustomID: o.customID,
		Model: o.res.Model, Fallback: o.res.Fallback, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		TotalTokens: u.TotalTokens, At: p.now.Unix()}) // plain fields, cannot fail
	p.usage.Write(line)
	p.usage.WriteByte('\n')
}

// commitRows writes a run's part under keys of its own and commits the
// chunk. It reports whether this run's commit is the one that took effect.
func (e *Engine) commitRows(ctx context.Context, b batch.Batch, c batch.Chunk, outs []outcome, deadLetters int64) (bool, error) {
	c.Attempt = ids.Secret(6)
	parts, cm := buildPart(b, c, outs, deadLetters, e.now())
	var written []string
	for _, kind := range []string{"out", "err", "usage"} {
		data := parts[kind]
		if len(data) == 0 {
			continue
		}
		k := cm.Chunk.Parts(kind)
		if err := e.Blobs.Put(ctx, k, bytes.NewReader(data), int64(len(data))); err != nil {
			return false, fmt.Errorf("write part %s: %w", k, err)
		}
		written = append(written, k)
	}
	if e.BeforeCommit != nil {
		if err := e.BeforeCommit(cm.Chunk); err != nil {
			return false, err
		}
	}
	return e.commit(ctx, b, cm, written)
}

// commitTries bounds a commit's retries after errors that may be
// transient (a throttle, a timeout whose write may have taken effect).
const commitTries = 8

// commit commits a chunk and claims the chunk its model owes next for the
// same slots, then sends that chunk's work message (and the finalize
// message after the batch's last chunk). A retry after an error repeats
// the same transaction with the same token; when it finds the chunk no
// longer claimed, the chunk's committed attempt says whether the first
// call took effect (ours: carry on) or another run won (delete our parts).
func (e *Engine) commit(ctx context.Context, b batch.Batch, cm store.Commit, written []string) (bool, error) {
	c := cm.Chunk
	cm.ChunksTotal = b.ChunksTotal
	cm.FinalizeDue = e.now().Add(batch.Grace)
	picked := false
	var lastErr error
	for try := 0; try < commitTries; try++ {
		if !picked && c.Slots > 0 {
			next, err := pick(ctx, e.Store, c.Model, c.Slots, c.Shard, e.now().Add(e.lease()))
			if err != nil {
				return false, err
			}
			cm.Next = next
		}
		picked = true
		err := e.Store.CommitChunk(ctx, b.Tenant, cm)
		switch {
		case err == nil:
			e.afterCommit(ctx, b, cm.Next, cm.Last)
			return true, nil
		case errors.Is(err, store.ErrLast):
			cm.Last = true
		case errors.Is(err, store.ErrRaced):
			if err := raced(ctx, e.Store, cm.Next); err != nil {
				return false, err
			}
			picked = false
		case errors.Is(err, store.ErrChunkDone):
			return e.lostCommit(ctx, b, cm, written)
		case ctx.Err() != nil:
			return false, ctx.Err()
		default:
			lastErr = err
			e.Log.WarnContext(ctx, "commit failed; retrying", "batch_id", c.Batch, "chunk", c.Index, "err", err)
			_ = backoff.Sleep(ctx, time.Duration(50*(try+1))*time.Millisecond)
		}
	}
	return false, lastErr
}

// lostCommit handles a commit that found its chunk no longer claimed by
// this run: either its own earlier call took effect, or another run's did.
func (e *Engine) lostCommit(ctx context.Context, b batch.Batch, cm store.Commit, written []string) (bool, error) {
	c, err := e.Store.GetChunk(ctx, cm.Chunk.Batch, cm.Chunk.Index)
	if err != nil {
		return false, err
	}
	if c.State == batch.ChunkDone && c.Attempt == cm.Chunk.Attempt {
		// Ours took effect although its call failed: do what follows it.
		last := cm.Last
		if !last {
			nb, err := e.Store.GetBatch(ctx, b.Tenant, b.ID)
			if err != nil {
				return true, err
			}
			last = nb.ChunksDone >= nb.ChunksTotal && !nb.Status.Terminal()
		}
		var next *store.Claim
		if c.Next != nil {
			next = &store.Claim{Entry: store.Ready{Tenant: c.Next.Tenant, Batch: c.Next.Batch, Next: c.Next.Chunk}, Run: c.Next.Run}
		}
		e.afterCommit(ctx, b, next, last)
		return true, nil
	}
	e.Log.InfoContext(ctx, "chunk committed by another run; this run's part discarded", "batch_id", c.Batch, "chunk", c.Index, "run", cm.Chunk.Run)
	return false, e.Blobs.Delete(ctx, written...)
}

// afterCommit sends the claimed chunk's work message and, after the last
// chunk, the finalize message. A lost send costs time, not work: the
// claimed chunk's lease runs out and the tick re-sends it; the finalize is
// due on the batch and the tick sends it.
func (e *Engine) afterCommit(ctx context.Context, b batch.Batch, next *store.Claim, last bool) {
	if next != nil {
		if err := e.send(ctx, resources.Work, chunkMessage(next.Next())); err != nil {
			e.Log.WarnContext(ctx, "send claimed chunk", "batch_id", next.Entry.Batch, "chunk", next.Entry.Next, "err", err)
		}
	}
	if last {
		if err := e.send(ctx, resources.Finalize, Message{Type: MsgFinalize, Tenant: b.Tenant, Batch: b.ID}); err != nil {
			e.Log.WarnContext(ctx, "send finalize", "batch_id", b.ID, "err", err)
		}
	}
}

// sweepParts deletes the parts of a done chunk that its commit does not
// point to. A run that died between writing its parts and committing
// leaves them; the finalizer removes those it finds, but a duplicate run
// can write them after the batch was finalized. The dead run's message
// always comes back (here, or to the dead-letter handler), so sweeping on
// that delivery removes them.
func (e *Engine) sweepParts(ctx context.Context, c batch.Chunk) error {
	keys, err := e.Blobs.List(ctx, batch.ChunkPartsPrefix(c.Tenant, c.Batch, c.Index))
	if err != nil {
		return fmt.Errorf("list parts of chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	keep := map[string]bool{c.Parts("out"): true, c.Parts("err"): true, c.Parts("usage"): true}
	var stray []string
	for _, k := range keys {
		if !keep[k] {
			stray = append(stray, k)
		}
	}
	return e.Blobs.Delete(ctx, stray...)
}
