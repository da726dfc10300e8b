package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// Line is one line of an output or error file, as OpenAI writes them.
type Line struct {
	ID       string        `json:"id"`
	CustomID string        `json:"custom_id"`
	Response *LineResponse `json:"response"`
	Error    *LineError    `json:"error"`
	Fallback bool          `json:"fallback,omitempty"`
}

// LineResponse is the upstream's HTTP answer.
type LineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// LineError is a row that got no HTTP answer.
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// UsageEvent is one row's usage, written with its chunk's part.
type UsageEvent struct {
	Source       string `json:"source"`
	Tenant       string `json:"tenant"`
	KeyID        string `json:"key_id"`
	BatchID      string `json:"batch_id"`
	CustomID     string `json:"custom_id"`
	Model        string `json:"model"`
	Fallback     bool   `json:"fallback"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	TotalTokens  int64  `json:"total_tokens"`
	At           int64  `json:"at"`
}

// Error codes of rows that got no upstream answer.
const (
	CodeCancelled  = "batch_cancelled"
	CodeExpired    = "batch_expired"
	CodeDeadLetter = "dead_letter"
)

// outcome is one row's result.
type outcome struct {
	customID string
	res      provider.Result
	code     string // set when the row got no HTTP answer
	message  string
	// expired and cancelled are set by the engine only, for a row its
	// batch's window ended or its cancel came before: they are counted
	// (and expired rows make the batch expired). A code a workflow callback
	// chose never is.
	expired, cancelled bool
}

// chunkRun is one work message being executed.
type chunkRun struct {
	rec    events.SQSMessage
	msg    Message
	b      batch.Batch
	c      batch.Chunk
	reqs   []jsonl.Request
	outs   []outcome
	status *atomic.Value
	// ctx ends when the invocation must stop or the run lost its lease.
	ctx    context.Context
	cancel context.CancelFunc
	left   atomic.Int32 // rows not finished
	err    error
	done   chan struct{} // closed once the run committed or failed
}

// Execute is the executor function's SQS handler. The rows of all the
// chunks it is given run through one pool of their slots, so one chunk's
// slow tail does not idle slots while another has rows waiting; each chunk
// commits on its own, hands its slots on, and is reported on its own.
func (e *Engine) Execute(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	var runs []*chunkRun
	for _, rec := range ev.Records {
		var m Message
		if err := json.Unmarshal([]byte(rec.Body), &m); err != nil || m.Type != MsgChunk {
			e.Log.ErrorContext(ctx, "undecodable work message dropped", "message_id", rec.MessageId)
			continue
		}
		runs = append(runs, &chunkRun{rec: rec, msg: m, done: make(chan struct{})})
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
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.rec.MessageId})
			}
		}
	}
	e.runChunks(ctx, runs)
	for _, r := range runs {
		if r.err == nil {
			continue
		}
		e.Log.ErrorContext(ctx, "chunk failed", "batch_id", r.msg.Batch, "chunk", r.msg.Chunk, "run", r.msg.Run,
			"receive_count", r.rec.Attributes["ApproximateReceiveCount"], "err", r.err)
		if e.retrySoon(ctx, r) {
			continue
		}
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.rec.MessageId})
	}
	return resp, nil
}

// maxQuickRetries bounds how often a run goes back to the queue after a
// transient error before its failure is left to its lease.
const maxQuickRetries = 5

// retrySoon gives a run that failed with an error (a throttle, an AWS call
// that timed out: not a crash, which never gets here) another go in a
// couple of seconds, as the same run: its lease moves past the delay and
// its message goes back to the queue, so a transient error spends neither
// a chunk attempt (which the dead-letter path counts) nor a visibility
// timeout. It reports whether it did.
func (e *Engine) retrySoon(ctx context.Context, r *chunkRun) bool {
	if r.msg.Retries >= maxQuickRetries || errors.Is(r.err, errStop) || ctx.Err() != nil {
		return false
	}
	m := r.msg
	m.Retries++
	return e.sendAgain(ctx, m, time.Duration(m.Retries)*time.Second) == nil
}

// sendAgain sends a run's work message again after delay (rounded up to
// whole seconds, so it never comes back early), its lease moved past the
// delay first so the tick does not give the chunk to another run meanwhile.
func (e *Engine) sendAgain(ctx context.Context, m Message, delay time.Duration) error {
	delay = queue.Delay(max(delay, 0))
	if err := e.Store.RenewLease(ctx, m.Batch, m.Chunk, m.Run, e.now().Add(delay+e.lease())); err != nil {
		return err
	}
	return e.Queue.Send(ctx, resources.Work, m, delay)
}

// aloneFirst splits the messages of an invocation into those to run now
// and those to give back. A message delivered before, or a chunk on its
// second attempt or later, may be what killed an earlier invocation: it
// runs alone, so a poison chunk does not spend the attempts of innocent
// chunks that shared its invocation.
func aloneFirst(runs []*chunkRun) (now, later []*chunkRun) {
	if len(runs) < 2 {
		return runs, nil
	}
	for i, r := range runs {
		n, _ := strconv.Atoi(r.rec.Attributes["ApproximateReceiveCount"])
		if n > 1 || r.msg.Attempt > 1 {
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
			statuses[r.b.ID] = e.watchStatus(runCtx, r.b)
		}
		r.status = statuses[r.b.ID]
		if isWorkflowChunk(r.c, r.reqs) {
			wg.Go(func() {
				defer close(r.done)
				r.err = e.runWorkflow(ctx, r.ctx, r.b, r.c, r.reqs[0], r.status)
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
		if errors.Is(err, store.ErrBatchNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		batches[m.Tenant+"/"+m.Batch] = b
	}
	c, err := e.Store.GetChunk(ctx, m.Batch, m.Chunk)
	if errors.Is(err, store.ErrBatchNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
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
		switch err := e.Store.RenewLease(ctx, c.Batch, c.Index, c.Run, e.now().Add(e.lease())); {
		case errors.Is(err, store.ErrLeaseLost):
			return false, nil
		case err != nil:
			return false, err
		}
	}
	if b.ChunksTotal == 0 {
		// Claimed in the moment between the plan's ready entries and its
		// record of the input: the next run will find it.
		return false, fmt.Errorf("chunk %d of %s: the batch's plan is not recorded yet", c.Index, c.Batch)
	}
	data, err := e.readRange(ctx, b.Input, c.Start, c.End)
	if err != nil {
		return false, fmt.Errorf("read chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	reqs, err := jsonl.ParseRequests(data)
	if err != nil {
		return false, fmt.Errorf("parse chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	if len(reqs) != c.Rows {
		return false, fmt.Errorf("chunk %d of %s: %d rows in its range, %d planned", c.Index, c.Batch, len(reqs), c.Rows)
	}
	r.b, r.c, r.reqs, r.outs = b, c, reqs, make([]outcome, len(reqs))
	r.left.Store(int32(len(reqs)))
	return true, nil
}

// draining reports whether the run's rows only get error lines now.
func (r *chunkRun) draining(now time.Time) bool {
	s := r.status.Load().(batch.Status)
	return s == batch.Cancelling || s == batch.Cancelled || r.b.PastExpiry(now)
}

// runPool runs the rows of runs, in order, within the slots the runs hold,
// committing each run once its rows are done.
func (e *Engine) runPool(ctx context.Context, runs []*chunkRun) {
	p := newSlotPool()
	for _, r := range runs {
		p.hold(r.c.Slots)
	}
	var rows, commits sync.WaitGroup
	rowDone := func(r *chunkRun) {
		if r.left.Add(-1) == 0 {
			commits.Go(func() {
				defer close(r.done)
				p.finish(r.c.Slots)
				defer p.leave(r.c.Slots)
				if r.ctx.Err() != nil {
					r.err = fmt.Errorf("chunk %d of %s: %w", r.c.Index, r.c.Batch, errStop)
					return
				}
				_, r.err = e.commitRows(ctx, r.b, r.c, r.outs, 0)
			})
		}
	}
	fallback := func(b batch.Batch) string {
		if b.FallbackModel != nil {
			return *b.FallbackModel
		}
		return ""
	}
	for _, r := range runs {
		for i, req := range r.reqs {
			r.outs[i].customID = req.CustomID
			// Row boundary: a cancel or the end of the window stops new rows.
			switch s := r.status.Load().(batch.Status); {
			case s == batch.Cancelling || s == batch.Cancelled:
				r.outs[i].code, r.outs[i].message, r.outs[i].cancelled = CodeCancelled, "the batch was cancelled before this request ran", true
				rowDone(r)
				continue
			case r.b.PastExpiry(e.now()):
				r.outs[i].code, r.outs[i].message, r.outs[i].expired = CodeExpired, "the batch's completion window ended before this request ran", true
				rowDone(r)
				continue
			}
			if !p.acquire(r.ctx) {
				// Out of time or lease: the rest of the run's rows never
				// start, and the run is not committed.
				r.outs[i].code = "stopped"
				rowDone(r)
				continue
			}
			rows.Go(func() {
				defer p.release()
				r.outs[i].res = e.Provider.Do(r.ctx, r.b.Endpoint, req.Body, fallback(r.b))
				rowDone(r)
			})
		}
	}
	rows.Wait()
	commits.Wait()
}

// slotPool admits rows against the slots of the chunks an invocation
// holds. A chunk whose rows are done is finishing: its slots take no new
// row, and it hands them on only once the rows still in flight fit in the
// slots of the chunks that stay, so the invocation never has more requests
// in flight than the slots it holds, not even for an instant.
type slotPool struct {
	mu                        sync.Mutex
	cond                      *sync.Cond
	held, finishing, inflight int
	stop                      chan struct{}
}

func newSlotPool() *slotPool {
	p := &slotPool{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *slotPool) hold(slots int) {
	p.mu.Lock()
	p.held += slots
	p.mu.Unlock()
}

// acquire waits for a free slot; false when ctx ended first.
func (p *slotPool) acquire(ctx context.Context) bool {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.inflight >= p.held-p.finishing && ctx.Err() == nil {
		p.cond.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	p.inflight++
	return true
}

func (p *slotPool) release() {
	p.mu.Lock()
	p.inflight--
	p.cond.Broadcast()
	p.mu.Unlock()
}

// finish marks a chunk's rows done and waits until its slots are free.
func (p *slotPool) finish(slots int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishing += slots
	for p.inflight > p.held-p.finishing {
		p.cond.Wait()
	}
}

// leave drops a finished chunk's slots (handed on or given back).
func (p *slotPool) leave(slots int) {
	p.mu.Lock()
	p.held -= slots
	p.finishing -= slots
	p.cond.Broadcast()
	p.mu.Unlock()
}

// heartbeat renews the leases of the runs' chunks and keeps their messages
// invisible while they run; a run whose lease was taken over stops.
func (e *Engine) heartbeat(ctx context.Context, runs []*chunkRun) {
	vis := e.Set.Queue(resources.Work).VisibilityTimeout
	leaseT, visT := time.NewTicker(e.lease()/3), time.NewTicker(vis/3)
	defer leaseT.Stop()
	defer visT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-leaseT.C:
			for _, r := range runs {
				if r.ctx == nil || r.ctx.Err() != nil || isClosed(r.done) {
					continue
				}
				err := e.Store.RenewLease(ctx, r.c.Batch, r.c.Index, r.c.Run, e.now().Add(e.lease()))
				if errors.Is(err, store.ErrLeaseLost) {
					e.Log.WarnContext(ctx, "lease lost; run stops", "batch_id", r.c.Batch, "chunk", r.c.Index, "run", r.c.Run)
					r.cancel()
				} else if err != nil && ctx.Err() == nil {
					e.Log.WarnContext(ctx, "renew lease", "err", err)
				}
			}
		case <-visT.C:
			for _, r := range runs {
				if isClosed(r.done) {
					continue
				}
				if err := e.Queue.ExtendVisibility(ctx, resources.Work, r.rec.ReceiptHandle, vis); err != nil && ctx.Err() == nil {
					e.Log.WarnContext(ctx, "extend visibility", "err", err)
				}
			}
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// watchStatus keeps a cached copy of the batch's status fresh, so rows can
// check for a cancel without an AWS request each.
func (e *Engine) watchStatus(ctx context.Context, b batch.Batch) *atomic.Value {
	var v atomic.Value
	v.Store(b.Status)
	every := e.StatusRefresh
	if every <= 0 {
		every = 3 * time.Second
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				nb, err := e.Store.GetBatch(ctx, b.Tenant, b.ID)
				if err != nil {
					if ctx.Err() == nil {
						e.Log.WarnContext(ctx, "refresh batch status", "batch_id", b.ID, "err", err)
					}
					continue
				}
				v.Store(nb.Status)
			}
		}
	}()
	return &v
}

// lineID is a stable id for a row's line.
func lineID(batchID string, row int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s:%d", batchID, row))
	return "batch_req_" + hex.EncodeToString(sum[:12])
}

// buildPart turns a chunk's outcomes into its part (output, error and usage
// lines) and the counts its commit adds.
func buildPart(b batch.Batch, c batch.Chunk, outs []outcome, deadLetters int64, now time.Time) (map[string][]byte, store.Commit) {
	var out, errb, usage bytes.Buffer
	pattern := make([]byte, len(outs))
	cm := store.Commit{UsageByModel: map[string]store.UsageAgg{}, Day: now.UTC().Format("2006-01-02"), DeadLetters: deadLetters}
	enc := func(w *bytes.Buffer, v any) {
		line, _ := json.Marshal(v) // usage events: plain fields, cannot fail
		w.Write(line)
		w.WriteByte('\n')
	}
	addUsage := func(o outcome) {
		u := o.res.Usage
		cm.Usage.InputTokens += u.InputTokens
		cm.Usage.OutputTokens += u.OutputTokens
		cm.Usage.TotalTokens += u.TotalTokens
		agg := cm.UsageByModel[o.res.Model]
		agg.Requests++
		agg.Input += u.InputTokens
		agg.Output += u.OutputTokens
		agg.Total += u.TotalTokens
		cm.UsageByModel[o.res.Model] = agg
		enc(&usage, UsageEvent{Source: "batch", Tenant: b.Tenant, KeyID: b.KeyID, BatchID: b.ID, CustomID: o.customID,
			Model: o.res.Model, Fallback: o.res.Fallback, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			TotalTokens: u.TotalTokens, At: now.Unix()})
	}
	for i, o := range outs {
		l := Line{ID: lineID(b.ID, c.FirstRow+i), CustomID: o.customID}
		switch {
		case o.code != "":
			l.Error = &LineError{Code: o.code, Message: o.message}
			if o.expired {
				cm.Expired++
			}
			if o.cancelled {
				cm.Cancelled++
			}
			// A workflow record that failed after running requests used
			// upstream tokens all the same.
			if o.res.Model != "" && o.res.Usage != (provider.Usage{}) {
				addUsage(o)
			}
		case o.res.ErrCode != "":
			l.Error = &LineError{Code: o.res.ErrCode, Message: o.res.ErrMessage}
		default:
			l.Response = &LineResponse{StatusCode: o.res.StatusCode, RequestID: o.res.RequestID, Body: o.res.Body}
			l.Fallback = o.res.Fallback
			addUsage(o)
		}
		line, err := json.Marshal(l)
		if err != nil {
			// An upstream body that is not JSON cannot go into a line: the
			// row gets an error line instead of an empty one.
			l = Line{ID: l.ID, CustomID: l.CustomID, Error: &LineError{Code: "invalid_upstream_response", Message: "the upstream's answer is not valid JSON"}}
			line, _ = json.Marshal(l)
		}
		w := &errb
		if l.Response != nil && l.Response.StatusCode >= 200 && l.Response.StatusCode < 300 {
			pattern[i], w = 'o', &out
			cm.Completed++
		} else {
			pattern[i] = 'e'
			cm.Failed++
		}
		w.Write(line)
		w.WriteByte('\n')
	}
	c.Pattern, c.OutBytes, c.ErrBytes = string(pattern), int64(out.Len()), int64(errb.Len())
	cm.Chunk = c
	return map[string][]byte{"out": out.Bytes(), "err": errb.Bytes(), "usage": usage.Bytes()}, cm
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
			sleepCtx(ctx, time.Duration(50*(try+1))*time.Millisecond)
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

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
