package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaybatch/relay/internal/backoff"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/fanout"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/quote"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
)

// chunkRun is one work message being executed.
type chunkRun struct {
	// began is when this invocation took the run up: its chunk's duration
	// (metrics.ChunkDuration) counts from it.
	began    time.Time
	delivery msg.Delivery
	msg      msg.Message
	b        batch.Batch
	c        batch.Chunk
	reqs     []jsonl.Request
	lines    *part.Lines // the rows' lines, set as they end
	refused  string      // Governor.Admit's code (why: reason): the rows do not run
	reason   string
	route    provider.Route // what the rows may run and fall back on
	status   *atomic.Value
	// exec is this execution's id on the chunk's fence, once taken
	// (docs/design.md "Scheduling", fence); ended says the fence needs no
	// release: the run committed, or handed over to its next delivery.
	exec  string
	ended bool
	// claim is a continuation's claim, which took its fence (exec), and
	// pre its load begun beside the commit (invocation.preload).
	claim *sched.Claim
	pre   *preload
	// lease is the run's last renewed lease expiry (unix milliseconds).
	lease atomic.Int64
	// ctx ends when the invocation must stop or the run's lease ends
	// (keepLease).
	ctx    context.Context
	cancel context.CancelFunc
	// stop ends the run before its lease ends or when the chunk is no
	// longer its own, and with it its model's other runs in the
	// invocation (invocation.stopModel).
	stop func()
	// slots are the run's slots in the invocation's pool, from its start.
	slots *heldSlots
	left  atomic.Int32 // rows not finished
	// deferred are the rows owed their fallback, fallbackTo the model:
	// one, as a chunk's rows share their model (docs/design.md
	// "Scheduling", fallback rows); deferredAttempts the most upstream
	// attempts one of them made on its own model (batch.Chunk.PriorAttempts).
	deferMu          sync.Mutex
	deferred         []bool
	fallbackTo       string
	deferredAttempts int
	// moveTo is the fallback all the run's rows are deferred to, unsent,
	// for the batch's complete_by (deadlineFallback); "" for none.
	moveTo string
	// progress guards r.c's reported counts, which the heartbeat moves
	// (reportProgress) until the run commits (committing).
	progress   sync.Mutex
	committing bool
	loaded     time.Time // a run younger than statusRefresh reports nothing
	// reportUnknown says a report failed and the chunk's counts could not
	// be read after it: the commit reads them first.
	reportUnknown bool
	err           error
	done          chan struct{} // closed once the run committed or failed
}

// Execute is the executor function's SQS handler: the rows of all its
// chunks share one pool of their slots, one account per model
// (docs/design.md "Scheduling", rows stream, per-model slots), each run
// executes only while it holds its fence and its lease (fence, lease
// rule), and each chunk commits and is reported on its own.
func (e *Engine) Execute(ctx context.Context, ds []msg.Delivery) ([]string, error) {
	defer e.flushAudit(ctx)
	var failed []string
	var runs []*chunkRun
	var native sync.WaitGroup // a native batch's steps run beside the chunks
	nativeFailed := make([]string, len(ds))
	for i, d := range ds {
		var m msg.Message
		err := json.Unmarshal([]byte(d.Body), &m)
		if msg.IsNative(m.Type) {
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
	runs = e.runChunks(ctx, runs)
	for _, r := range runs {
		if r.err == nil {
			continue
		}
		e.Log.ErrorContext(ctx, "chunk failed", "batch_id", r.msg.Batch, "chunk", r.msg.Chunk, "run", r.msg.Run,
			"receive_count", r.delivery.ReceiveCount, "err", r.err)
		switch {
		case e.retrySoon(ctx, r):
		case r.delivery.ID == "":
			// A continuation has no message to fail: it gets one, with
			// its fence handed over, or waits for its lease to end.
			r.ended = e.SendAgain(withExec(ctx, r.exec), r.msg, 0) == nil
		default:
			failed = append(failed, r.delivery.ID)
		}
	}
	e.releaseFences(ctx, runs)
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
	r.ended = e.SendAgain(withExec(ctx, r.exec), m, time.Duration(m.Retries)*time.Second) == nil
	return r.ended
}

// releaseFences releases the fence of every execution that took one and
// ended without a commit or a hand-over, so the run's next delivery (SQS
// delivering the failed message again) can take it at once.
func (e *Engine) releaseFences(ctx context.Context, runs []*chunkRun) {
	for _, r := range runs {
		if r.exec == "" || r.ended {
			continue
		}
		if err := e.Store.ReleaseFence(ctx, r.msg.Batch, r.msg.Chunk, r.exec); err != nil {
			e.Log.WarnContext(ctx, "release the execution fence", "batch_id", r.msg.Batch, "chunk", r.msg.Chunk, "run", r.msg.Run, "err", err)
		}
	}
}

// execKey is the context key of the execution a SendAgain ends.
type execKey struct{}

// withExec is ctx naming execution exec, whose fence SendAgain hands over.
func withExec(ctx context.Context, exec string) context.Context {
	if exec == "" {
		return ctx
	}
	return context.WithValue(ctx, execKey{}, exec)
}

// SendAgain sends a run's work message again after delay (rounded up to
// whole seconds, so it never comes back early), its lease moved past the
// delay first so the tick does not give the chunk to another run
// meanwhile. The executor's quick retries use it, and internal/wfhost to
// go on with a workflow record in a later invocation. Called within an
// execution (ctx from withExec), it hands the execution's fence over in
// the same write, so the message's next delivery can take it.
//
// A move that failed may have taken effect, and the message is all that
// runs the chunk before its lease ends: it is tried again (fenceTries),
// which the same move's condition accepts, as takeFence does.
func (e *Engine) SendAgain(ctx context.Context, m msg.Message, delay time.Duration) error {
	delay = queue.Delay(max(delay, 0))
	until := e.Now().Add(delay + e.lease())
	exec, fenced := ctx.Value(execKey{}).(string)
	var err error
	for try := range fenceTries {
		if try > 0 && backoff.Sleep(ctx, backoff.Upper(backoff.Exponential(try, fenceBackoff, 4*fenceBackoff))) != nil {
			break
		}
		if fenced {
			err = e.Store.HandOver(ctx, m.Batch, m.Chunk, m.Run, exec, until)
		} else {
			err = e.Store.RenewLease(ctx, m.Batch, m.Chunk, m.Run, until)
		}
		if err == nil || errors.Is(err, store.ErrLeaseLost) {
			break
		}
	}
	if err != nil {
		return err
	}
	return e.Queue.Send(ctx, resources.Work, m, delay)
}

// suspect reports whether run r is past its first delivery or attempt: it
// may be a poison chunk.
func suspect(r *chunkRun) bool { return r.delivery.ReceiveCount > 1 || r.msg.Attempt > 1 }

// aloneFirst splits the messages of an invocation into those to run now
// and those to give back: the first one delivered before, or of a chunk
// past its first attempt, runs alone (docs/design.md "Scheduling", poison
// chunks).
func aloneFirst(runs []*chunkRun) (now, later []*chunkRun) {
	if len(runs) < 2 {
		return runs, nil
	}
	for i, r := range runs {
		if suspect(r) {
			return []*chunkRun{r}, append(append([]*chunkRun{}, runs[:i]...), runs[i+1:]...)
		}
	}
	return runs, nil
}

// runChunks loads, runs and commits runs, and the continuations their
// commits claim while the invocation has time (docs/design.md
// "Scheduling", continuations); it returns them all, each ended with r.err
// set or nil.
func (e *Engine) runChunks(ctx context.Context, runs []*chunkRun) []*chunkRun {
	// Stop early enough to leave a chunk cleanly for its next run.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		margin := max(2*time.Second, time.Until(dl)/10)
		var c2 context.CancelFunc
		runCtx, c2 = context.WithDeadline(runCtx, dl.Add(-margin))
		defer c2()
	}
	in := &invocation{e: e, ctx: ctx, runCtx: runCtx, pool: fanout.NewPool(),
		batches: map[string]*cachedBatch{}, statuses: map[string]*atomic.Value{}, sending: map[string]chan struct{}{},
		stopped: map[string]bool{}, suspect: slices.ContainsFunc(runs, suspect)}
	// The runs load side by side (each load is a few round trips: its
	// fence, its batch, its input's range; a run's slots join the pool only
	// once it is loaded) and start in the order of their messages.
	var loads sync.WaitGroup
	var before <-chan struct{}
	for _, r := range runs {
		after, turn := before, make(chan struct{})
		loads.Go(func() {
			defer close(turn)
			in.start(r, after)
		})
		before = turn
	}
	loads.Wait()
	go e.heartbeat(runCtx, in)
	in.work.Wait()
	all := in.all()
	for _, r := range all {
		if r.cancel != nil {
			r.cancel()
		}
	}
	in.keepers.Wait()
	return all
}

// invocation is one Execute call's runs: those its deliveries named and
// the continuations their commits claimed. The rows of all of them share
// one pool of their slots, one account per model (docs/design.md
// "Scheduling", per-model slots); each model's runs send their rows in
// the order they started.
type invocation struct {
	e       *Engine
	ctx     context.Context // the handler's
	runCtx  context.Context // ends early enough to leave a chunk cleanly
	pool    *fanout.Pool
	work    sync.WaitGroup // loads, rows, commits and records
	keepers sync.WaitGroup // keepLease of each run

	mu       sync.Mutex
	runs     []*chunkRun
	batches  map[string]*cachedBatch  // runs of one batch share its read, for statusRefresh
	statuses map[string]*atomic.Value // and its status
	sending  map[string]chan struct{} // per model: closed once the rows of its last run are all sent
	stopped  map[string]bool          // models stopped by a run's lease (stopModel)
	suspect  bool                     // a run past its first delivery or attempt runs here (aloneFirst)
}

// cachedBatch is a batch as read for the invocation's runs, once done is
// closed.
type cachedBatch struct {
	b    batch.Batch
	err  error
	read time.Time
	done chan struct{}
}

func (in *invocation) add(r *chunkRun) {
	in.mu.Lock()
	in.runs = append(in.runs, r)
	in.mu.Unlock()
}

func (in *invocation) all() []*chunkRun {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.runs)
}

