package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/backoff"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/metrics"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// executorFunction names the executor function (functions/executor) in
// the chunk duration metric's Function dimension: it runs the chunks.
const executorFunction = "executor"

// commitRows writes a run's part under keys of its own and commits the
// chunk. It reports whether this run's commit is the one that took effect.
func (e *Engine) commitRows(ctx context.Context, b batch.Batch, c batch.Chunk, rows *part.Lines, deadLetters int64) (bool, error) {
	return e.commitWith(ctx, b, c, rows, deadLetters, nil, time.Time{})
}

// commitRun is commitRows of run r's rows, which publishes the run's
// chunk duration too.
func (e *Engine) commitRun(ctx context.Context, r *chunkRun) (bool, error) {
	return e.commitWith(ctx, r.b, r.c, r.lines, 0, nil, r.began)
}

// commitWith is commitRows adding fallback, if not nil, as a new chunk of
// rows c no longer holds (docs/design.md "Scheduling", fallback rows).
// began is when the executor took the chunk up (zero: not a run's commit).
func (e *Engine) commitWith(ctx context.Context, b batch.Batch, c batch.Chunk, rows *part.Lines, deadLetters int64, fallback *batch.Chunk, began time.Time) (bool, error) {
	defer rows.Close()
	c.Attempt = ids.Secret(6)
	parts, cm, err := part.Commit(c, rows, deadLetters, e.Now())
	if err != nil {
		return false, err
	}
	if fallback != nil {
		seq, err := e.Store.JoinSeq(ctx, fallback.Model, b.Priority)
		if err != nil {
			// Its place in F's turn only: the entry's key is its own
			// (sched.Ready.Fallback), and failing the commit would run
			// the answered rows again.
			e.Log.WarnContext(ctx, "join the fallback's turn; the rows go first", "batch_id", b.ID, "model", fallback.Model, "err", err)
			seq = 0
		}
		cm.Fallback = &sched.FallbackChunk{Chunk: *fallback,
			Ready: sched.Ready{Model: fallback.Model, Tenant: b.Tenant, Batch: b.ID, Priority: b.Priority, Seq: seq, Fallback: true}}
	}
	// The commit's continuation is read while the parts are written: the
	// two are independent, and a hand-over is as long as its requests in
	// a row (docs/design.md "Chunk size").
	usage, err := readUsage(parts)
	if err != nil {
		return false, err
	}
	picked := make(chan pickResult, 1)
	go func() { picked <- e.pickNext(ctx, cm.Chunk) }()
	written, err := part.Write(ctx, e.Blobs, cm, parts)
	first := <-picked
	if err != nil {
		return false, err
	}
	if first.next != nil {
		// The claim's lease counts from now, not from the pick.
		first.next.Lease = e.Now().Add(e.lease())
	}
	if e.BeforeCommit != nil {
		if err := e.BeforeCommit(cm.Chunk); err != nil {
			return false, err
		}
	}
	ours, err := e.commit(ctx, b, cm, written, &first)
	if ours && err == nil {
		e.publishRows(ctx, b, c, usage, began)
	}
	return ours, err
}

// readUsage is the bytes of a part's usage object, which stays readable
// from its start for part.Write.
func readUsage(parts map[string]part.Object) ([]byte, error) {
	o := parts["usage"]
	if o.Body == nil {
		return nil, nil
	}
	data, err := io.ReadAll(o.Body)
	if err == nil {
		_, err = o.Body.Seek(0, io.SeekStart)
	}
	return data, err
}

