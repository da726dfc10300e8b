package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/workflow"
)

// Workflow records (SPEC §10). Plan gives each one a chunk of its own, so
// the record is what the chunk's all-or-nothing commit covers: its line and
// counters go through the normal commit when it ends, and the accounting
// invariant holds as for any row. Until then its checkpoint item
// (store.WorkflowCheckpoint) is rewritten after every step, so a crashed
// executor's successor resumes at the last finished step: it sends that
// step's results event again (same event_id) and never re-runs, or
// re-counts, a finished request.
//
// The chunk holds its model's slots like any chunk and runs a step's
// requests within them; a record that waits gives them back, re-sends its
// work message with an SQS delay and ends the invocation, so it holds
// neither capacity nor a Lambda. A record nearly out of invocation time
// after some progress re-sends its message too, instead of timing out and
// spending one of the message's receives.

const chatEndpoint = "/v1/chat/completions"

// inlineResults is the most a step's results may take inside the
// checkpoint item (DynamoDB items stop at 400 KB); bigger ones are written
// to S3 beside the chunk parts, where the finalizer sweeps them up.
const inlineResults = 300 << 10

// capacityRetry is how soon a resumed record whose model is full looks again.
const capacityRetry = 3 * time.Second

// yieldMargin is the invocation time an event needs beyond its callback's
// timeout; with less left, a record that made progress hands over.
const yieldMargin = 10 * time.Second

// WorkflowOptions tune workflow records; the zero value is the deployment's.
type WorkflowOptions struct {
	// Backoff is the wait after n failed attempts of a callback event; nil
	// means workflow.Backoff (1 s, 2 s, 4 s).
	Backoff func(n int) time.Duration
	// AfterCheckpoint, if set, runs after a step's checkpoint is written;
	// an error there is a crash between steps (fault tests).
	AfterCheckpoint func(c batch.Chunk, step int) error
}

// isWorkflowChunk reports whether a chunk is a workflow record's own.
func isWorkflowChunk(c batch.Chunk, reqs []jsonl.Request) bool {
	return c.Rows == 1 && len(reqs) == 1 && workflow.InBody(reqs[0].Body)
}