// start loads run r and, once the run before it started (before closed;
// nil for none), sets it going: a workflow record on its own, a chunk's
// rows on the pool after the model's runs started before it. r joins the
// invocation's runs (which the heartbeat reads) once loaded.
func (in *invocation) start(r *chunkRun, before <-chan struct{}) {
	e := in.e
	r.began = e.Now()
	ctx, inherited := in.ctx, r.slots != nil
	var guard *atomic.Int32 // an inherited run's: guardLoading, guardStarted or guardStopped
	if inherited {
		// A continuation on its committing run's slots, which rows of its
		// model may be using (heldSlots): a commit at its load (its input
		// gone) frees them first, and until its lease is kept
		// (keepLease) its lease less the margin stops the model while
		// they are in use.
		ctx = withSlots(ctx, r.slots)
		loading := make(chan struct{})
		defer close(loading)
		guard = &atomic.Int32{}
		go in.guardSlots(r, r.slots, guard, loading)
	}
	ok, err := e.load(ctx, r, in.batch)
	if before != nil {
		<-before
	}
	if err == nil && ok && time.UnixMilli(r.lease.Load()).Sub(e.Now()) < e.lease()-e.lease()/3 {
		// Its lease is a third of a lease old (a slow load, or a wait for
		// the run before it to start): its fence is taken again, as a
		// continuation's (load), or it would start on a lease near its
		// end, or on a chunk taken over meanwhile, which the take finds
		// stale.
		_, ok, err = e.takeFence(ctx, r)
	}
	if err == nil && ok && inherited && isWorkflowChunk(r.c, r.reqs) {
		// A record's steps send on a pool of their own: slots it took
		// over leave this one first, while the guard watches them.
		r.slots.leave()
		r.slots = nil
	}
	if err == nil && ok && guard != nil && !guard.CompareAndSwap(guardLoading, guardStarted) {
		err = errLeaseAtLoad
	}
	if err != nil || !ok {
		r.slots.leave()
		r.err = err
		close(r.done)
		in.add(r)
		return
	}
	r.ctx, r.cancel = context.WithCancel(withExec(in.runCtx, r.exec))
	r.stop = func() { in.stopRun(r) }
	if isWorkflowChunk(r.c, r.reqs) {
		// A record's steps send on a pool of their own: slots it took
		// over leave this one first.
		r.slots.leave()
		r.slots = nil
	} else if !inherited {
		r.slots = &heldSlots{pool: in.pool, model: r.c.Model, n: r.c.Slots}
	}
	in.keepers.Go(func() { e.keepLease(r) })
	in.mu.Lock()
	// It joins the runs a stop of its model cuts in the step that checks
	// for one: a stop in between would miss it (stopModel).
	in.runs = append(in.runs, r)
	if in.stopped[r.c.Model] {
		r.cancel() // it would run on a stopped run's slots
	}
	if in.statuses[r.b.ID] == nil {
		in.statuses[r.b.ID] = &atomic.Value{}
		in.statuses[r.b.ID].Store(r.b.Status)
	}
	r.status = in.statuses[r.b.ID]
	in.mu.Unlock()
	if isWorkflowChunk(r.c, r.reqs) {
		// A refused record runs too, to its error line with what its steps
		// spent: its host asks the governor before every event.
		in.work.Go(func() {
			defer close(r.done)
			r.err = e.runRecord(withExec(in.ctx, r.exec), r)
		})
		return
	}
	if r.c.Slots == 0 && !r.c.NoCall && !r.draining(e.Now()) {
		r.err = fmt.Errorf("chunk %d of %s holds no slots", r.c.Index, r.c.Batch)
		close(r.done)
		return
	}
	if !inherited {
		in.pool.Hold(r.c.Model, r.c.Slots)
	}
	before, sent := in.sendAfter(r.c)
	in.work.Go(func() {
		defer close(sent)
		if before != nil {
			<-before
		}
		rowDone := func() {
			if r.left.Add(-1) == 0 {
				in.work.Go(func() { e.finishRun(withContinuation(in.ctx, in), r) })
			}
		}
		fanout.Send(in.pool, &in.work, r.rows(e, rowDone))
	})
}

