package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/fanout"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// chunkRun is one work message being executed.
type chunkRun struct {
	delivery queue.Delivery
	msg      msg.Message
	b        batch.Batch
	c        batch.Chunk
	reqs     []jsonl.Request
	lines    *part.Lines // the rows' lines, set as they end
	refused  string      // Governor.Admit's code (why: reason): the rows do not run
	reason   string
	status   *atomic.Value
	// ctx ends when the invocation must stop or the run lost its lease.
	ctx    context.Context
	cancel context.CancelFunc
	left   atomic.Int32 // rows not finished
	lease  atomic.Int64 // unix ms, as last written: sent upstream (provider.WithRun)
	err    error
	done   chan struct{} // closed once the run committed or failed
}

// Execute is the executor function's SQS handler: the rows of all its
// chunks share one pool of their slots (docs/design.md "Scheduling", rows
// stream), and each chunk commits and is reported on its own.
func (e *Engine) Execute(ctx context.Context, ds []queue.Delivery) ([]string, error) {
	var failed []string
	var runs []*chunkRun
	var native sync.WaitGroup // a native batch's steps run beside the chunks
	nativeFailed := make([]string, len(ds))
	for i, d := range ds {
		var m msg.Message
		err := json.Unmarshal([]byte(d.Body), &m)
		if e.Native != nil && msg.IsNative(m.Type) {
			native.Go(func() { nativeFailed[i] = failedID(d.ID, e.Native.Handle(ctx, m, false)) })
			continue
		}
		if err != nil || m.Type != msg.Chunk {
			e.Log.ErrorContext(ctx, "undecodable work message dropped", "message_id", d.ID)
			continue
		}
		runs = append(runs, &chunkRun{delivery: d, msg: m, done: make(chan struct{})})
	}
	runs, later := aloneFirst(runs)
	if len(later) > 0 {
		// The others go back to the queue as fresh messages of the same
		// runs: returning them would count a receive against each, and
		// make them look suspicious in turn.
		again := make([]any, len(later))
		for i, r := range later {
			again[i] = r.msg
		}
		if err := e.Queue.SendBatch(ctx, resources.Work, again, 0); err != nil {
			e.Log.WarnContext(ctx, "re-send messages that shared an invocation with a suspect", "err", err)
			for _, r := range later {
				failed = append(failed, r.delivery.ID)
			}
		}
	}
	e.runChunks(ctx, runs)
	for _, r := range runs {
		if r.err == nil {
			continue
		}
		e.Log.ErrorContext(ctx, "chunk failed", "batch_id", r.msg.Batch, "chunk", r.msg.Chunk, "run", r.msg.Run,
			"receive_count", r.delivery.ReceiveCount, "err", r.err)
		if e.retrySoon(ctx, r) {
			continue
		}
		failed = append(failed, r.delivery.ID)
	}
	native.Wait()
	for _, id := range nativeFailed {
		if id != "" {
			failed = append(failed, id)
		}
	}
	return failed, nil
}

// maxQuickRetries bounds how often a run goes back to the queue after a
// transient error before its failure is left to its lease.
const maxQuickRetries = 5

// retrySoon sends a run that failed with an error (not ErrStop, not a
// crash) again as the same run after a second or more (docs/design.md
// "Scheduling", transient errors), and reports whether it did.
func (e *Engine) retrySoon(ctx context.Context, r *chunkRun) bool {
	if r.msg.Retries >= maxQuickRetries || errors.Is(r.err, ErrStop) || ctx.Err() != nil {
		return false
	}
	m := r.msg
	m.Retries++
	return e.SendAgain(ctx, m, time.Duration(m.Retries)*time.Second) == nil
}

// SendAgain sends a run's work message again after delay (rounded up to
// whole seconds, so it never comes back early), its lease moved past the
// delay first so the tick does not give the chunk to another run
// meanwhile. The executor's quick retries use it, and internal/wfhost to
// go on with a workflow record in a later invocation.
func (e *Engine) SendAgain(ctx context.Context, m msg.Message, delay time.Duration) error {
	delay = queue.Delay(max(delay, 0))
	if err := e.Store.RenewLease(ctx, m.Batch, m.Chunk, m.Run, e.now().Add(delay+e.lease())); err != nil {
		return err
	}
	return e.Queue.Send(ctx, resources.Work, m, delay)
}

// aloneFirst splits the messages of an invocation into those to run now
// and those to give back: the first one delivered before, or of a chunk
// past its first attempt, runs alone (docs/design.md "Scheduling", poison
// chunks).
func aloneFirst(runs []*chunkRun) (now, later []*chunkRun) {
	if len(runs) < 2 {
		return runs, nil
	}
	for i, r := range runs {
		if r.delivery.ReceiveCount > 1 || r.msg.Attempt > 1 {
			return []*chunkRun{r}, append(append([]*chunkRun{}, runs[:i]...), runs[i+1:]...)
		}
	}
	return runs, nil
}