// runWorkflow drives the workflow record of chunk c from its checkpoint.
// runCtx ends before the invocation does; status is the batch's status,
// kept fresh.
func (e *Engine) runWorkflow(ctx, runCtx context.Context, b batch.Batch, c batch.Chunk, req jsonl.Request, status *atomic.Value) error {
	row := c.FirstRow
	log := e.Log.With("batch_id", b.ID, "chunk", c.Index, "custom_id", req.CustomID)
	hooks := e.Workflows
	wc := e.webhookClient()

	spec, err := workflow.ParseSpec(req.Body, wc.Policy)
	if err == nil && b.Endpoint != chatEndpoint {
		err = &workflow.Error{Code: workflow.CodeInvalid, Message: fmt.Sprintf("workflow records are %s rows, not %s", chatEndpoint, b.Endpoint)}
	}
	var invalid *workflow.Error
	if errors.As(err, &invalid) {
		return e.commitWorkflow(ctx, b, c, outcome{customID: req.CustomID, code: invalid.Code, message: invalid.Message})
	}

	owner := ids.Secret(9)
	leaseUntil := e.now().Add(e.Set.Queue(resources.Work).VisibilityTimeout)
	if dl, ok := ctx.Deadline(); ok {
		leaseUntil = dl // the lease dies with the invocation, before its message can come back
	}
	cp, err := e.Store.AcquireWorkflow(ctx, b.ID, row, owner, e.now(), leaseUntil)
	var busy *store.WorkflowBusyError
	if errors.As(err, &busy) {
		// A duplicate delivery while another executor drives the record:
		// look again once its lease runs out (if it commits first, this
		// message finds the chunk done).
		log.InfoContext(ctx, "workflow record busy; retrying later", "until", busy.Until)
		return e.requeue(ctx, c, busy.Until.Sub(e.now())+time.Second)
	}
	if err != nil {
		return err
	}
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		if err := e.Store.ReleaseWorkflow(context.WithoutCancel(ctx), b.ID, row, owner); err != nil {
			log.WarnContext(ctx, "release workflow lease", "err", err)
		}
	}
	defer release()
	// handOver ends the invocation and has the record go on after delay.
	// The lease goes first: the next message may be taken at once.
	handOver := func(delay time.Duration) error {
		release()
		return e.requeue(ctx, c, delay)
	}
	st := cp.State
	if cp.ResultsKey != "" {
		if st.Results, err = e.loadResults(ctx, cp.ResultsKey); err != nil {
			return err
		}
	}

	draining := func() bool {
		s := status.Load().(batch.Status)
		return s == batch.Cancelling || s == batch.Cancelled || b.PastExpiry(e.now())
	}
	if !draining() {
		if d := time.UnixMilli(st.WaitUntil).Sub(e.now()); st.WaitUntil > 0 && d > 0 {
			return handOver(d) // delivered early: wait on, still holding nothing
		}
		if c.Slots == 0 {
			var done bool
			switch c, done, err = e.takeSlots(ctx, c); {
			case err != nil:
				return err
			case done:
				return nil
			case c.Slots == 0:
				return handOver(capacityRetry) // the model is full
			}
		}
	}

	fallback := ""
	if b.FallbackModel != nil {
		fallback = *b.FallbackModel
	}
	slots := max(c.Slots, 1)
	caller := &workflow.Caller{HTTP: wc.HTTP, Backoff: hooks.Backoff}
	r := &workflow.Runner{
		Spec: spec, WorkflowID: b.ID + ":" + req.CustomID, RecordID: req.CustomID, Model: c.Model,
		Call: caller.Call,
		Exec: func(ctx context.Context, bodies []json.RawMessage) []provider.Result {
			res := make([]provider.Result, len(bodies))
			sem := make(chan struct{}, slots)
			var wg sync.WaitGroup
			for i, body := range bodies {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					res[i] = e.Provider.Do(ctx, chatEndpoint, body, fallback)
				})
			}
			wg.Wait()
			return res
		},
		Save: func(ctx context.Context, st workflow.State) error {
			if err := e.saveWorkflow(ctx, b, c, owner, st, leaseUntil); err != nil {
				return err
			}
			if hooks.AfterCheckpoint != nil {
				return hooks.AfterCheckpoint(c, st.Step)
			}
			return nil
		},
		Stop: func() *workflow.Error {
			switch s := status.Load().(batch.Status); {
			case s == batch.Cancelling || s == batch.Cancelled:
				return &workflow.Error{Code: CodeCancelled, Message: "the batch was cancelled before this workflow record finished"}
			case b.PastExpiry(e.now()):
				return &workflow.Error{Code: CodeExpired, Message: "the batch's completion window ended before this workflow record finished"}
			}
			return nil
		},
		Yield: func() bool {
			dl, ok := runCtx.Deadline()
			return ok && time.Until(dl) < spec.CallbackTimeout+yieldMargin
		},
		Now: e.now,
	}
	o, err := r.Run(runCtx, st)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case runCtx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			if r.Saved > 0 {
				// Out of time after checkpointing progress: go on in a
				// fresh invocation rather than spend one of the message's
				// receives on a record that is moving.
				log.InfoContext(ctx, "workflow record continues in another invocation", "step", st.Step+r.Saved)
				return handOver(0)
			}
			return fmt.Errorf("workflow %s: %w", r.WorkflowID, errStop)
		}
		return fmt.Errorf("workflow %s: %w", r.WorkflowID, err)
	}

	switch o.Kind {
	case workflow.Waiting:
		if c.Slots > 0 {
			if err := e.Store.SetChunkSlots(ctx, c, 0, e.shardQuota(c)); err != nil {
				return fmt.Errorf("workflow %s: give back capacity: %w", r.WorkflowID, err)
			}
		}
		return handOver(o.Until.Sub(e.now()))
	case workflow.Yielded:
		return handOver(0)
	}
	u := o.State.Usage
	out := outcome{customID: req.CustomID, res: provider.Result{
		Model: c.Model, Fallback: o.State.Fallback,
		Usage: provider.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens},
	}}
	if o.Kind == workflow.Completed {
		out.res.StatusCode, out.res.Body, out.res.RequestID = 200, o.Output, o.EventID
	} else {
		out.code, out.message = o.Err.Code, o.Err.Message
		// Only the window's end expires a record, whatever code a
		// callback's failed answer carries.
		out.expired = o.Err.Code == CodeExpired && b.PastExpiry(e.now())
		s := status.Load().(batch.Status)
		out.cancelled = o.Err.Code == CodeCancelled && (s == batch.Cancelling || s == batch.Cancelled)
	}
	log.InfoContext(ctx, "workflow record ended", "code", out.code, "steps", o.State.Step, "requests", o.State.Requests, "tokens", u.TotalTokens)
	return e.commitWorkflow(ctx, b, c, out)
}

