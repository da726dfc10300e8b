// Package engine runs batches: the dispatcher plans them into chunks and
// claims chunks within each model's capacity, the executor runs a chunk's
// rows and commits its part (built by internal/part), the dead-letter
// handler closes chunks that kept failing, and the finalizer records the
// output and error files (docs/design.md "Shape", "Chunks", "Scheduling").
package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/metrics"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// Store is what the engine needs of the table (internal/store).
type Store interface {
	SchedStore
	GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error)
	UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error)
	DueBatches(ctx context.Context, now time.Time, limit int) ([]store.ActiveRef, error)
	OldestActive(ctx context.Context) (batch.Batch, bool, error)
	ReleaseInflight(ctx context.Context, tenant, batchID string) (bool, error)
	GetFile(ctx context.Context, tenant, id string) (file.File, error)
	PutBatchFile(ctx context.Context, f file.File, batchID string) error
	Chunks(ctx context.Context, batchID string) ([]batch.Chunk, error)
	PutChunks(ctx context.Context, cs []batch.Chunk) error
	PutReady(ctx context.Context, r sched.Ready) error
	JoinSeq(ctx context.Context, model string, priority int) (int64, error)
	FreeSlots(ctx context.Context, model string, quotas []int) ([]int, error)
	ReadyHeads(ctx context.Context, model string, n int) ([]sched.Ready, bool, error)
	ClaimFromPool(ctx context.Context, quota int, cs ...sched.Claim) error
	ClaimAlone(ctx context.Context, c batch.Chunk, run string, lease time.Time) error
	SetChunkSlots(ctx context.Context, c batch.Chunk, to, quota int) error
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]batch.Chunk, error)
	Takeover(ctx context.Context, c batch.Chunk, run string, now, lease time.Time) (batch.Chunk, error)
	RenewLease(ctx context.Context, batchID string, chunk int, run string, until time.Time) error
	ReportProgress(ctx context.Context, c batch.Chunk, done batch.Counts) (batch.Counts, error)
	// The execution fence (docs/design.md "Scheduling", fence;
	// internal/store/fence.go).
	TakeFence(ctx context.Context, batchID string, chunk int, run, exec string, now, until time.Time) (batch.Chunk, error)
	RenewExec(ctx context.Context, batchID string, chunk int, run, exec string, until time.Time) error
	HandOver(ctx context.Context, batchID string, chunk int, run, exec string, until time.Time) error
	ReleaseFence(ctx context.Context, batchID string, chunk int, exec string) error
	CommitSplit(ctx context.Context, tenant string, c sched.Commit, rest batch.Chunk, run string, lease time.Time) error
	CommitChunk(ctx context.Context, tenant string, c sched.Commit) error
}

// Blobs is what the engine needs of the bucket (internal/blob).
type Blobs interface {
	plan.Blobs
	ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error)
	List(ctx context.Context, prefix string) ([]string, error)
	Delete(ctx context.Context, keys ...string) error
}

// Queue sends to the queues (internal/queue).
type Queue interface {
	Send(ctx context.Context, name string, v any, delay time.Duration) error
	SendBatch(ctx context.Context, name string, vs []any, delay time.Duration) error
	ExtendVisibility(ctx context.Context, name, receipt string, d time.Duration) error
}

// Provider calls the models (internal/provider).
type Provider interface {
	Do(ctx context.Context, endpoint string, body json.RawMessage, route provider.Route) inference.Result
}

// Governor is what a tenant's budget and a batch's key allow (docs/design.md
// "Governance"): Start when a batch is planned (the models its rows may name,
// nil all; a plan.Invalid error fails it), Admit when a chunk's run starts
// (a code ends its rows unrun with that error line), Allowed when rows run
// (the models they may run and fall back on, nil all). internal/govern has it.
type Governor interface {
	Start(ctx context.Context, b batch.Batch) (allowed func(model string) bool, err error)
	Admit(ctx context.Context, b batch.Batch, c batch.Chunk, more ...batch.Chunk) (code, message string, err error)
	Allowed(ctx context.Context, b batch.Batch) (func(model string) bool, error)
}

// Delegate runs the chunks of batch: native models on their provider's
// batch API (internal/native; docs/design.md "Native batches"): Start
// takes those of a planned batch and returns the ready entries of the
// rest; Handle runs the work messages of their steps (msg.IsNative; dead:
// from the work DLQ) and logs its errors.
type Delegate interface {
	Start(ctx context.Context, b batch.Batch, entries []sched.Ready) ([]sched.Ready, error)
	Handle(ctx context.Context, m msg.Message, dead bool) error
}

