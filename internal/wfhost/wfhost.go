// Package wfhost runs workflow records (docs/api.md "Workflow records") on
// the engine: Runner is the engine's Workflow (engine.Deps.Workflow), built
// on the engine it serves. Plan gives each record a chunk of its own,
// so the record is what the chunk's all-or-nothing commit covers: its line
// and counters go through the normal commit when it ends
// (engine.CommitRecord), and the accounting invariant holds as for any
// row. Until then its checkpoint item (store.WorkflowCheckpoint) is
// rewritten after every step, so a crashed executor's successor resumes at
// the last finished step: it sends that step's results event again (same
// event_id) and never re-runs, or re-counts, a finished request.
//
// The chunk holds its model's slots like any chunk and runs a step's
// requests within them; a record that waits gives them back, re-sends its
// work message with an SQS delay and ends the invocation, so it holds
// neither capacity nor a Lambda. A record nearly out of invocation time
// after some progress re-sends its message too, instead of timing out and
// spending one of the message's receives.
//
// The driving (events, steps, checkpoints, how a run ends) is
// workflow.Driver's; this package is its workflow.Host: the record's lease
// and checkpoint, its chunk's slots, its requests and its line. It uses
// the engine; the engine never imports it.
package wfhost

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/engine"
	"github.com/relaybatch/relay/internal/fanout"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
	"github.com/relaybatch/relay/internal/workflow"
)

// inlineResults is the most a step's results may take inside the
// checkpoint item (DynamoDB items stop at 400 KB); bigger ones are written
// to S3 beside the chunk parts, where the finalizer sweeps them up.
const inlineResults = 300 << 10

// defaultClient makes the callbacks of a Runner without a Client.
var defaultClient = webhook.NewClient(egress.Policy{})

// Engine is what a record's run uses of the engine that hands it its chunk
// (*engine.Engine): what the record may run on, its chunk's slots, the
// re-send of its work message and the commit of its line.
type Engine interface {
	Route(ctx context.Context, b batch.Batch) (provider.Route, error)
	TakeSlots(ctx context.Context, c batch.Chunk) (batch.Chunk, error)
	ReturnSlots(ctx context.Context, c batch.Chunk) error
	SendAgain(ctx context.Context, m msg.Message, delay time.Duration) error
	CommitRecord(ctx context.Context, b batch.Batch, c batch.Chunk, status batch.Status, o part.Outcome) error
	Admit(ctx context.Context, b batch.Batch, c batch.Chunk, more ...batch.Chunk) (code, message string, err error)
}

// Store holds the records' checkpoints (internal/store).
type Store interface {
	AcquireWorkflow(ctx context.Context, batchID string, row int, owner string, now, until time.Time) (store.WorkflowCheckpoint, error)
	SaveWorkflow(ctx context.Context, batchID string, row int, owner string, cp store.WorkflowCheckpoint, until time.Time, spend store.Spend) error
	ReleaseWorkflow(ctx context.Context, batchID string, row int, owner string) error
	DeleteWorkflow(ctx context.Context, batchID string, row int) error
	WorkflowSpent(ctx context.Context, batchID string, row int) (workflow.Usage, bool, error)
	GetChunk(ctx context.Context, batchID string, i int) (batch.Chunk, error)
}

// Blobs holds the results too big for a checkpoint (internal/blob).
type Blobs interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
}

var (
	_ Engine          = (*engine.Engine)(nil)
	_ Store           = (*store.Store)(nil)
	_ Blobs           = (*blob.Store)(nil)
	_ engine.Workflow = (*Runner)(nil)
)

// Runner runs the workflow records of Engine's executor; its checkpoints
// are items of Store, and the results too big for them objects of Blobs.
// Every field is required but the options after Now.
type Runner struct {
	Engine   Engine
	Store    Store
	Blobs    Blobs
	Provider engine.Provider // the steps' requests, the engine's
	Log      *slog.Logger
	// Set is the deployment's resources: a record's lease outside an
	// invocation with a deadline is the work queue's visibility timeout.
	Set resources.Set
	// Now is the clock (required), the engine's.
	Now func() time.Time
	// Client makes the callbacks; nil means webhook.NewClient(egress.Policy{}).
	Client *webhook.Client
	// Backoff is the wait after n failed attempts of a callback event; nil
	// means workflow.Backoff (1 s, 2 s, 4 s). Tests shorten it.
	Backoff func(n int) time.Duration
	// AfterCheckpoint, if set, runs after a step's checkpoint is written;
	// an error there is a crash between steps (fault tests).
	AfterCheckpoint func(c batch.Chunk, step int) error
}