// The states of an inherited run's start (guardSlots).
const (
	guardLoading int32 = iota
	guardStarted       // keepLease guards the run's lease
	guardStopped       // its lease ended in its load: it does not start
)

// errLeaseAtLoad is a continuation whose lease, less the margin, ended
// while it loaded: it does not start on its inherited slots (guardSlots).
var errLeaseAtLoad = errors.New("the run's lease ended while it loaded")

// guardSlots guards the slots h continuation r inherited while it loads,
// until it starts (state guardStarted) or loading is closed. At its lease
// less the margin (read again when that time comes: the load's fence take
// may have moved it) a takeover may hand the slots on: the run will not
// start (guardStopped), rows of the model still on them stop with their
// model, and the slots go out of use, so no row takes them after.
func (in *invocation) guardSlots(r *chunkRun, h *heldSlots, state *atomic.Int32, loading <-chan struct{}) {
	e := in.e
	for {
		left := time.UnixMilli(r.lease.Load()).Add(-e.skew()).Sub(e.Now())
		if left <= 0 {
			break
		}
		t := time.NewTimer(left)
		select {
		case <-loading:
			t.Stop()
			return
		case <-t.C:
		}
	}
	if !state.CompareAndSwap(guardLoading, guardStopped) {
		return
	}
	if h.inUse() {
		in.stopModel(h.model)
	}
	h.free()
}

// batch is the batch of a run's message, read once per statusRefresh in
// an invocation: a chain of continuations reads it afresh (its chunk count
// grows with splits). Runs loading side by side wait for one read; those
// that waited on a read that failed read for themselves.
func (in *invocation) batch(ctx context.Context, tenant, id string) (batch.Batch, error) {
	e, k := in.e, tenant+"/"+id
	in.mu.Lock()
	c := in.batches[k]
	if c == nil || isClosed(c.done) && (c.err != nil || e.Now().Sub(c.read) >= statusRefresh) {
		c = &cachedBatch{done: make(chan struct{})}
		in.batches[k] = c
		in.mu.Unlock()
		c.b, c.err = e.Store.GetBatch(ctx, tenant, id)
		c.read = e.Now()
		close(c.done)
		return c.b, c.err
	}
	in.mu.Unlock()
	<-c.done
	if c.err != nil {
		// Its failure is the run's that read: each run tries for itself,
		// as when the runs loaded one after another.
		return e.Store.GetBatch(ctx, tenant, id)
	}
	return c.b, nil
}

// stopRun ends run r before its lease ends, or when its chunk is no
// longer its, and with it its model's other runs here (stopModel) while
// they may have rows in flight on its slots. A committing run's rows are
// done and its slots out of the pool's use (Pool.Finish) unless it still
// lends them (heldSlots); a run holding
// none (a chunk that runs alone, a drain's) lends the pool nothing: a
// takeover of its chunk hands on no slot, and cutting the model's runs
// would only split them.
func (in *invocation) stopRun(r *chunkRun) {
	r.cancel()
	r.progress.Lock()
	committing := r.committing
	r.progress.Unlock()
	if r.c.Slots > 0 && (!committing || r.slots.lent()) {
		in.stopModel(r.c.Model)
	}
}

// stopModel ends every run of model in the invocation, and those that
// start after: a run stopped by its lease (or that lost its chunk) hands its
// slots to the run that takes the chunk over, in another invocation, while
// rows of its model's other runs here may be in flight on them (the pool
// keeps one account per model). Cutting them keeps max_concurrency
// (docs/design.md "Scheduling", lease rule); each commits what it
// answered (split).
func (in *invocation) stopModel(model string) {
	in.mu.Lock()
	in.stopped[model] = true
	runs := slices.Clone(in.runs)
	in.mu.Unlock()
	for _, r := range runs {
		if r.cancel != nil && r.c.Model == model {
			r.cancel()
		}
	}
}