var (
	_ Store    = (*store.Store)(nil)
	_ Blobs    = (*blob.Store)(nil)
	_ Queue    = (*queue.Sender)(nil)
	_ Provider = (*provider.Client)(nil)
)

// Workflow runs workflow records (docs/api.md "Workflow records";
// internal/wfhost): Run drives the record req, the one row of chunk c, from
// its checkpoint until it commits its line (CommitRecord), waits or hands
// over (SendAgain). runCtx ends before the invocation does; status is the
// batch's, kept fresh. Spent is what the steps of chunk c's record saved
// spent upstream (zero for a chunk that holds none), and whether the
// tenant's daily usage counts it already: a dead-lettered record's line
// keeps it (DeadLetter). ValidRow is the plan's check of a record's row
// of batch b, before any capacity is taken (docs/api.md "Workflow
// records"): a record that fails it runs alone, holding none, to its
// error line.
type Workflow interface {
	ValidRow(b batch.Batch, row []byte) bool
	Run(ctx, runCtx context.Context, b batch.Batch, c batch.Chunk, req jsonl.Request, status func() batch.Status) error
	Spent(ctx context.Context, b batch.Batch, c batch.Chunk) (u inference.Usage, counted bool, err error)
}

// Auditor keeps audit trail entries (internal/audit.Chain): the engine adds
// one per chunk of rows it commits, and writes them at the end of each
// Execute.
type Auditor interface {
	Add(audit.Entry)
	Flush(ctx context.Context) error
}

// Lifecycle is what the batches' service (internal/batches) does beside
// the engine: Terminal follows a batch's terminal state, perhaps more than
// once (its in-flight slot back, its webhook queued); Announce queues a
// lifecycle webhook event (webhook.Queued, webhook.InProgress) of a batch,
// perhaps more than once (docs/api.md "Webhooks"); RetryInput writes and
// records the input file of a retry batch when its plan finds it missing,
// since POST /retry answers before it exists.
type Lifecycle interface {
	Terminal(ctx context.Context, b batch.Batch) error
	Announce(ctx context.Context, b batch.Batch, event string) error
	// Announces reports whether b's events go anywhere (its webhook_url,
	// an operator endpoint): only then is in_progress recorded and queued.
	Announces(b batch.Batch) bool
	RetryInput(ctx context.Context, b batch.Batch) (file.File, error)
}

// Deps are what New builds an engine from (docs/design.md "Wiring"). Every
// part is required but the options at the end; New names a missing one.
type Deps struct {
	Store    Store
	Blobs    Blobs
	Queue    Queue
	Provider Provider
	Models   *config.Models
	Set      resources.Set
	Log      *slog.Logger
	// Now is the clock, one for every service (app.New).
	Now func() time.Time
	// Govern governs batches by budget and key (internal/govern).
	Govern Governor
	// Lifecycle is told of terminal batches and writes retry inputs
	// (internal/batches).
	Lifecycle Lifecycle
	// Workflow and Native run on the engine they serve: a workflow record
	// and a native step commit, take slots and ask what they may spend
	// through it, and the engine hands them their chunks. The cycle is
	// closed inside New, which builds them from the engine it is building,
	// so no hook is assigned after New returns and none is ever nil.
	Workflow func(*Engine) Workflow
	Native   func(*Engine) Delegate
	// Audit keeps the audit trail's entries of rows run (internal/audit).
	Audit Auditor
	// Recent, if set, counts the committed rows' upstream answers for the
	// panel's Operations page (internal/ops).
	Recent *metrics.Recent

	// Options: a zero one takes its default.
	Chunks plan.Limits
	Lease  time.Duration
}

// New builds an engine from d, refusing one without a required part.
func New(d Deps) (*Engine, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	e := &Engine{
		Store: d.Store, Blobs: d.Blobs, Queue: d.Queue, Provider: d.Provider, Models: d.Models, Set: d.Set, Log: d.Log,
		Now: d.Now, Govern: d.Govern, Lifecycle: d.Lifecycle, Audit: d.Audit, Chunks: d.Chunks, Lease: d.Lease,
		Recent: d.Recent,
	}
	if e.Workflow = d.Workflow(e); e.Workflow == nil {
		return nil, errors.New("engine: Deps.Workflow built no workflow runner")
	}
	if e.Native = d.Native(e); e.Native == nil {
		return nil, errors.New("engine: Deps.Native built no native delegate")
	}
	return e, nil
}