// publishRows logs the metrics of committed chunk c's rows (internal/metrics)
// and keeps their audit entry: once, by the run whose commit took effect;
// and the chunk's duration in the executor when it began then (not zero).
func (e *Engine) publishRows(ctx context.Context, b batch.Batch, c batch.Chunk, usage []byte, began time.Time) {
	byModel, err := metrics.Rows(usage)
	if err != nil {
		e.Log.WarnContext(ctx, "metrics of a chunk's rows", "batch_id", b.ID, "err", err)
	}
	now := e.Now()
	var rows, tokens int64
	for _, model := range slices.Sorted(maps.Keys(byModel)) {
		f := byModel[model]
		rows, tokens = rows+f.Completed+f.Failed, tokens+f.Tokens
		if model == "" {
			continue // rows refused before a model was known count for the tenant only
		}
		e.Recent.Add(model, now, *f)
		for _, l := range metrics.ChunkLines(e.Set.Prefix, model, b.ID, now, *f) {
			e.Log.InfoContext(ctx, "model metrics", l...)
		}
	}
	e.Log.InfoContext(ctx, "tenant metrics", metrics.TenantLine(e.Set.Prefix, b.Tenant, b.ID, now, rows, tokens)...)
	if !began.IsZero() {
		e.Log.InfoContext(ctx, "chunk metrics", metrics.ChunkDurationLine(e.Set.Prefix, executorFunction, c.Model, b.ID, now, now.Sub(began))...)
	}
	var completed int64
	for _, f := range byModel {
		completed += f.Completed
	}
	e.Audit.Add(audit.Entry{Time: now.UnixMilli(), Tenant: b.Tenant, KeyID: audit.Executor, OnBehalfOf: b.KeyID, Batch: b.ID,
		Action: audit.RowsRun, Target: fmt.Sprintf("chunk %d", c.Index), Outcome: fmt.Sprintf("%d completed, %d failed", completed, rows-completed)})
}

// flushAudit writes the audit entries this invocation kept, with time of
// its own when ctx's ran out.
func (e *Engine) flushAudit(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := e.Audit.Flush(ctx); err != nil {
		e.Log.WarnContext(ctx, "audit trail: entries kept for the next invocation", "err", err)
	}
}

// pickResult is a commit's continuation as pickNext read it, and its load
// when the invocation will run it.
type pickResult struct {
	next *sched.Claim
	pre  *preload
	err  error
}

// pickNext picks the chunk c's model owes next for c's slots: none for a
// chunk that holds none. When ctx's invocation would run it
// (invocation.wants), the claim takes its fence for the invocation and
// its load begins (docs/design.md "Scheduling", continuations).
func (e *Engine) pickNext(ctx context.Context, c batch.Chunk) pickResult {
	if c.Slots == 0 {
		return pickResult{}
	}
	next, err := pick(ctx, e.Store, c.Model, c.Slots, c.Shard, e.Now().Add(e.lease()), &c)
	if in, ok := ctx.Value(continuationKey{}).(*invocation); ok && next != nil && in.wants(next.Entry.Model) {
		next.Exec = ids.Secret(8)
		return pickResult{next: next, pre: in.preload(next)}
	}
	return pickResult{next: next, err: err}
}

// commitTries bounds a commit's retries after errors that may be
// transient (a throttle, a timeout whose write may have taken effect),
// commitBackoff their waits: about ten seconds in all, so a throttle
// passes rather than the chunk's rows running again.
const (
	commitTries   = 8
	commitBackoff = 100 * time.Millisecond
)