// wants reports whether a chunk of model claimed now would run in this
// invocation as a continuation (continueWith), which the invocation then
// starts loading before its claim commits (preload).
func (in *invocation) wants(model string) bool {
	dl, ok := in.runCtx.Deadline()
	if in.e.NoContinuations || in.runCtx.Err() != nil || (ok && time.Until(dl) < in.e.lease()/2) {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	// A suspect's crash would cost the continuation an attempt; a stopped
	// model's slots may be in use upstream still.
	return !in.suspect && !in.stopped[model]
}

// continueWith runs the chunk a commit claimed in this invocation, on the
// committing run's slots held (heldSlots.keep) when the claim took its
// fence here, instead of sending its work message, while the invocation
// has at least half a lease left (docs/design.md "Scheduling",
// continuations): the hand-over
// is the commit alone when the claim took the run's fence for this
// invocation (sched.Claim.Exec) and its load began beside the commit
// (pre), without a message's send, receive and invocation. Nothing is lost
// if the invocation dies: the claimed chunk's lease ends and the tick
// takes it over, as after a lost send.
func (in *invocation) continueWith(next *sched.Claim, pre *preload, held *heldSlots) bool {
	if !in.wants(next.Entry.Model) {
		return false
	}
	r := &chunkRun{msg: msg.ForChunk(next.Next()), done: make(chan struct{}), exec: next.Exec}
	if next.Exec != "" {
		r.claim, r.pre = next, pre
		r.slots = held.keep()
		r.lease.Store(next.Lease.UnixMilli())
	}
	if r.slots == nil {
		// Out of use before the continuation holds slots of its own.
		held.free()
	}
	in.work.Go(func() { in.start(r, nil) })
	return true
}

// preload is a continuation's load, begun while the commit that claims
// its chunk is written: the chunk as read before the claim, its batch and
// its rows. A pending chunk's rows and range never change; the claim sets
// the rest (preload.claimed).
type preload struct {
	done chan struct{}
	b    batch.Batch
	c    batch.Chunk
	reqs []jsonl.Request
	err  error
}

// preload begins reading the chunk next claims, its batch and its rows.
func (in *invocation) preload(next *sched.Claim) *preload {
	p := &preload{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		e := in.e
		p.c, p.err = e.Store.GetChunk(in.ctx, next.Entry.Batch, next.Entry.Next)
		// Read before the claim (pending) or after it (claimed by its run).
		mine := p.c.State == batch.ChunkPending || (p.c.State == batch.ChunkClaimed && p.c.Run == next.Run)
		if p.err == nil && (!mine || p.c.Model != next.Entry.Model) {
			p.err = fmt.Errorf("chunk %d of %s is %s, of %s", p.c.Index, p.c.Batch, p.c.State, p.c.Model)
		}
		if p.err == nil {
			p.b, p.err = in.batch(in.ctx, next.Entry.Tenant, next.Entry.Batch)
		}
		if p.err == nil && p.b.ChunksTotal == 0 {
			p.err = fmt.Errorf("chunk %d of %s: the batch's plan is not recorded yet", p.c.Index, p.c.Batch)
		}
		if p.err == nil {
			p.reqs, p.err = plan.ReadChunk(in.ctx, e.Blobs, p.b, p.c)
		}
	}()
	return p
}

// claimed is the preloaded chunk as claim c made it (read before the
// claim, or after it): nil when the preload failed.
func (p *preload) claimed(c *sched.Claim) *batch.Chunk {
	if p == nil {
		return nil
	}
	<-p.done
	if p.err != nil {
		return nil
	}
	ch := p.c
	if ch.State == batch.ChunkClaimed {
		return &ch
	}
	ch.State, ch.Run, ch.Lease, ch.Slots, ch.Shard, ch.Attempts = batch.ChunkClaimed, c.Run, c.Lease.UnixMilli(), c.Slots, c.Shard, ch.Attempts+1
	return &ch
}

// load reads a run's batch (through readBatch, which the invocation's runs
// share) and chunk and its rows, taking the run's execution fence; false means the
// message is stale (its chunk is done, or no longer this run's) or a
// duplicate (another execution runs it), and is dropped.
func (e *Engine) load(ctx context.Context, r *chunkRun, readBatch func(ctx context.Context, tenant, id string) (batch.Batch, error)) (bool, error) {
	if c := r.pre.claimed(r.claim); c != nil && time.UnixMilli(c.Lease).Sub(e.Now()) >= e.lease()-e.lease()/3 {
		// A continuation whose claim took its fence, loaded beside the
		// commit. A claim's lease counts from before its commit: one
		// older than a third of a lease (a slow commit) is moved by a
		// fence take, or the run would stop before its first renewal
		// (keepLease).
		r.lease.Store(c.Lease)
		return e.admit(ctx, r, r.pre.b, *c, r.pre.reqs)
	}
	m := r.msg
	// The batch is read beside the fence's take: a run's start is as long
	// as its requests in a row (docs/design.md "Chunk size").
	var b batch.Batch
	read := make(chan error, 1)
	go func() {
		var err error
		b, err = readBatch(ctx, m.Tenant, m.Batch)
		read <- err
	}()
	c, ok, err := e.takeFence(ctx, r)
	rerr := <-read
	if err != nil || !ok {
		return false, err
	}
	if rerr != nil {
		// The fence is released with the run's end.
		return false, gone(rerr)
	}
	if b.ChunksTotal == 0 {
		// Claimed in the moment between the plan's ready entries and its
		// record of the input: the next run will find it.
		return false, fmt.Errorf("chunk %d of %s: the batch's plan is not recorded yet", c.Index, c.Batch)
	}
	reqs, err := plan.ReadChunk(ctx, e.Blobs, b, c)
	if errors.Is(err, blob.ErrChanged) || errors.Is(err, blob.ErrNotFound) {
		err = e.inputGone(ctx, b, c, errors.Is(err, blob.ErrNotFound))
		r.ended = err == nil
		return false, err
	}
	if err != nil {
		return false, err
	}
	return e.admit(ctx, r, b, c, reqs)
}

// admit finishes a run's load once its fence is taken and its rows read:
// what the governor and the route allow.
func (e *Engine) admit(ctx context.Context, r *chunkRun, b batch.Batch, c batch.Chunk, reqs []jsonl.Request) (bool, error) {
	var err error
	r.refused, r.reason, err = e.Admit(ctx, b, c)
	if err == nil {
		r.route, err = e.Route(ctx, b)
	}
	if err == nil && r.refused == "" {
		r.moveTo, err = e.deadlineFallback(ctx, b, c, r.route)
	}
	if err != nil {
		return false, err
	}
	r.b, r.c, r.reqs, r.lines, r.loaded = b, c, reqs, part.NewLines(b, c, e.Now()), e.Now()
	r.left.Store(int32(len(reqs)))
	e.announceInProgress(ctx, b)
	return true, nil
}

// AnnounceInProgress is announceInProgress for the native delegate: a
// group of b submitted to its provider is its work started.
func (e *Engine) AnnounceInProgress(ctx context.Context, b batch.Batch) {
	e.announceInProgress(ctx, b)
}

// announceInProgress queues batch.in_progress when a chunk of b, whose
// events go somewhere (Lifecycle.Announces), starts and b does not record it queued
// (batch.Batch.AnnouncedInProgress): the run that records it queues it, so
// the runs that start together, reading the batch before the record, queue
// it once. A failure to queue takes the record back, and the batch's next
// chunk tries again; the record holds while the chunk runs, so the
// batch's end cannot see it before the event is queued. A record retried
// after it took effect (answering an error, or losing its answer: written
// again) finds it recorded by this run, which queues the event (at worst
// twice: one event id, which delivery records once).
func (e *Engine) announceInProgress(ctx context.Context, b batch.Batch) {
	if !e.Lifecycle.Announces(b) || b.AnnouncedInProgress || b.Status != batch.InProgress {
		return
	}
	log := e.Log.With("batch_id", b.ID, "tenant", b.Tenant)
	var wrote bool // this run's record may have taken effect
	mark := func(ctx context.Context, on bool) error {
		_, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, func(b *batch.Batch) error {
			if b.AnnouncedInProgress == on && !(on && wrote) {
				return errSkip
			}
			b.AnnouncedInProgress, wrote = on, on
			return nil
		})
		return err
	}
	// again retries a write that failed but may have taken effect (a
	// record whose answer was lost, a take-back throttled): either left
	// wrong, the batch records an event nothing queued, and its terminal
	// webhook waits for it (delivery.OrderWait).
	again := func(err error, on bool, what string) error {
		for try := 0; err != nil && !errors.Is(err, errSkip) && try < 2; try++ {
			log.WarnContext(ctx, what+"; again", "err", err)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err = mark(rctx, on)
			cancel()
		}
		if err != nil && !errors.Is(err, errSkip) {
			log.WarnContext(ctx, what, "err", err)
		}
		return err
	}
	err := mark(ctx, true)
	if wrote { // this run's record, so not skipped when written again
		err = again(err, true, "record the in_progress webhook event")
	} else if err != nil && !errors.Is(err, errSkip) {
		log.WarnContext(ctx, "record the in_progress webhook event", "err", err)
	}
	if err != nil {
		return
	}
	if err := e.Lifecycle.Announce(ctx, b, webhook.InProgress); err != nil {
		log.WarnContext(ctx, "queue the in_progress webhook event", "err", err)
		again(mark(ctx, false), false, "take back the in_progress webhook event's record")
	}
}