// check names the first required part d lacks.
func (d Deps) check() error {
	for _, p := range []struct {
		name    string
		missing bool
	}{
		{"Store", d.Store == nil}, {"Blobs", d.Blobs == nil}, {"Queue", d.Queue == nil},
		{"Provider", d.Provider == nil}, {"Models", d.Models == nil}, {"Log", d.Log == nil},
		{"Now", d.Now == nil}, {"Govern", d.Govern == nil}, {"Lifecycle", d.Lifecycle == nil},
		{"Workflow", d.Workflow == nil}, {"Native", d.Native == nil}, {"Audit", d.Audit == nil},
	} {
		if p.missing {
			return fmt.Errorf("engine: Deps.%s is missing", p.name)
		}
	}
	return nil
}

// Engine holds what the workers share. New builds it from Deps with every
// part set; the package's tests build literals of the parts they use
// (testEngine fills the rest).
type Engine struct {
	Store     Store
	Blobs     Blobs
	Queue     Queue
	Models    *config.Models
	Provider  Provider
	Set       resources.Set
	Log       *slog.Logger
	Now       func() time.Time
	Govern    Governor
	Lifecycle Lifecycle
	Audit     Auditor
	Workflow  Workflow
	// Native runs the chunks it Takes instead of the executors.
	Native Delegate
	// Recent counts committed rows by upstream answer (nil: not counted).
	Recent *metrics.Recent

	// Chunks bound a chunk's rows, bytes and slots (plan.Limits; zero
	// fields take its defaults).
	Chunks plan.Limits
	// Lease is how long a claimed chunk stays its run's without a
	// heartbeat (default a minute); the tick takes over expired ones.
	Lease time.Duration
	// BeforeCommit, if set, runs after a chunk's parts are written and
	// before it commits; an error there is a crash at the worst moment
	// (docs/design.md "Fault model"). Fault tests set it on a built engine.
	BeforeCommit func(batch.Chunk) error
	// NoContinuations sends every claimed chunk as its work message instead
	// of running it in the committing invocation (docs/design.md
	// "Scheduling", continuation): for tests whose faults are injected per
	// delivered message, which a continuation never is.
	NoContinuations bool
}

func (e *Engine) limits() plan.Limits { return e.Chunks.OrDefaults() }

func (e *Engine) lease() time.Duration { return cmp.Or(max(e.Lease, 0), time.Minute) }

func (e *Engine) send(ctx context.Context, queueKey string, m msg.Message) error {
	return e.Queue.Send(ctx, queueKey, m, 0)
}

// Route is what batch b's rows may run on (provider.Route): b's
// fallback_model, and the models b's key may use, the fallbacks included
// (docs/api.md "Budgets, revocation and allow-lists"). The executor,
// internal/wfhost and internal/native's direct rows all take it from here.
func (e *Engine) Route(ctx context.Context, b batch.Batch) (provider.Route, error) {
	r := provider.Route{Fallback: b.Fallback()}
	allowed, err := e.Govern.Allowed(ctx, b)
	if err != nil {
		return r, fmt.Errorf("allow-list of batch %s: %w", b.ID, err)
	}
	r.Allowed = allowed
	return r, nil
}

// Admit is whether batch b's chunk c may still spend (Governor.Admit): a
// code and why when its key was disabled or its tenant's budget is spent,
// "" otherwise. The executor asks it as a chunk's
// run starts, internal/native before each step that spends (docs/design.md
// "Governance").
func (e *Engine) Admit(ctx context.Context, b batch.Batch, c batch.Chunk, more ...batch.Chunk) (code, message string, err error) {
	code, message, err = e.Govern.Admit(ctx, b, c, more...)
	if err != nil {
		return "", "", fmt.Errorf("admit chunk %d of %s: %w", c.Index, b.ID, err)
	}
	return code, message, nil
}

// failedID is id when err is not nil.
func failedID(id string, err error) string {
	if err != nil {
		return id
	}
	return ""
}

// gone is err, but nil for a batch that is gone (store.ErrBatchNotFound):
// its messages are dropped.
func gone(err error) error {
	if errors.Is(err, store.ErrBatchNotFound) {
		return nil
	}
	return err
}

// ErrStop, wrapped in a run's error, leaves the run to its message's next
// delivery rather than a quick retry (retrySoon): the run stopped for want
// of time or lease. internal/wfhost returns it for a workflow record out
// of time before it made progress.
var ErrStop = errors.New("engine: stopping before the deadline")