// commit commits a chunk, claiming the chunk its model owes next for the
// same slots, then does what follows (afterCommit). A retry repeats the
// same transaction with the same token (docs/design.md "Conflicts and
// ambiguous writes"). A commit whose outcome is unknown (an error that
// may have followed its effect, store.ErrCommitUnknown) is settled by
// the chunk before any retry (settle), as lostCommit settles one that
// finds the chunk done: a commit that took effect is never reported as
// failed, which would run the chunk's rows again.
//
// first, if given, is the continuation read already (commitRows reads it
// while the parts are written).
func (e *Engine) commit(ctx context.Context, b batch.Batch, cm sched.Commit, written []string, first *pickResult) (bool, error) {
	c := cm.Chunk
	cm.ChunksTotal = b.ChunksTotal
	cm.FinalizeDue = e.Now().Add(batch.Grace)
	// A batch's only chunk commits as its last at once, not after a try
	// refused with ErrLast: a small batch's turnaround is a few such
	// requests in a row. Its total grows only by a split or a fallback of
	// this chunk, which this run would have to commit first.
	cm.Last = b.ChunksTotal == 1 && cm.Fallback == nil
	picked := false
	var pre *preload
	var lastErr error
	for try := 0; try < commitTries; try++ {
		if fb := cm.Fallback; fb != nil {
			// Numbered from the batch's chunks; its claim removes its entry.
			fb.Chunk.Index = b.ChunksTotal
			fb.Ready.Next, fb.Ready.Total = b.ChunksTotal, b.ChunksTotal+1
		}
		if !picked {
			var p pickResult
			if first != nil {
				p, first = *first, nil
			} else {
				p = e.pickNext(ctx, c)
			}
			next, err := p.next, p.err
			pre = p.pre
			if err != nil {
				// The commit goes on without a continuation: its slots go
				// back to the model and the tick claims from there. Failing
				// the commit would run the chunk's answered rows again.
				e.Log.WarnContext(ctx, "pick the continuation; the slots go back to the model", "batch_id", c.Batch, "chunk", c.Index, "err", err)
				next = nil
			}
			cm.Next = next
		}
		picked = true
		if cm.Next == nil || cm.Next.Exec == "" {
			// The slots leave the invocation with this commit.
			slotsOf(ctx).free()
		}
		err := e.Store.CommitChunk(ctx, b.Tenant, cm)
		switch {
		case err == nil:
			e.afterCommit(ctx, b, cm.Next, pre, cm.Last, cm.Fallback)
			return true, nil
		case errors.Is(err, store.ErrLast):
			cm.Last, lastErr = true, err
		case errors.Is(err, store.ErrRaced):
			if rerr := raced(ctx, e.Store, cm.Next); rerr != nil {
				e.Log.WarnContext(ctx, "step past a raced ready entry", "batch_id", c.Batch, "chunk", c.Index, "err", rerr)
			}
			picked, lastErr = false, err
		case errors.Is(err, store.ErrRenumber):
			// Another commit added a chunk meanwhile: number it anew.
			lastErr = err
			if nb, gerr := e.Store.GetBatch(ctx, b.Tenant, b.ID); gerr == nil {
				b = nb
			} else {
				lastErr = gerr
				_ = backoff.Sleep(ctx, backoff.Upper(backoff.Exponential(try+1, commitBackoff, 50*commitBackoff)))
			}
			cm.ChunksTotal = b.ChunksTotal
		case errors.Is(err, store.ErrChunkDone):
			return e.lostCommit(ctx, b, cm, written)
		case ctx.Err() != nil:
			return false, ctx.Err()
		default:
			if ours, done, err := e.settle(ctx, b, cm, written); done {
				return ours, err
			}
			lastErr = err
			e.Log.WarnContext(ctx, "commit failed; retrying", "batch_id", c.Batch, "chunk", c.Index, "run", c.Run, "err", err)
			_ = backoff.Sleep(ctx, backoff.Upper(backoff.Exponential(try+1, commitBackoff, 50*commitBackoff)))
		}
	}
	// Out of tries: an error, never (false, nil), which would leave the
	// chunk claimed with nothing to run it but its lease's end.
	return false, fmt.Errorf("commit chunk %d of %s: out of tries: %w", c.Index, c.Batch, lastErr)
}

// settle reads the chunk after a commit that failed with an error: done
// says the chunk is no longer this run's to commit (lostCommit then says
// whether the commit that took effect was ours); otherwise the commit did
// not take effect yet, or the chunk could not be read, and it is retried.
func (e *Engine) settle(ctx context.Context, b batch.Batch, cm sched.Commit, written []string) (ours, done bool, err error) {
	c, err := e.Store.GetChunk(ctx, cm.Chunk.Batch, cm.Chunk.Index)
	if err != nil || (c.State == batch.ChunkClaimed && c.Run == cm.Chunk.Run) {
		return false, false, nil
	}
	ours, err = e.settleLost(ctx, b, cm, written, c)
	return ours, true, err
}

// lostCommit handles a commit that found its chunk no longer claimed by
// this run: either its own earlier call took effect, or another run's did.
func (e *Engine) lostCommit(ctx context.Context, b batch.Batch, cm sched.Commit, written []string) (bool, error) {
	c, err := e.Store.GetChunk(ctx, cm.Chunk.Batch, cm.Chunk.Index)
	if err != nil {
		return false, err
	}
	return e.settleLost(ctx, b, cm, written, c)
}