// fenceTries bounds a run's tries to take its fence, fenceBackoff their
// waits.
const (
	fenceTries   = 4
	fenceBackoff = 100 * time.Millisecond
)

// takeFence makes r the one live execution of its run, and moves the
// run's lease to a full lease from now with it (docs/design.md
// "Scheduling", fence); it returns the chunk as it now is. false when
// another live execution of the run has it, or the chunk is no longer the
// run's (fenceRefused): the delivery is dropped without running a row or
// spending an attempt.
//
// A try that failed may have taken effect; the next one, under the same
// execution id, takes the fence again (the condition accepts its own id),
// so a throttle or a timeout costs a few hundred milliseconds, not the
// run's delivery.
func (e *Engine) takeFence(ctx context.Context, r *chunkRun) (batch.Chunk, bool, error) {
	m, exec := r.msg, r.exec
	if exec == "" {
		exec = ids.Secret(8)
	}
	var c batch.Chunk
	var err error
	for try := range fenceTries {
		if try > 0 && backoff.Sleep(ctx, backoff.Upper(backoff.Exponential(try, fenceBackoff, 4*fenceBackoff))) != nil {
			break
		}
		c, err = e.Store.TakeFence(ctx, m.Batch, m.Chunk, m.Run, exec, e.Now(), e.Now().Add(e.lease()))
		if err == nil || errors.Is(err, store.ErrFenced) {
			break
		}
	}
	switch {
	case errors.Is(err, store.ErrFenced):
		return c, false, e.fenceRefused(ctx, m)
	case err != nil:
		// The fence may be taken although the call failed: the run's
		// hand-over or release removes it under this execution's id.
		r.exec = exec
		return c, false, gone(err)
	}
	r.exec = exec
	r.lease.Store(c.Lease)
	return c, true, nil
}

// fenceRefused handles a delivery whose fence was refused: the chunk is
// done (a duplicate, or the message of a run that died: remove what runs
// that did not commit wrote), no longer this run's (stale), or run by
// another live execution (a duplicate delivery). Each is dropped. Taking
// the fence first and reading the chunk only when it is refused keeps a
// run's start at one request.
func (e *Engine) fenceRefused(ctx context.Context, m msg.Message) error {
	c, err := e.Store.GetChunk(ctx, m.Batch, m.Chunk)
	switch {
	case err != nil:
		return gone(err)
	case c.State == batch.ChunkDone:
		return e.sweepParts(ctx, c)
	case c.State != batch.ChunkClaimed || c.Run != m.Run:
		e.Log.InfoContext(ctx, "stale work message dropped", "batch_id", c.Batch, "chunk", c.Index, "run", m.Run, "current_run", c.Run)
	default:
		e.Log.InfoContext(ctx, "duplicate work message dropped: another execution runs it", "batch_id", c.Batch, "chunk", c.Index, "run", m.Run)
	}
	return nil
}

// inputGone ends chunk c, whose input object was replaced after the plan
// or deleted, with an error line per row, giving its slots on, and records
// the error that fails the batch (SECURITY.md "Presigned URLs").
func (e *Engine) inputGone(ctx context.Context, b batch.Batch, c batch.Chunk, deleted bool) error {
	why, lines := batch.InputChanged(b.InputFileID), part.InputChanged(b, c, e.Now())
	if deleted {
		why, lines = batch.InputMissing(b.InputFileID), part.InputMissing(b, c, e.Now())
	}
	if _, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, batch.AddError(why)); err != nil {
		lines.Close()
		return err
	}
	_, err := e.commitRows(ctx, b, c, lines, 0)
	return err
}

// draining reports whether the run's rows only get error lines now.
func (r *chunkRun) draining(now time.Time) bool {
	return r.status.Load().(batch.Status).Stopping() || r.b.PastExpiry(now) || r.refused != ""
}

// finishRun commits a run whose rows are done, then hands its slots on.
func (e *Engine) finishRun(ctx context.Context, r *chunkRun) {
	defer close(r.done)
	defer r.slots.leave()
	r.progress.Lock()
	r.committing = true
	if r.reportUnknown {
		e.readReported(ctx, r)
	}
	r.progress.Unlock()
	switch {
	case r.ctx.Err() != nil:
		r.slots.free()
		r.err = e.commitAnswered(ctx, r)
	case r.fallbackOwed():
		r.slots.free()
		r.err = e.commitDeferred(ctx, r)
	default:
		// Its slots stay in its model's use until the commit shows
		// where they go (heldSlots).
		_, r.err = e.commitRun(withSlots(ctx, r.slots), r)
	}
	r.ended = r.err == nil
	// Slots a failed commit still lends are freed under the run's lease:
	// renewed, or its end stops the model (stopRun), as a takeover may
	// hand them on then (heldSlots).
	r.slots.free()
	// Its lease is kept no longer: a renewal would find the chunk done,
	// which is no reason to stop the model's other runs.
	r.cancel()
	// The invocation keeps its runs to its end; their rows go now
	// (docs/design.md "Memory"), the lines with the commit.
	r.reqs, r.pre = nil, nil
}

// lost is a lease renewal's answer that run r's chunk is no longer its. A
// committing run's own commit may be what took it: it stops lending its
// slots (heldSlots) instead of its model's runs. Any other run stops as
// stopRun says.
func (r *chunkRun) lost() {
	r.progress.Lock()
	committing := r.committing
	r.progress.Unlock()
	if !committing {
		r.stop()
		return
	}
	r.cancel()
	r.slots.free()
}