// runChunks loads, runs and commits runs; each ends with r.err set or nil.
func (e *Engine) runChunks(ctx context.Context, runs []*chunkRun) {
	// Stop early enough to leave a chunk cleanly for its next run.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		margin := max(2*time.Second, time.Until(dl)/10)
		var c2 context.CancelFunc
		runCtx, c2 = context.WithDeadline(runCtx, dl.Add(-margin))
		defer c2()
	}
	statuses := map[string]*atomic.Value{}
	batches := map[string]batch.Batch{} // chunks of one batch share its read
	var pooled []*chunkRun
	var wg sync.WaitGroup
	for _, r := range runs {
		ok, err := e.load(ctx, r, batches)
		if err != nil || !ok {
			r.err = err
			close(r.done)
			continue
		}
		r.ctx, r.cancel = context.WithCancel(runCtx)
		defer r.cancel()
		if statuses[r.b.ID] == nil {
			statuses[r.b.ID] = &atomic.Value{}
			statuses[r.b.ID].Store(r.b.Status)
		}
		r.status = statuses[r.b.ID]
		if isWorkflowChunk(r.c, r.reqs) && r.refused == "" {
			wg.Go(func() {
				defer close(r.done)
				r.err = e.runRecord(ctx, r)
			})
			continue
		}
		if r.c.Slots == 0 && !r.draining(e.now()) {
			r.err = fmt.Errorf("chunk %d of %s holds no slots", r.c.Index, r.c.Batch)
			close(r.done)
			continue
		}
		pooled = append(pooled, r)
	}
	go e.heartbeat(runCtx, runs)
	e.runPool(ctx, pooled)
	wg.Wait()
}

// load reads a run's batch (once per invocation, through batches) and
// chunk and its rows; false means the message is stale (its chunk is done,
// or no longer this run's) and is dropped.
func (e *Engine) load(ctx context.Context, r *chunkRun, batches map[string]batch.Batch) (bool, error) {
	m := r.msg
	b, ok := batches[m.Tenant+"/"+m.Batch]
	if !ok {
		var err error
		b, err = e.Store.GetBatch(ctx, m.Tenant, m.Batch)
		if err != nil {
			return false, gone(err)
		}
		batches[m.Tenant+"/"+m.Batch] = b
	}
	c, err := e.Store.GetChunk(ctx, m.Batch, m.Chunk)
	if err != nil {
		return false, gone(err)
	}
	switch {
	case c.State == batch.ChunkDone:
		// A duplicate, or the message of a run that died: remove what runs
		// that did not commit wrote.
		return false, e.sweepParts(ctx, c)
	case c.State != batch.ChunkClaimed || c.Run != m.Run:
		e.Log.InfoContext(ctx, "stale work message dropped", "batch_id", c.Batch, "chunk", c.Index, "run", m.Run, "current_run", c.Run)
		return false, nil
	case time.UnixMilli(c.Lease).Sub(e.now()) < e.lease()/2:
		// The message waited in the queue for much of its lease: renew it
		// before running, or the tick would give the chunk to another run.
		until := e.now().Add(e.lease())
		switch err := e.Store.RenewLease(ctx, c.Batch, c.Index, c.Run, until); {
		case errors.Is(err, store.ErrLeaseLost):
			return false, nil
		case err != nil:
			return false, err
		}
		c.Lease = until.UnixMilli()
	}
	if b.ChunksTotal == 0 {
		// Claimed in the moment between the plan's ready entries and its
		// record of the input: the next run will find it.
		return false, fmt.Errorf("chunk %d of %s: the batch's plan is not recorded yet", c.Index, c.Batch)
	}
	reqs, err := plan.ReadChunk(ctx, e.Blobs, b, c)
	if errors.Is(err, blob.ErrChanged) {
		return false, e.inputChanged(ctx, b, c)
	}
	if err == nil && e.Govern != nil {
		r.refused, r.reason, err = e.Govern.Admit(ctx, b, c)
	}
	if err != nil {
		return false, err
	}
	r.b, r.c, r.reqs, r.lines = b, c, reqs, part.NewLines(b, c.FirstRow, len(reqs), e.now())
	r.left.Store(int32(len(reqs)))
	r.lease.Store(c.Lease)
	return true, nil
}

// inputChanged ends chunk c, whose input object was replaced after the
// plan, with an input_file_changed line per row, and records the error
// that fails the batch (SECURITY.md "Presigned URLs").
func (e *Engine) inputChanged(ctx context.Context, b batch.Batch, c batch.Chunk) error {
	if _, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, batch.AddError(batch.InputChanged(b.InputFileID))); err != nil {
		return err
	}
	_, err := e.commitRows(ctx, b, c, part.InputChanged(b, c, e.now()), 0)
	return err
}

// draining reports whether the run's rows only get error lines now.
func (r *chunkRun) draining(now time.Time) bool {
	return r.status.Load().(batch.Status).Stopping() || r.b.PastExpiry(now) || r.refused != ""
}