// settleLost is lostCommit once the chunk c is read.
func (e *Engine) settleLost(ctx context.Context, b batch.Batch, cm sched.Commit, written []string, c batch.Chunk) (bool, error) {
	if c.State == batch.ChunkDone && c.Attempt == cm.Chunk.Attempt {
		// Ours took effect although its call failed: do what follows it.
		last := cm.Last
		if !last {
			// A failed read still hands the claim on: the claimed chunk
			// would otherwise wait for its lease's end. A finalize it
			// misses is due on the batch for the tick.
			nb, err := e.Store.GetBatch(ctx, b.Tenant, b.ID)
			if err != nil {
				e.Log.WarnContext(ctx, "read the batch after a commit that took effect", "batch_id", b.ID, "chunk", c.Index, "err", err)
			}
			last = err == nil && nb.ChunksDone >= nb.ChunksTotal && !nb.Status.Terminal()
		}
		var next *sched.Claim
		switch {
		case c.Next != nil && cm.Next != nil && c.Next.Run == cm.Next.Run:
			// The claim as made: with the fence it may have taken.
			next = cm.Next
		case c.Next != nil:
			next = &sched.Claim{Entry: sched.Ready{Model: c.Model, Tenant: c.Next.Tenant, Batch: c.Next.Batch, Next: c.Next.Chunk}, Run: c.Next.Run}
		}
		e.afterCommit(ctx, b, next, nil, last, cm.Fallback)
		return true, nil
	}
	e.Log.InfoContext(ctx, "chunk committed by another run; this run's part discarded", "batch_id", c.Batch, "chunk", c.Index, "run", cm.Chunk.Run)
	return false, e.Blobs.Delete(ctx, written...)
}

// continuationKey is the context key of the invocation that may run a
// claimed chunk as the committing run's continuation (withContinuation).
type continuationKey struct{}

// withContinuation is ctx under which a commit's claim is offered to
// invocation in: its fence taken for it and its load begun when it will
// run it (pickNext), and run by it or sent as its work message
// (afterCommit).
func withContinuation(ctx context.Context, in *invocation) context.Context {
	return context.WithValue(ctx, continuationKey{}, in)
}

// afterCommit hands the claimed chunk on (to the invocation's continuation
// when ctx offers one that takes it, with its load pre and the committing
// run's slots, else as its work message), claims for a chunk of fallback rows the commit added
// (startFallback) and, after the last chunk, sends the finalize message. A
// lost send costs time, not work: the claimed chunk's lease runs out and
// the tick re-sends it; the finalize is due on the batch and the tick
// sends it.
func (e *Engine) afterCommit(ctx context.Context, b batch.Batch, next *sched.Claim, pre *preload, last bool, fallback *sched.FallbackChunk) {
	in, _ := ctx.Value(continuationKey{}).(*invocation)
	held := slotsOf(ctx)
	continued := next != nil && in != nil && in.continueWith(next, pre, held)
	if !continued {
		// The committing run's slots leave the invocation: out of use
		// before another invocation can start on them (heldSlots).
		held.free()
	}
	if next != nil && !continued {
		m := msg.ForChunk(next.Next())
		var err error
		if next.Exec != "" {
			// The claim took the fence for a continuation that will not
			// run: it goes with the message (SendAgain hands it over).
			err = e.SendAgain(withExec(ctx, next.Exec), m, 0)
		} else {
			err = e.send(ctx, resources.Work, m)
		}
		if err != nil {
			e.Log.WarnContext(ctx, "send claimed chunk", "batch_id", next.Entry.Batch, "chunk", next.Entry.Next, "err", err)
		}
	}
	if fallback != nil {
		e.startFallback(ctx, fallback.Chunk.Model)
	}
	if last {
		if err := e.send(ctx, resources.Finalize, msg.Message{Type: msg.Finalize, Tenant: b.Tenant, Batch: b.ID}); err != nil {
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
	keep := map[string]bool{c.Parts("out"): true, c.Parts("err"): true, c.Parts("usage"): true}
	return blob.DeleteExcept(ctx, e.Blobs, batch.ChunkPartsPrefix(c.Tenant, c.Batch, c.Index), keep)
}

// startFallback claims from the free capacity of model, whose chunk of
// fallback rows a commit added: an idle fallback model would otherwise
// wait for the tick (a minute as deployed). A failure is left to the tick.
func (e *Engine) startFallback(ctx context.Context, model string) {
	if e.Models == nil {
		return
	}
	if err := e.start(ctx, model); err != nil {
		e.Log.WarnContext(ctx, "claim for fallback rows; the tick claims them", "model", model, "err", err)
	}
}