// heldSlots are a run's slots in its invocation's pool. Once its rows are
// done they stay in its model's use while it commits, as long as the
// commit may hand them to a continuation in the same invocation (the claim
// takes its fence here, sched.Claim.Exec): rows of the model's other runs
// go on taking them, and the continuation takes them over as they are
// (keep). Before they can leave the invocation (a commit with no
// continuation here, a continuation sent as a work message or ended
// before its rows, no commit) free waits until the model's rows in flight
// fit in the slots that stay (Pool.Finish). So max_concurrency holds
// (docs/design.md "Scheduling", per-model slots).
type heldSlots struct {
	pool   *fanout.Pool
	model  string
	n      int
	finish sync.Once

	mu      sync.Mutex
	freeing bool // free began: the slots go out of use
	freed   bool // and Pool.Finish returned
	kept    bool // taken over by a continuation here (keep)
}

// free takes the slots out of use, waiting for the model's rows in flight
// to fit without them; a run's lease keeping may call it beside its
// commit. Nothing once they were kept.
func (h *heldSlots) free() {
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.kept {
		h.mu.Unlock()
		return
	}
	h.freeing = true
	h.mu.Unlock()
	h.finish.Do(func() { h.pool.Finish(h.model, h.n) })
	h.mu.Lock()
	h.freed = true
	h.mu.Unlock()
}

// keep hands the slots to the continuation about to start in the
// invocation as they are, in use, without the wait of free: the slots it
// holds, which it frees or leaves in turn. nil once free began: they are
// left as freed.
func (h *heldSlots) keep() *heldSlots {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.freeing || h.kept {
		return nil
	}
	h.kept = true
	return &heldSlots{pool: h.pool, model: h.model, n: h.n}
}

// lent reports whether rows of the model may be in flight on the slots,
// the run's own rows done: until free returned or they were kept.
func (h *heldSlots) lent() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.freed && !h.kept
}

// inUse reports whether rows of the model may be on the slots: free began
// and has not returned, or they do not fit without them; not once free
// returned or a continuation kept them.
func (h *heldSlots) inUse() bool {
	h.mu.Lock()
	freeing, freed, kept := h.freeing, h.freed, h.kept
	h.mu.Unlock()
	switch {
	case freed || kept:
		return false
	case freeing:
		// Pool.Finish waits until they are out of use (it may not have
		// counted them yet).
		return true
	}
	return !h.pool.Fits(h.model, h.n)
}

// leave drops the slots from the pool once the run committed or failed,
// freed first unless kept.
func (h *heldSlots) leave() {
	if h == nil {
		return
	}
	h.free()
	h.mu.Lock()
	kept := h.kept
	h.mu.Unlock()
	if !kept {
		h.pool.Leave(h.model, h.n)
	}
}

// slotsKey is the context key of a committing run's heldSlots.
type slotsKey struct{}

// withSlots is ctx under which a commit frees h before its slots can
// leave the invocation (heldSlots).
func withSlots(ctx context.Context, h *heldSlots) context.Context {
	return context.WithValue(ctx, slotsKey{}, h)
}

// slotsOf is the heldSlots of ctx's committing run, nil for none.
func slotsOf(ctx context.Context) *heldSlots {
	h, _ := ctx.Value(slotsKey{}).(*heldSlots)
	return h
}

// deferRow records that row i is owed its fallback, model to, after
// attempts on its own model.
func (r *chunkRun) deferRow(i int, to string, attempts int) {
	r.deferMu.Lock()
	defer r.deferMu.Unlock()
	if r.deferred == nil {
		r.deferred = make([]bool, len(r.reqs))
	}
	r.deferred[i], r.fallbackTo = true, to
	r.deferredAttempts = max(r.deferredAttempts, attempts)
}

// owed is the fallback the run's deferred rows are owed, "" for none, and
// the attempts they made on their own model.
func (r *chunkRun) owed() (string, int) {
	r.deferMu.Lock()
	defer r.deferMu.Unlock()
	return r.fallbackTo, r.deferredAttempts
}

// fallbackOwed says whether rows of the run are owed their fallback.
func (r *chunkRun) fallbackOwed() bool {
	to, _ := r.owed()
	return to != ""
}

// commitDeferred commits the rows a run answered and adds those owed
// their fallback as a pending chunk of the fallback model, which runs them
// on its own capacity (docs/design.md "Scheduling", fallback rows). Every
// row of a run that was not stopped has its line or is owed a fallback.
func (e *Engine) commitDeferred(ctx context.Context, r *chunkRun) error {
	defer r.lines.Close()
	done, rest, err := e.splitAnswered(ctx, r, r.lines.Answered())
	if err != nil {
		return fmt.Errorf("fallback rows: %w", err)
	}
	rest.Model, rest.PriorAttempts = r.owed()
	rest.Fallback = true
	_, err = e.commitWith(ctx, r.b, done, r.lines, 0, &rest, r.began)
	return err
}

// splitAnswered cuts run r's chunk into its answered rows (done, whose
// lines r keeps) and the others (rest, a pending chunk of r's model), by
// the row spans of its input range (plan.Split).
func (e *Engine) splitAnswered(ctx context.Context, r *chunkRun, answered []bool) (done, rest batch.Chunk, err error) {
	data, err := e.Blobs.ReadRange(ctx, r.b.Input, r.c.Start, r.c.End)
	if err != nil {
		return done, rest, fmt.Errorf("split chunk %d of %s: %w", r.c.Index, r.c.Batch, err)
	}
	rows, err := plan.RowSpans(r.c, data)
	if err != nil {
		return done, rest, fmt.Errorf("split chunk %d of %s: %w", r.c.Index, r.c.Batch, err)
	}
	r.lines.Keep(answered)
	done, rest = plan.Split(r.c, rows, answered)
	if r.b.MaxCost != nil {
		rest.MostCost = e.mostOf(r, data, rows, answered)
	}
	return done, rest, nil
}

// mostOf is the most run r's rows not answered may cost (quote.RowMost, as
// the plan sums a chunk's), rows being their spans in data, r's chunk's
// range: a chunk cut from r's holds that much of the batch's max_cost
// (docs/api.md "Extensions"), the answered rows' cost being in the usage.
func (e *Engine) mostOf(r *chunkRun, data []byte, rows []batch.Span, answered []bool) float64 {
	var most float64
	for i, s := range rows {
		if !answered[i] {
			line := data[s.Start-r.c.Start : s.End-r.c.Start]
			most += quote.RowMost(e.Models, jsonl.Row{Model: r.c.Model, JSON: line}, r.b.Fallback())
		}
	}
	return most
}