// commitWorkflow commits a record's chunk with its one line, then drops
// its checkpoint.
func (e *Engine) commitWorkflow(ctx context.Context, b batch.Batch, c batch.Chunk, out outcome) error {
	if _, err := e.commitRows(ctx, b, c, []outcome{out}, 0); err != nil {
		return err
	}
	if err := e.Store.DeleteWorkflow(ctx, b.ID, c.FirstRow); err != nil {
		e.Log.WarnContext(ctx, "delete workflow checkpoint", "batch_id", b.ID, "chunk", c.Index, "err", err)
	}
	return nil
}

// takeSlots takes a resumed record's slots of its model again. It returns
// the chunk with Slots still 0 when the model is full, and done when the
// chunk turned out to be committed already.
func (e *Engine) takeSlots(ctx context.Context, c batch.Chunk) (batch.Chunk, bool, error) {
	quota := e.shardQuota(c)
	want := min(e.chunkSlots(), quota)
	switch err := e.Store.SetChunkSlots(ctx, c, want, quota); {
	case errors.Is(err, store.ErrNoCapacity):
		return c, false, nil
	case errors.Is(err, store.ErrChunkDone):
		fresh, gerr := e.Store.GetChunk(ctx, c.Batch, c.Index)
		if gerr != nil {
			return c, false, gerr
		}
		if fresh.State == batch.ChunkDone {
			return fresh, true, nil
		}
		if fresh.Slots == 0 {
			return c, false, fmt.Errorf("take slots for chunk %d of %s: %w", c.Index, c.Batch, err)
		}
		return fresh, false, nil
	case err != nil:
		return c, false, err
	}
	c.Slots = want
	return c, false, nil
}

// saveWorkflow checkpoints a record, moving results too big for the item to S3.
func (e *Engine) saveWorkflow(ctx context.Context, b batch.Batch, c batch.Chunk, owner string, st workflow.State, until time.Time) error {
	cp := store.WorkflowCheckpoint{State: st}
	if len(st.Results) > 0 {
		data, err := json.Marshal(st.Results)
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if len(data) > inlineResults {
			k := fmt.Sprintf("%swf-%07d-step-%04d.results", batch.PartsPrefix(b.Tenant, b.ID), c.FirstRow, st.Step)
			if err := e.Blobs.Put(ctx, k, bytes.NewReader(data), int64(len(data))); err != nil {
				return err
			}
			cp.ResultsKey, cp.State.Results = k, nil
		}
	}
	return e.Store.SaveWorkflow(ctx, b.ID, c.FirstRow, owner, cp, until)
}

func (e *Engine) loadResults(ctx context.Context, key string) ([]workflow.Result, error) {
	rc, err := e.Blobs.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer closeQuietly(rc)
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	var rs []workflow.Result
	if err := json.Unmarshal(data, &rs); err != nil {
		return nil, fmt.Errorf("decode %s: %w", key, err)
	}
	return rs, nil
}

// requeue sends a chunk's work message again after delay, with its lease
// moved past it (sendAgain); the invocation then ends successfully,
// deleting the message it was given.
func (e *Engine) requeue(ctx context.Context, c batch.Chunk, delay time.Duration) error {
	return e.sendAgain(ctx, chunkMessage(batch.Next{Tenant: c.Tenant, Batch: c.Batch, Chunk: c.Index, Run: c.Run, Attempt: c.Attempts}), delay)
}

// shardQuota is the quota of the capacity shard c's slots come from.
func (e *Engine) shardQuota(c batch.Chunk) int {
	m, _ := e.Models.Lookup(c.Model)
	q := store.Quotas(m.MaxConcurrency)
	return q[min(c.Shard, len(q)-1)]
}