// Run drives the workflow record req of chunk c from its checkpoint: it
// is engine.Workflow. runCtx ends before the invocation does;
// status is the batch's, kept fresh.
func (r *Runner) Run(ctx, runCtx context.Context, b batch.Batch, c batch.Chunk, req jsonl.Request, status func() batch.Status) error {
	wc := r.client()
	// The plan checked the record already (ValidRow); its run checks again
	// under the policy of today, and ends an invalid one before its lease
	// or capacity.
	spec, err := workflow.Check(req.Body, b.Endpoint, wc.Policy)
	h := &recordHost{r: r, e: r.Engine, b: b, c: c, customID: req.CustomID, status: status,
		log: r.Log.With("batch_id", b.ID, "chunk", c.Index, "custom_id", req.CustomID)}
	var invalid *workflow.Error
	if errors.As(err, &invalid) {
		return h.commit(ctx, part.Outcome{CustomID: req.CustomID, Code: invalid.Code, Message: invalid.Message})
	}
	defer h.release(ctx)
	if h.route, err = r.Engine.Route(ctx, b); err != nil {
		return err
	}
	// A step's call is bounded by its model's call_time_limit, and by the
	// run's context: a call the invocation cannot wait for is cut short
	// with its step, which the record's next run sends again.
	h.route.TimeLimit = true
	d := &workflow.Driver{
		Spec: spec, WorkflowID: b.ID + ":" + req.CustomID, RecordID: req.CustomID, Model: c.Model, Policy: wc.Policy,
		Call: (&workflow.Caller{HTTP: wc.HTTP, Backoff: r.Backoff}).Call,
		Host: h, Log: h.log, Now: r.Now,
	}
	err = d.Drive(ctx, runCtx)
	if errors.Is(err, workflow.ErrOutOfTime) {
		// Not worth a quick retry: the message comes back.
		return fmt.Errorf("workflow %s: %w", d.WorkflowID, engine.ErrStop)
	}
	return err
}

func (r *Runner) client() *webhook.Client { return cmp.Or(r.Client, defaultClient) }

// ValidRow is the plan's check of a workflow record's row of batch b
// (engine.Workflow): its relay.workflow as its run will read it.
func (r *Runner) ValidRow(b batch.Batch, row []byte) bool {
	return workflow.CheckRow(row, b.Endpoint, r.client().Policy) == nil
}

// Spent is what the steps chunk c's record saved spent upstream, by its
// checkpoint, and whether the tenant's usage counts it already: the line
// of a record dead-lettered keeps it (engine.Workflow).
func (r *Runner) Spent(ctx context.Context, b batch.Batch, c batch.Chunk) (inference.Usage, bool, error) {
	u, counted, err := r.Store.WorkflowSpent(ctx, b.ID, c.FirstRow)
	return inference.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}, counted, err
}

// recordHost is the engine's side of one run of a workflow record.
type recordHost struct {
	r        *Runner
	e        Engine
	b        batch.Batch
	c        batch.Chunk // its Slots are what the record holds
	customID string
	status   func() batch.Status
	log      *slog.Logger
	route    provider.Route // what the record's steps run and fall back on
	// owner and until are the record's lease while this run holds it.
	owner string
	until time.Time
	// spent is what the record spent upstream and the tenant's usage does
	// not count yet, by the model that served it: the step being run's,
	// which Save counts with the step's checkpoint.
	spent map[string]sched.UsageAgg
}

var _ workflow.Host = (*recordHost)(nil)

// Load takes the record's lease and reads its checkpoint, with results
// that were too big for the item.
func (h *recordHost) Load(ctx context.Context) (workflow.State, error) {
	owner := ids.Secret(9)
	until := h.r.Now().Add(h.r.Set.Queue(resources.Work).VisibilityTimeout)
	if dl, ok := ctx.Deadline(); ok {
		until = dl // the lease dies with the invocation, before its message can come back
	}
	cp, err := h.r.Store.AcquireWorkflow(ctx, h.b.ID, h.c.FirstRow, owner, h.r.Now(), until)
	var busy *store.WorkflowBusyError
	if errors.As(err, &busy) {
		return workflow.State{}, &workflow.BusyError{Until: busy.Until}
	}
	if err != nil {
		return workflow.State{}, err
	}
	h.owner, h.until = owner, until
	st := cp.State
	if u := st.Usage; !cp.Counted && u.TotalTokens > 0 {
		// Checkpointed before steps counted their spend: the next save, or
		// the record's line, counts it.
		h.add(h.c.Model, inference.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens})
	}
	if cp.ResultsKey != "" {
		if st.Results, err = h.loadResults(ctx, cp.ResultsKey); err != nil {
			return workflow.State{}, err
		}
	}
	return st, nil
}