// commitAnswered commits the rows a run that stopped for want of time or
// lease answered from its first, and leaves the others to a new chunk that
// holds its slots next (docs/design.md "Scheduling", split). ErrStop when
// it answered none, lost its chunk, or holds no slot for a rest: its
// message's next delivery runs it. A run that answered every row commits.
func (e *Engine) commitAnswered(ctx context.Context, r *chunkRun) error {
	defer r.lines.Close()
	stop := fmt.Errorf("chunk %d of %s: %w", r.c.Index, r.c.Batch, ErrStop)
	answered := r.lines.Answered()
	k := 0
	for _, a := range answered {
		if a {
			k++
		}
	}
	switch {
	case ctx.Err() != nil || k == 0:
		return stop
	case k == len(r.reqs):
		// So too a run holding no slot (a NoCall chunk's, a drain's),
		// whose rows were answered without a slot before its stop.
		_, err := e.commitRun(ctx, r)
		return err
	case r.c.Slots == 0:
		return stop // its rest would have no slots to run on
	}
	done, rest, err := e.splitAnswered(ctx, r, answered)
	if err != nil {
		return err
	}
	done.Attempt = ids.Secret(6)
	parts, cm, err := part.Commit(done, r.lines, 0, e.Now())
	if err != nil {
		return err
	}
	usage, err := readUsage(parts)
	if err != nil {
		return err
	}
	written, err := part.Write(ctx, e.Blobs, cm, parts)
	if err != nil {
		return err
	}
	if e.BeforeCommit != nil {
		if err := e.BeforeCommit(cm.Chunk); err != nil {
			return err
		}
	}
	won, err := e.commitSplit(ctx, r.b, cm, rest)
	if err == nil && won {
		e.publishRows(ctx, r.b, done, usage, r.began)
	}
	if err == nil && !won {
		e.Log.InfoContext(ctx, "split chunk no longer this run's; its part discarded", "batch_id", done.Batch, "chunk", done.Index, "run", done.Run)
		err = errors.Join(stop, e.Blobs.Delete(ctx, written...))
	}
	return err
}

// commitSplit records the split of a chunk into its answered rows (cm
// their commit) and the rest (store.CommitSplit), numbering the rest from the
// batch's chunk count, read again when another split took the
// number, and sends the rest's work message. false: the chunk is no
// longer this run's (or an earlier try took effect: the rest's lease then
// runs out and the tick sends it).
func (e *Engine) commitSplit(ctx context.Context, b batch.Batch, cm sched.Commit, rest batch.Chunk) (bool, error) {
	run, lease := newRun(), e.Now().Add(e.lease())
	var lastErr error
	for try := 0; try < commitTries; try++ {
		rest.Index = b.ChunksTotal
		err := e.Store.CommitSplit(ctx, b.Tenant, cm, rest, run, lease)
		if err != nil && !errors.Is(err, store.ErrRaced) {
			// An earlier try may have taken effect although its call
			// failed: the chunk then holds this commit's attempt
			// (docs/design.md "Conflicts and ambiguous writes").
			if c, gerr := e.Store.GetChunk(ctx, cm.Chunk.Batch, cm.Chunk.Index); gerr == nil && c.State == batch.ChunkDone && c.Attempt == cm.Chunk.Attempt {
				err = nil
			}
		}
		switch {
		case err == nil:
			e.Log.InfoContext(ctx, "chunk split: answered rows committed, the rest claimed for its slots", "batch_id", b.ID,
				"chunk", cm.Chunk.Index, "rows", cm.Chunk.Rows, "rest", rest.Index, "run", run)
			next := batch.Next{Tenant: b.Tenant, Batch: b.ID, Chunk: rest.Index, Run: run, Attempt: 1}
			if err := e.send(ctx, resources.Work, msg.ForChunk(next)); err != nil {
				e.Log.WarnContext(ctx, "send split chunk", "batch_id", b.ID, "chunk", rest.Index, "err", err)
			}
			return true, nil
		case errors.Is(err, store.ErrChunkDone):
			return false, nil
		case errors.Is(err, store.ErrRaced):
			if b, err = e.Store.GetBatch(ctx, b.Tenant, b.ID); err != nil {
				return false, err
			}
		case ctx.Err() != nil:
			return false, ctx.Err()
		default:
			lastErr = err
			_ = backoff.Sleep(ctx, time.Duration(50*(try+1))*time.Millisecond)
		}
	}
	return false, lastErr
}

// rows are the run's rows as fanout.Send sends them, each answer going into
// the run's outcomes; rowDone follows each row's.
func (r *chunkRun) rows(e *Engine, rowDone func()) fanout.Rows {
	bodies := make([]json.RawMessage, len(r.reqs))
	for i, q := range r.reqs {
		bodies[i] = q.Body
	}
	endpoint, route := r.b.Endpoint, r.route
	// A row's fallback runs on the fallback's capacity, in a chunk of its
	// own (docs/design.md "Scheduling", fallback rows).
	if r.c.Fallback {
		route.On = r.c.Model
	} else {
		route.Defer = true
	}
	return fanout.Rows{
		Model: r.c.Model, Ctx: r.ctx, Bodies: bodies,
		Send: func(ctx context.Context, body json.RawMessage) inference.Result {
			if !r.inLease(e) {
				// keepLease's timer may fire late: the clock decides.
				r.stop()
				return inference.Result{ErrCode: inference.CodeRequestCancelled, ErrMessage: "the run's lease ended"}
			}
			ctx = provider.WithAnthropic(ctx, provider.Anthropic{Betas: r.b.AnthropicBetas, UserProfile: r.b.UserProfileID})
			return e.Provider.Do(provider.WithRun(ctx, r.c.Run, func() time.Time { return time.UnixMilli(r.lease.Load()) }), endpoint, body, route)
		},
		Settle: func(i int) bool {
			// Row boundary: a cancel or the end of the window stops new rows.
			o := part.Outcome{CustomID: r.reqs[i].CustomID}
			switch {
			case r.status.Load().(batch.Status).Stopping():
				o.Cancel()
			case r.b.PastExpiry(e.Now()):
				o.Expire()
			case r.refused != "":
				o.Code, o.Message = r.refused, r.reason
			case r.moveTo != "":
				r.deferRow(i, r.moveTo, 0)
				rowDone()
				return true
			case r.c.NoCall:
				res, refused := provider.Refusal(e.Models, endpoint, bodies[i])
				if !refused {
					// The models file changed since the plan: the row
					// runs on its model's capacity, in a chunk of its own
					// as a fallback row does.
					r.deferRow(i, r.c.Model, 0)
					rowDone()
					return true
				}
				o.Result = res
			default:
				return false
			}
			r.lines.Set(i, o)
			rowDone()
			return true
		},
		Done: func(i int, res inference.Result, sent bool) {
			// A row stopped for want of time or lease, or cut short in
			// flight, has no answer: it runs again. One owed its fallback
			// has none either: it runs in the fallback's chunk.
			if sent && res.FallbackTo != "" {
				r.deferRow(i, res.FallbackTo, res.Attempts)
			} else if sent && (res.OK() || r.ctx.Err() == nil) {
				r.lines.Set(i, part.Outcome{CustomID: r.reqs[i].CustomID, Result: res})
			}
			rowDone()
		},
	}
}

