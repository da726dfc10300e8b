// Package engine runs batches: the dispatcher plans them into chunks and
// claims chunks within each model's capacity, the executor runs a chunk's
// rows and commits its part (built by internal/part), the dead-letter
// handler closes chunks that kept failing, and the finalizer records the
// output and error files (docs/design.md "Shape", "Chunks", "Scheduling").
package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
)

// Engine holds what the workers share; an option left zero takes its
// default.
type Engine struct {
	Store    *store.Store
	Blobs    *blob.Store
	Queue    *queue.Sender
	Models   *config.Models
	Provider *provider.Client
	Set      resources.Set
	Log      *slog.Logger
	// WebhookClient makes workflow callbacks (internal/wfhost), and its
	// Policy is what webhook_url is checked against at create
	// (internal/batches; app.New gives the webhook deliveries the same
	// client); nil means webhook.NewClient(webhook.Policy{}).
	WebhookClient *webhook.Client

	// ChunkRows (RELAY_CHUNK_ROWS, default 512) and ChunkBytes (default
	// 4 MiB of input) bound a chunk.
	ChunkRows  int
	ChunkBytes int64
	// ChunkSlots is how many slots of its model's max_concurrency a chunk
	// claims, so how many of its rows run at once (default 32, never more
	// than ChunkRows).
	ChunkSlots int
	// Lease is how long a claimed chunk stays its run's without a
	// heartbeat (default a minute); the tick takes over expired ones.
	Lease time.Duration
	// MaxInflight caps each tenant's batches that have not ended
	// (RELAY_MAX_INFLIGHT_BATCHES); 0 is no cap. internal/batches takes a
	// batch's slot when it records it (its limits.go), the engine gives it
	// back when the batch ends (releaseInflight).
	MaxInflight int
	// StatusRefresh is how often a running chunk re-reads its batch's status
	// to notice a cancel (default 3 s; a cached read, never one per row).
	StatusRefresh time.Duration
	// OnTerminal, if set, is called once a batch reaches a terminal state
	// (webhooks hang off it).
	OnTerminal func(ctx context.Context, b batch.Batch) error
	// BeforeCommit, if set, runs after a chunk's parts are written and
	// before it commits; an error there is a crash at the worst moment
	// (docs/design.md "Fault model").
	BeforeCommit func(batch.Chunk) error
	// RunWorkflow drives the workflow record req, the one row of chunk c
	// (docs/api.md "Workflow records"), from its checkpoint until it
	// commits its line (CommitRecord), waits or hands over (SendAgain).
	// runCtx ends before the invocation does; status is the batch's,
	// kept fresh. app.New sets it (internal/wfhost); nil refuses workflow
	// records with an invalid_workflow line (runRecord).
	RunWorkflow func(ctx, runCtx context.Context, b batch.Batch, c batch.Chunk, req jsonl.Request, status func() batch.Status) error
	// Workflows tunes workflow records (tests shorten callback backoff).
	Workflows WorkflowOptions
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// The chunk defaults (512 rows of 32 slots) are sized in docs/design.md
// "Chunk size" and "Hot items".
func (e *Engine) chunkRows() int {
	if e.ChunkRows > 0 {
		return e.ChunkRows
	}
	return 512
}

func (e *Engine) chunkBytes() int64 {
	if e.ChunkBytes > 0 {
		return e.ChunkBytes
	}
	return 4 << 20
}

// chunkSlots is how many of its model's slots a chunk claims: never more
// than it has rows to use them.
func (e *Engine) chunkSlots() int {
	slots := 32
	if e.ChunkSlots > 0 {
		slots = e.ChunkSlots
	}
	return min(slots, e.chunkRows())
}

func (e *Engine) lease() time.Duration {
	if e.Lease > 0 {
		return e.Lease
	}
	return time.Minute
}

func (e *Engine) send(ctx context.Context, queueKey string, m msg.Message) error {
	return e.Queue.Send(ctx, queueKey, m, 0)
}

// ErrStop, wrapped in a run's error, leaves the run to its message's next
// delivery rather than a quick retry (retrySoon): the run stopped for want
// of time or lease. internal/wfhost returns it for a workflow record out
// of time before it made progress.
var ErrStop = errors.New("engine: stopping before the deadline")

// ExecutorConcurrency is how many executor invocations the local runtime
// runs at once: enough for every model's max_concurrency to be in flight
// (each invocation holds at least one chunk of chunkSlots slots), so the
// models bound upstream concurrency, not the function.
func (e *Engine) ExecutorConcurrency() int {
	n := 0
	for _, m := range e.Models.Models {
		slots := min(e.chunkSlots(), m.MaxConcurrency)
		n += (m.MaxConcurrency + slots - 1) / slots
	}
	return max(n, 4)
}