// release gives up the record's lease, if this run holds it.
func (h *recordHost) release(ctx context.Context) {
	if h.owner == "" {
		return
	}
	if err := h.r.Store.ReleaseWorkflow(context.WithoutCancel(ctx), h.b.ID, h.c.FirstRow, h.owner); err != nil {
		h.log.WarnContext(ctx, "release workflow lease", "err", err)
	}
	h.owner = ""
}

// TakeSlots takes the model's slots again for a record that gave them
// back: false, holding none, when the model is full.
func (h *recordHost) TakeSlots(ctx context.Context) (bool, error) {
	c := h.c
	if c.Slots > 0 {
		return true, nil
	}
	switch held, err := h.e.TakeSlots(ctx, c); {
	case errors.Is(err, store.ErrNoCapacity):
		return false, nil
	case errors.Is(err, store.ErrChunkDone):
		fresh, gerr := h.r.Store.GetChunk(ctx, c.Batch, c.Index)
		switch {
		case gerr != nil:
			return false, gerr
		case fresh.State == batch.ChunkDone:
			return false, workflow.ErrFinished
		case fresh.Slots == 0:
			return false, fmt.Errorf("take slots for chunk %d of %s: %w", c.Index, c.Batch, err)
		}
		h.c = fresh
		return true, nil
	case err != nil:
		return false, err
	default:
		h.c = held // its slots and their shard, maybe another than before
		return true, nil
	}
}

// ReturnSlots gives the record's slots back to its model while it waits.
func (h *recordHost) ReturnSlots(ctx context.Context) error {
	if h.c.Slots == 0 {
		return nil
	}
	if err := h.e.ReturnSlots(ctx, h.c); err != nil {
		return err
	}
	h.c.Slots = 0
	return nil
}

// Exec runs a step's requests through the one row fan-out
// (internal/fanout), within the slots the record's chunk holds, a
// request's tool rounds in its one slot, handing each answer to done as it
// comes and counting what it spent.
func (h *recordHost) Exec(ctx context.Context, calls []workflow.Call, done func(i int, r inference.Result)) {
	ep, route := h.b.Endpoint, h.route
	bodies := make([]json.RawMessage, len(calls))
	// By the body's first byte: fanout hands Send the body alone, the
	// same slice, and bodies are JSON objects, never empty.
	tools := map[*byte]*workflow.Tools{}
	for i, c := range calls {
		bodies[i] = c.Body
		if c.Tools != nil && len(c.Body) > 0 {
			tools[&c.Body[0]] = c.Tools
		}
	}
	send := func(ctx context.Context, body json.RawMessage) inference.Result {
		return h.r.Provider.Do(ctx, ep, body, route)
	}
	callTool := func(ctx context.Context, t *workflow.Tools, call json.RawMessage) (string, error) {
		return workflow.CallTool(ctx, h.r.client().HTTP, t, call)
	}
	var mu sync.Mutex // Done runs on the rows' goroutines
	fanout.SendAll(h.c.Slots, fanout.Rows{
		Ctx: ctx, Bodies: bodies,
		Send: func(ctx context.Context, body json.RawMessage) inference.Result {
			if len(body) > 0 && tools[&body[0]] != nil {
				return workflow.RunTools(ctx, body, tools[&body[0]], send, callTool)
			}
			return send(ctx, body)
		},
		Done: func(i int, r inference.Result, sent bool) {
			if !sent {
				// ctx ended: the step is cut short and none of it is kept.
				r = inference.Result{ErrCode: inference.CodeRequestCancelled, ErrMessage: "stopped before the request was sent"}
			}
			if r.Model != "" && r.Usage != (inference.Usage{}) {
				mu.Lock()
				h.add(r.Model, r.Usage)
				mu.Unlock()
			}
			done(i, r)
		},
	})
}

// add counts u, spent on model, in what the tenant's usage lacks.
func (h *recordHost) add(model string, u inference.Usage) {
	if h.spent == nil {
		h.spent = map[string]sched.UsageAgg{}
	}
	agg := h.spent[model]
	agg.Input, agg.Output, agg.Total = agg.Input+u.InputTokens, agg.Output+u.OutputTokens, agg.Total+u.TotalTokens
	h.spent[model] = agg
}