// statusRefresh is how often a running chunk re-reads its batch's status to
// notice a cancel: a cached read, never one per row.
const statusRefresh = 3 * time.Second

// heartbeat keeps the runs going while they run: it keeps their messages
// invisible and refreshes their batches' statuses (keepLease renews each
// run's lease).
func (e *Engine) heartbeat(ctx context.Context, in *invocation) {
	vis := e.Set.Queue(resources.Work).VisibilityTimeout
	visT, statusT := time.NewTicker(vis/3), time.NewTicker(statusRefresh)
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
		case <-visT.C:
			for _, r := range in.all() {
				// A continuation has no message of its own.
				if r.delivery.ReceiptHandle != "" && !isClosed(r.done) {
					warn("extend visibility", r, e.Queue.ExtendVisibility(ctx, resources.Work, r.delivery.ReceiptHandle, vis))
				}
			}
		case <-statusT.C:
			runs := running(in.all())
			fresh := map[*atomic.Value]bool{} // runs of one batch share its status
			for _, r := range runs {
				if !fresh[r.status] {
					fresh[r.status] = true
					b, err := e.Store.GetBatch(ctx, r.b.Tenant, r.b.ID)
					if err == nil {
						r.status.Store(b.Status)
					}
					warn("refresh batch status", r, err)
				}
			}
			for _, r := range runs {
				warn("report progress", r, e.reportProgress(ctx, r))
			}
		}
	}
}

// reportProgress adds the rows run r has done since its last report to
// its batch's progress (docs/design.md "Progress"): one write per running
// chunk every statusRefresh at most, never one per row, and none for a
// chunk that commits within statusRefresh of its start.
func (e *Engine) reportProgress(ctx context.Context, r *chunkRun) error {
	r.progress.Lock()
	defer r.progress.Unlock()
	if r.committing || e.Now().Sub(r.loaded) < statusRefresh {
		return nil // a chunk that ends within seconds shows at its commit
	}
	to, err := e.Store.ReportProgress(ctx, r.c, r.lines.Tally())
	if err != nil {
		// A report that took effect although its call failed, or one
		// another execution of the run made, moved the chunk's counts:
		// read them, or every later report fails its condition and the
		// commit takes too little out of the batch's progress.
		r.reportUnknown = !e.readReported(ctx, r)
		return err
	}
	r.c.ReportedCompleted, r.c.ReportedFailed = to.Completed, to.Failed
	return nil
}

// readReported sets r's reported counts to the chunk's, while the chunk
// is still the run's; false when it could not be read. r.progress is held.
func (e *Engine) readReported(ctx context.Context, r *chunkRun) bool {
	c, err := e.Store.GetChunk(ctx, r.c.Batch, r.c.Index)
	if err != nil {
		return false
	}
	if c.State == batch.ChunkClaimed && c.Run == r.c.Run {
		r.c.ReportedCompleted, r.c.ReportedFailed = c.ReportedCompleted, c.ReportedFailed
	}
	return true
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

// leaseSkew is how long before its lease's expiry a run stops starting
// rows and cuts its requests in flight, unless a renewal succeeded
// meanwhile (docs/design.md "Scheduling", lease rule): a takeover needs the
// lease ended by the tick's clock, so an executor whose clock is up to
// leaseSkew off never runs beside the run that took over.
const leaseSkew = 5 * time.Second

// skew is leaseSkew, at most half a (short, test) lease.
func (e *Engine) skew() time.Duration { return min(leaseSkew, e.lease()/2) }

// inLease reports whether r may still start a row by its lease (keepLease).
func (r *chunkRun) inLease(e *Engine) bool {
	return e.Now().Before(time.UnixMilli(r.lease.Load()).Add(-e.skew()))
}

// keepLease renews r's lease and fence every third of a lease while r
// runs, sooner again after a renewal failed, and ends r.ctx at the last
// renewed expiry less the skew margin unless a renewal succeeded meanwhile,
// or at once when the chunk is no longer the run's (docs/design.md
// "Scheduling", lease rule).
func (e *Engine) keepLease(r *chunkRun) {
	stopAt := func() time.Duration { return time.UnixMilli(r.lease.Load()).Add(-e.skew()).Sub(e.Now()) }
	stop := time.AfterFunc(stopAt(), r.stop)
	defer stop.Stop()
	every, retry := e.lease()/3, e.lease()/20
	// The first renewal comes a third of a lease after the lease was set,
	// not after the run's start: a continuation starts on its claim's.
	wait := min(every, max(0, time.UnixMilli(r.lease.Load()).Sub(e.Now())-(e.lease()-every)))
	for {
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		until := e.Now().Add(e.lease())
		err := e.Store.RenewExec(r.ctx, r.c.Batch, r.c.Index, r.c.Run, r.exec, until)
		switch {
		case err == nil:
			r.lease.Store(until.UnixMilli())
			stop.Reset(stopAt())
			wait = every
		case errors.Is(err, store.ErrLeaseLost):
			r.lost() // another run has the chunk, or its own commit did
			return
		default:
			if r.ctx.Err() == nil {
				e.Log.WarnContext(r.ctx, "renew lease; retrying", "batch_id", r.c.Batch, "chunk", r.c.Index, "run", r.c.Run,
					"lease", time.UnixMilli(r.lease.Load()), "err", err)
			}
			wait = retry
		}
	}
}

// sendAfter is what the rows of c's run wait for before they are sent (the
// send of the model's run before, nil for none) and what the run closes
// once its rows are sent: a model's runs in an invocation send in turn. A
// NoCall run takes no turn: its rows take no slot.
func (in *invocation) sendAfter(c batch.Chunk) (before <-chan struct{}, sent chan struct{}) {
	sent = make(chan struct{})
	if c.NoCall {
		return nil, sent
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	before, in.sending[c.Model] = in.sending[c.Model], sent
	return before, sent
}