// runPool runs the rows of runs, in order, within the slots the runs hold,
// committing each run once its rows are done.
func (e *Engine) runPool(ctx context.Context, runs []*chunkRun) {
	p := fanout.NewPool()
	for _, r := range runs {
		p.Hold(r.c.Slots)
	}
	var rows, commits sync.WaitGroup
	for _, r := range runs {
		rowDone := func() {
			if r.left.Add(-1) == 0 {
				commits.Go(func() { e.finishRun(ctx, p, r) })
			}
		}
		fanout.Send(p, &rows, r.rows(e, rowDone))
	}
	rows.Wait()
	commits.Wait()
}

// finishRun commits a run whose rows are done, then hands its slots on.
func (e *Engine) finishRun(ctx context.Context, p *fanout.Pool, r *chunkRun) {
	defer close(r.done)
	p.Finish(r.c.Slots)
	defer p.Leave(r.c.Slots)
	if r.ctx.Err() != nil {
		r.err = fmt.Errorf("chunk %d of %s: %w", r.c.Index, r.c.Batch, ErrStop)
		r.lines.Close()
		return
	}
	_, r.err = e.commitRows(ctx, r.b, r.c, r.lines, 0)
}

// rows are the run's rows as fanout.Send sends them, each answer going into
// the run's outcomes; rowDone follows each row's.
func (r *chunkRun) rows(e *Engine, rowDone func()) fanout.Rows {
	bodies := make([]json.RawMessage, len(r.reqs))
	for i, q := range r.reqs {
		bodies[i] = q.Body
	}
	endpoint, fallback := r.b.Endpoint, r.b.Fallback()
	return fanout.Rows{
		Ctx: r.ctx, Bodies: bodies,
		Send: func(ctx context.Context, body json.RawMessage) provider.Result {
			return e.Provider.Do(provider.WithRun(ctx, r.c.Run, func() time.Time { return time.UnixMilli(r.lease.Load()) }), endpoint, body, fallback)
		},
		Settle: func(i int) bool {
			// Row boundary: a cancel or the end of the window stops new rows.
			o := part.Outcome{CustomID: r.reqs[i].CustomID}
			switch {
			case r.status.Load().(batch.Status).Stopping():
				o.Cancel()
			case r.b.PastExpiry(e.now()):
				o.Expire()
			case r.refused != "":
				o.Code, o.Message = r.refused, r.reason
			default:
				return false
			}
			r.lines.Set(i, o)
			rowDone()
			return true
		},
		Done: func(i int, res provider.Result, sent bool) {
			if sent { // else out of time or lease: the run is not committed
				r.lines.Set(i, part.Outcome{CustomID: r.reqs[i].CustomID, Result: res})
			}
			rowDone()
		},
	}
}

// statusRefresh is how often a running chunk re-reads its batch's status to
// notice a cancel: a cached read, never one per row.
const statusRefresh = 3 * time.Second

// heartbeat keeps the runs going while they run: it renews their chunks'
// leases (a run whose lease was taken over stops), keeps their messages
// invisible, and refreshes their batches' statuses.
func (e *Engine) heartbeat(ctx context.Context, runs []*chunkRun) {
	vis := e.Set.Queue(resources.Work).VisibilityTimeout
	leaseT, visT, statusT := time.NewTicker(e.lease()/3), time.NewTicker(vis/3), time.NewTicker(statusRefresh)
	defer leaseT.Stop()
	defer visT.Stop()
	defer statusT.Stop()
	warn := func(what string, r *chunkRun, err error) {
		if err != nil && ctx.Err() == nil {
			e.Log.WarnContext(ctx, what, "batch_id", r.c.Batch, "chunk", r.c.Index, "run", r.c.Run, "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-leaseT.C:
			for _, r := range running(runs) {
				until := e.now().Add(e.lease())
				err := e.Store.RenewLease(ctx, r.c.Batch, r.c.Index, r.c.Run, until)
				if err == nil {
					r.lease.Store(until.UnixMilli())
				}
				if errors.Is(err, store.ErrLeaseLost) {
					r.cancel() // another run has the chunk: this one stops
				}
				warn("renew lease", r, err)
			}
		case <-visT.C:
			for _, r := range runs {
				if !isClosed(r.done) {
					warn("extend visibility", r, e.Queue.ExtendVisibility(ctx, resources.Work, r.delivery.ReceiptHandle, vis))
				}
			}
		case <-statusT.C:
			fresh := map[*atomic.Value]bool{} // runs of one batch share its status
			for _, r := range running(runs) {
				if !fresh[r.status] {
					fresh[r.status] = true
					b, err := e.Store.GetBatch(ctx, r.b.Tenant, r.b.ID)
					if err == nil {
						r.status.Store(b.Status)
					}
					warn("refresh batch status", r, err)
				}
			}
		}
	}
}

// running are the runs that loaded and have not ended.
func running(runs []*chunkRun) []*chunkRun {
	var out []*chunkRun
	for _, r := range runs {
		if r.ctx != nil && r.ctx.Err() == nil && !isClosed(r.done) {
			out = append(out, r)
		}
	}
	return out
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