// Save checkpoints the record, streaming results too big for the item to
// S3 from their spool, with what its step spent (counted in the tenant's
// usage in the same write), then runs the AfterCheckpoint hook.
func (h *recordHost) Save(ctx context.Context, st workflow.State) error {
	cp := store.WorkflowCheckpoint{State: st}
	if st.Results.Len() > 0 {
		data, size, err := st.Results.Array()
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if size > inlineResults {
			k := fmt.Sprintf("%swf-%07d-step-%04d.results", batch.PartsPrefix(h.b.Tenant, h.b.ID), h.c.FirstRow, st.Step)
			if err := h.r.Blobs.Put(ctx, k, data, size); err != nil {
				return err
			}
			cp.ResultsKey, cp.State.Results = k, nil
		}
	}
	spend := store.Spend{Tenant: h.b.Tenant, Day: h.r.Now().UTC().Format("2006-01-02"), KeyID: h.b.KeyID, ByModel: h.spent}
	if err := h.r.Store.SaveWorkflow(ctx, h.b.ID, h.c.FirstRow, h.owner, cp, h.until, spend); err != nil {
		return err
	}
	h.spent = nil
	if f := h.r.AfterCheckpoint; f != nil {
		return f(h.c, st.Step)
	}
	return nil
}

// Stop fails the record once its batch is cancelled or past its window,
// or the governor no longer lets it spend (its key disabled, its tenant's
// budget spent: docs/design.md "Governance"), which it asks before every
// event, the record's steps having counted what they spent.
func (h *recordHost) Stop(ctx context.Context) (*workflow.Error, error) {
	switch {
	case h.status().Stopping():
		return &workflow.Error{Code: part.CodeCancelled, Message: "the batch was cancelled before this workflow record finished"}, nil
	case h.b.PastExpiry(h.r.Now()):
		return &workflow.Error{Code: part.CodeExpired, Message: "the batch's completion window ended before this workflow record finished"}, nil
	}
	code, why, err := h.e.Admit(ctx, h.b, h.c)
	if err != nil || code == "" {
		return nil, err
	}
	return &workflow.Error{Code: code, Message: why}, nil
}

// Requeue gives up the lease first, so the next message may be taken at
// once, then sends the chunk's work message again after delay, its lease
// moved past it (engine.SendAgain); the invocation then ends
// successfully, deleting the message it was given.
func (h *recordHost) Requeue(ctx context.Context, delay time.Duration) error {
	h.release(ctx)
	c := h.c
	return h.e.SendAgain(ctx, msg.Message{Type: msg.Chunk, Tenant: c.Tenant, Batch: c.Batch, Chunk: c.Index, Run: c.Run, Attempt: c.Attempts}, delay)
}

// Finish commits the record's line: the callback's output, or its error,
// with the usage of every request it ran.
func (h *recordHost) Finish(ctx context.Context, o workflow.Outcome) error {
	u := o.State.Usage
	// Every step saved counted its spend; what is left (a checkpoint from
	// before steps counted theirs) the line counts.
	l := part.Outcome{CustomID: h.customID, Counted: len(h.spent) == 0, Result: inference.Result{
		Model: h.c.Model, Fallback: o.State.Fallback,
		Usage: inference.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens},
	}}
	if o.Kind == workflow.Completed {
		l.Result.StatusCode, l.Result.Body, l.Result.RequestID = 200, o.Output, o.EventID
	} else {
		// The engine counts it expired or cancelled only for the window's
		// end or a cancel, whatever code a callback's failed answer carries.
		l.Code, l.Message = o.Err.Code, o.Err.Message
	}
	h.log.InfoContext(ctx, "workflow record ended", "code", l.Code, "steps", o.State.Step, "requests", o.State.Requests, "tokens", u.TotalTokens)
	return h.commit(ctx, l)
}

// commit commits the record's chunk with its one line, then drops its
// checkpoint.
func (h *recordHost) commit(ctx context.Context, l part.Outcome) error {
	if err := h.e.CommitRecord(ctx, h.b, h.c, h.status(), l); err != nil {
		return err
	}
	if err := h.r.Store.DeleteWorkflow(ctx, h.b.ID, h.c.FirstRow); err != nil {
		h.log.WarnContext(ctx, "delete workflow checkpoint", "err", err)
	}
	return nil
}

// loadResults reads a step's results that Save moved to S3 into a
// spool, one result at a time.
func (h *recordHost) loadResults(ctx context.Context, key string) (*workflow.Results, error) {
	rc, err := h.r.Blobs.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	rs, err := workflow.ReadResults(rc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return rs, nil
}
