// Package batch owns the Batch (docs/api.md "Batches") and its chunks: the object, its
// status lifecycle with the allowed transitions, and the per-chunk records
// that carry execution state (docs/design.md "Chunks").
package batch

import (
	"fmt"
	"slices"
	"time"

	"github.com/relaybatch/relay/internal/jsonl"
)

// Status is a batch's state.
//
//	validating → in_progress → finalizing → completed
//	validating → failed                      (the input broke a rule)
//	validating → expired                     (its window ended before it could be planned)
//	in_progress → finalizing → expired       (the window passed; rows left get batch_expired)
//	in_progress → finalizing → failed        (its input changed after the plan: input_file_changed)
//	validating|in_progress → cancelling → cancelled
//	scheduled → cancelled                    (a template, docs/api.md "Templates")
type Status string

const (
	Validating Status = "validating"
	Failed     Status = "failed"
	InProgress Status = "in_progress"
	Finalizing Status = "finalizing"
	Completed  Status = "completed"
	Expired    Status = "expired"
	Cancelling Status = "cancelling"
	Cancelled  Status = "cancelled"
	Scheduled  Status = "scheduled"
)

var transitions = map[Status][]Status{
	Validating: {InProgress, Failed, Cancelling, Expired},
	InProgress: {Finalizing, Cancelling},
	Finalizing: {Completed, Expired, Cancelled, Failed},
	Cancelling: {Finalizing, Cancelled},
	Scheduled:  {Cancelled},
}

// Stopping reports whether s is a cancel's: rows not yet started get
// batch_cancelled lines, and workflow records stop.
func (s Status) Stopping() bool {
	return s == Cancelling || s == Cancelled
}

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool {
	return s == Completed || s == Failed || s == Expired || s == Cancelled
}

// Counts are the request counts.
type Counts struct {
	Total     int64 `json:"total" dynamodbav:"total"`
	Completed int64 `json:"completed" dynamodbav:"completed"`
	Failed    int64 `json:"failed" dynamodbav:"failed"`
}

// Usage is summed token usage, in OpenAI's shape. The two details are
// embedded so that they nest in JSON (input_tokens_details, a JSON name on
// an embedded field) but lie flat in the stored item, where a commit adds
// to them with one SET even on an item written before they existed.
type Usage struct {
	InputTokens         int64 `json:"input_tokens" dynamodbav:"input_tokens"`
	InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens" dynamodbav:"output_tokens"`
	OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int64 `json:"total_tokens" dynamodbav:"total_tokens"`
}

// InputTokensDetails: the input tokens the upstream read from its prompt
// cache (OpenAI's cached_tokens, Anthropic's cache_read_input_tokens).
type InputTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens" dynamodbav:"cached_tokens"`
}

// OutputTokensDetails: the output tokens spent on reasoning.
type OutputTokensDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens" dynamodbav:"reasoning_tokens"`
}

// Errors is the errors field of a failed batch.
type Errors struct {
	Object string            `json:"object"`
	Data   []jsonl.LineError `json:"data"`
}

// Object is one S3 object of an input file, with its size, so a byte range
// of the file maps onto ranged GETs of its objects.
type Object struct {
	Key  string `json:"k" dynamodbav:"k"`
	Size int64  `json:"s" dynamodbav:"s"`
	// ETag, when set, is the object's ETag when its upload was first seen
	// landed: reads ask for exactly that object (If-Match), so one replaced
	// since fails the batch with input_file_changed (SECURITY.md "Presigned URLs").
	ETag string `json:"e,omitempty" dynamodbav:"e,omitempty"`
}

// Batch is the OpenAI Batch object plus what the engine needs. Fields
// without a JSON name stay internal.
type Batch struct {
	ID               string            `json:"id" dynamodbav:"id"`
	Object           string            `json:"object" dynamodbav:"-"`
	Endpoint         string            `json:"endpoint" dynamodbav:"endpoint"`
	Errors           *Errors           `json:"errors" dynamodbav:"-"`
	InputFileID      string            `json:"input_file_id" dynamodbav:"input_file_id"`
	CompletionWindow string            `json:"completion_window" dynamodbav:"completion_window"`
	Status           Status            `json:"status" dynamodbav:"status"`
	OutputFileID     *string           `json:"output_file_id" dynamodbav:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id" dynamodbav:"error_file_id"`
	CreatedAt        int64             `json:"created_at" dynamodbav:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at" dynamodbav:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at" dynamodbav:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at" dynamodbav:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at" dynamodbav:"completed_at"`
	FailedAt         *int64            `json:"failed_at" dynamodbav:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at" dynamodbav:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at" dynamodbav:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at" dynamodbav:"cancelled_at"`
	RequestCounts    Counts            `json:"request_counts" dynamodbav:"counts"`
	Metadata         map[string]string `json:"metadata" dynamodbav:"metadata"`
	Model            *string           `json:"model" dynamodbav:"model"`
	Usage            Usage             `json:"usage" dynamodbav:"usage"`
	// Extensions.
	Priority           int     `json:"priority" dynamodbav:"priority"`
	TemplateID         *string `json:"template_id" dynamodbav:"template_id"`
	RetryOf            *string `json:"retry_of" dynamodbav:"retry_of"`
	DeadLetterCount    int64   `json:"dead_letter_count" dynamodbav:"dead_letter_count"`
	WebhookURL         *string `json:"webhook_url" dynamodbav:"webhook_url"`
	FallbackModel      *string `json:"fallback_model" dynamodbav:"fallback_model"`
	Schedule           *string `json:"schedule,omitempty" dynamodbav:"schedule"`
	ScheduleTimezone   *string `json:"schedule_timezone,omitempty" dynamodbav:"schedule_timezone"`
	OutputExpiresAfter *int64  `json:"-" dynamodbav:"output_expires_after"`
	// Execution is how the batch ran (ExecDirect, ExecNative, ExecHybrid;
	// internal/native sets the last two).
	Execution string `json:"execution" dynamodbav:"execution"`
	// WebhookDeliveries summarizes the completion webhook's attempts; it is
	// read from the delivery record, never stored on the batch.
	WebhookDeliveries *WebhookSummary `json:"webhook_deliveries,omitempty" dynamodbav:"-"`

	Tenant string `json:"-" dynamodbav:"tenant"`
	// KeyID is the key that submitted the batch (a template's runs, the
	// template's key), shown as submitted_by (docs/api.md "Extensions").
	KeyID string `json:"submitted_by,omitempty" dynamodbav:"key_id"`
	// Cost is what its tokens cost in USD, when every model it used has a
	// price (docs/api.md "Extensions"); read from its usage, never stored.
	Cost *float64 `json:"cost,omitempty" dynamodbav:"-"`
	// Modes says, beside Cost, how many of its rows each way of running
	// them answered and what they cost (docs/api.md "Extensions"); read
	// from its usage, never stored.
	Modes *Modes `json:"modes,omitempty" dynamodbav:"-"`
	// EstimatedCompletionAt is when the batch should end at the rate its
	// rows have settled (ETA; docs/api.md "Extensions"): null until known,
	// computed when it is read, never stored.
	EstimatedCompletionAt *int64 `json:"estimated_completion_at" dynamodbav:"-"`
	// MaxCost is the create's max_cost in USD (docs/api.md "Extensions"):
	// a chunk whose rows could take the batch's cost past it does not run,
	// its rows end cost_limit_reached. CostHolds are, by chunk index, the
	// most (Chunk.MostCost) of the chunks admitted to run and not committed
	// yet: what they may be spending beside the batch's usage. A batch with
	// a MaxCost has the map from its create (empty), so a commit can take
	// its chunk's hold out of it.
	MaxCost   *float64           `json:"max_cost,omitempty" dynamodbav:"max_cost,omitempty"`
	CostHolds map[string]float64 `json:"-" dynamodbav:"cost_holds"`
	// CompleteBy is the create's complete_by (Unix seconds; docs/api.md
	// "Extensions"): a native model's rows move to direct in time for it.
	CompleteBy *int64 `json:"complete_by,omitempty" dynamodbav:"complete_by,omitempty"`
	// AnthropicBetas and UserProfileID are a message batch create's
	// anthropic-beta and anthropic-user-profile-id headers, sent with each
	// of its rows upstream (docs/api.md "Anthropic Message Batches").
	AnthropicBetas []string `json:"-" dynamodbav:"anthropic_betas,omitempty"`
	UserProfileID  string   `json:"-" dynamodbav:"user_profile_id,omitempty"`
	// AnnouncedInProgress records that the batch's in_progress webhook
	// event was queued (internal/webhook/delivery), when its first chunk
	// started.
	AnnouncedInProgress bool `json:"-" dynamodbav:"announced_in_progress,omitempty"`
	// CSVModel is the create's model (docs/api.md "Batches"): the model of
	// every row of a CSV input and of every simple row of a JSONL one.
	CSVModel    string            `json:"-" dynamodbav:"csv_model"`
	ErrorList   []jsonl.LineError `json:"-" dynamodbav:"errors"`
	Input       []Object          `json:"-" dynamodbav:"input"` // the JSONL the chunks are ranges of
	ChunksTotal int               `json:"-" dynamodbav:"chunks_total"`
	ChunksDone  int               `json:"-" dynamodbav:"chunks_done"`
	// Recheck, when set, is the earliest the tick looks at the batch again
	// (see Due).
	Recheck int64 `json:"-" dynamodbav:"recheck"`
	// FinalizeDue is when the tick sends a finalize message that may have
	// been lost: set by the commit of the last chunk.
	FinalizeDue int64 `json:"-" dynamodbav:"finalize_due"`
	// Settled records that what follows the batch's terminal state
	// (engine.Lifecycle.Terminal: its completion webhook queued, its slots
	// given back) is done; until then the tick finalizes it again (Due).
	Settled bool `json:"-" dynamodbav:"settled,omitempty"`
	// Started is set once the batch's chunks are in the ready index (or
	// drained): until then its plan is due again.
	Started bool `json:"-" dynamodbav:"started"`
	// PlanLease keeps two dispatchers from planning one batch at once.
	PlanLease int64 `json:"-" dynamodbav:"plan_lease"`
	// ExpiredRows counts rows that got batch_expired, which makes the
	// terminal status expired rather than completed.
	ExpiredRows int64 `json:"-" dynamodbav:"expired_rows"`
	// Progress counts the rows of chunks still running that their runs
	// reported done (docs/design.md "Progress"): Out adds it to
	// RequestCounts; each chunk's commit takes its share out again.
	ProgressCompleted int64 `json:"-" dynamodbav:"progress_completed"`
	ProgressFailed    int64 `json:"-" dynamodbav:"progress_failed"`
	// CancelledRows counts rows that got batch_cancelled (a message
	// batch's canceled count).
	CancelledRows int64 `json:"-" dynamodbav:"cancelled_rows"`
}

// Modes are a batch's rows and cost by how they ran: on a provider's
// batch API, directly on their model, or directly on its fallback.
type Modes struct {
	Native   ModeUse `json:"native"`
	Direct   ModeUse `json:"direct"`
	Fallback ModeUse `json:"fallback"`
}

// ModeUse is the rows a mode answered and their cost in USD.
type ModeUse struct {
	Rows int64   `json:"rows"`
	Cost float64 `json:"cost"`
}

// Out returns the batch as clients see it.
func (b Batch) Out() Batch {
	b.Object = "batch"
	if b.Execution == "" {
		b.Execution = ExecDirect
	}
	if len(b.ErrorList) > 0 {
		b.Errors = &Errors{Object: "list", Data: b.ErrorList}
	}
	// Rows of running chunks count as they end (docs/design.md
	// "Progress"), never past the total.
	n := &b.RequestCounts
	n.Completed += max(min(b.ProgressCompleted, n.Total-n.Completed-n.Failed), 0)
	n.Failed += max(min(b.ProgressFailed, n.Total-n.Completed-n.Failed), 0)
	b.ProgressCompleted, b.ProgressFailed = 0, 0
	return b
}

// ETA is when in-progress batch b (as Out shows it) ends at now, its rows
// left settling at the rate its settled ones did since it started; nil
// until a row settled, and once it is no longer in progress.
func (b Batch) ETA(now time.Time) *int64 {
	n := b.RequestCounts
	done := n.Completed + n.Failed
	if b.Status != InProgress || b.InProgressAt == nil || done <= 0 || n.Total <= 0 {
		return nil
	}
	elapsed := now.Sub(time.Unix(*b.InProgressAt, 0)).Seconds()
	left := float64(max(n.Total-done, 0))
	at := now.Add(time.Duration(left * elapsed / float64(done) * float64(time.Second))).Unix()
	return &at
}

// endedAt is when b entered its terminal state (Unix seconds).
func (b *Batch) endedAt() int64 {
	var at int64
	for _, t := range []*int64{b.CompletedAt, b.FailedAt, b.ExpiredAt, b.CancelledAt} {
		if t != nil {
			at = max(at, *t)
		}
	}
	return at
}

// To moves b to status next at now, setting the timestamp of the state it
// enters; it refuses a transition the lifecycle does not allow.
func (b *Batch) To(next Status, now time.Time) error {
	allowed := false
	for _, s := range transitions[b.Status] {
		if s == next {
			allowed = true
		}
	}
	if !allowed {
		return fmt.Errorf("batch %s: %s → %s is not allowed", b.ID, b.Status, next)
	}
	t := now.Unix()
	stamp := map[Status]**int64{
		InProgress: &b.InProgressAt, Finalizing: &b.FinalizingAt, Completed: &b.CompletedAt,
		Failed: &b.FailedAt, Expired: &b.ExpiredAt, Cancelling: &b.CancellingAt, Cancelled: &b.CancelledAt,
	}[next]
	if stamp != nil && *stamp == nil {
		*stamp = &t
	}
	b.Status = next
	return nil
}

// Grace is how long the tick leaves a step (a plan, a drain, a finalize) to
// the message that asked for it before asking again: a duplicate message
// is harmless, a lost one costs this much.
const Grace = 20 * time.Second

// Due is when the periodic tick must look at b next, and whether it must
// at all: the plan of a batch whose plan message may be lost, the drain of
// a cancelled batch, the end of its window, the finalize of a batch whose
// chunks are done, the follow-ups of a terminal one not Settled. Between
// those times the tick never reads b, so its cost does not grow with the
// number of active batches (docs/design.md "Tick").
func (b *Batch) Due() (int64, bool) {
	if b.Status == Scheduled || b.Status.Terminal() && (b.Settled || b.Schedule != nil) {
		return 0, false
	}
	var at int64
	switch {
	case b.Status.Terminal():
		at = b.endedAt() + int64(Grace/time.Second)
	case b.ChunksTotal == 0 || !b.Started: // planning (or cancelled before it planned)
		at = max(b.PlanLease, b.CreatedAt+int64(Grace/time.Second))
		if b.ExpiresAt != nil {
			at = min(at, *b.ExpiresAt)
		}
	case b.ChunksDone >= b.ChunksTotal || b.Status == Finalizing:
		at = b.FinalizeDue
	case b.Status == Cancelling:
		at = *b.CancellingAt + int64(Grace/time.Second)
	case b.ExpiresAt != nil:
		at = *b.ExpiresAt
	default:
		return 0, false
	}
	return max(at, b.Recheck), true
}

// Step is what moves a batch on from where it is (NextStep).
type Step int

const (
	// StepNone: nothing to send; the batch is terminal or a template, or
	// its chunks' leases carry it.
	StepNone Step = iota
	// StepExpire: its window ended before it was planned; it ends expired.
	StepExpire
	StepPlan
	StepFinalize
	StepDrain
)

// NextStep is the step that moves b on at now, as the tick takes it when
// Due (docs/design.md "Tick") and relay admin batch requeue sends it: its
// plan while it is not started, its finalize once every chunk is done, its
// drain while cancelling or past its window.
func (b *Batch) NextStep(now time.Time) Step {
	switch {
	case b.Status.Terminal() && !b.Settled && b.Schedule == nil:
		return StepFinalize // its follow-ups (Due)
	case b.Status.Terminal() || b.Status == Scheduled:
		return StepNone
	case b.ChunksTotal == 0 && b.Status == Validating && b.PastExpiry(now):
		return StepExpire
	case b.ChunksTotal == 0 || !b.Started:
		return StepPlan
	case b.ChunksDone >= b.ChunksTotal || b.Status == Finalizing:
		return StepFinalize
	case b.Status == Cancelling || b.PastExpiry(now):
		return StepDrain
	}
	return StepNone
}

// Expired reports whether the completion window has passed at now.
func (b *Batch) PastExpiry(now time.Time) bool {
	return b.ExpiresAt != nil && now.Unix() >= *b.ExpiresAt
}

// ChunkState is a chunk's execution state.
//
//	pending → claimed → done
//
// A chunk is claimed for one run at a time: the run id, a lease the
// executor's heartbeat renews, and a share of its model's capacity
// (Slots of capacity shard Shard) are set in the same transaction that
// takes it, and removed in the one that commits it (docs/design.md
// "Scheduling"). An expired lease is taken over by the tick with a new run.
type ChunkState string

const (
	ChunkPending ChunkState = "pending" // planned, waiting for capacity
	ChunkClaimed ChunkState = "claimed" // held by run Run until Lease, holding Slots
	ChunkDone    ChunkState = "done"    // committed: its part is written, counters added
)

// Chunk is rows of one model of the batch's input (docs/design.md
// "Chunks"): Rows rows, the first of them row FirstRow, within bytes
// [Start, End) of the input. Rows that sit one after another are one span;
// a chunk of rows spread among other models' rows lists its Spans. Its
// i-th row is input row Row(i).
type Chunk struct {
	Batch    string `dynamodbav:"batch"`
	Tenant   string `dynamodbav:"tenant"`
	Index    int    `dynamodbav:"index"`
	Start    int64  `dynamodbav:"start"`
	End      int64  `dynamodbav:"end"`
	FirstRow int    `dynamodbav:"first_row"`
	Rows     int    `dynamodbav:"rows"`
	// Spans are the chunk's runs of contiguous rows, in row order, when it
	// has more than one; empty, it is the one span of Rows rows from
	// FirstRow at [Start, End) (so chunks stored before spans read the same).
	Spans Spans      `dynamodbav:"spans,omitempty"`
	Model string     `dynamodbav:"model"`
	State ChunkState `dynamodbav:"state"`
	// NextSame is the index of the batch's next chunk of the same model,
	// -1 when none: a model's ready entry steps through them.
	NextSame int `dynamodbav:"next_same"`
	// Fallback says the chunk's rows failed on their own model and run on
	// Model as their fallback: a chunk of the fallback's rows, run on its
	// capacity (docs/design.md "Scheduling", fallback rows).
	Fallback bool `dynamodbav:"fallback,omitempty"`
	// NoCall says every row of the chunk is refused without an upstream
	// call (provider.Refusal): the chunk has no ready entry and is claimed
	// without capacity when its batch starts, so its rows never wait for
	// the model's slots (docs/design.md "Scheduling", rows settled without
	// a call).
	NoCall bool `dynamodbav:"no_call,omitempty"`
	// Invalid says the chunk is a workflow record the plan refused (docs/api.md
	// "Workflow records"): it is outside its model's chain (NextSame, ready
	// entries) and runs alone, holding no capacity, to its error line.
	Invalid bool `dynamodbav:"invalid,omitempty"`
	// MostCost is, for a batch with a max_cost, the most the chunk's rows
	// may cost in USD: each row's input tokens and max_tokens on the
	// priciest model it may run on, its own or a fallback (docs/api.md
	// "Extensions", max_cost). A chunk cut from another keeps its most.
	MostCost float64 `dynamodbav:"most_cost,omitempty"`
	// PriorAttempts is, for a chunk of fallback rows, the upstream attempts
	// each of its rows made on its own model before it was owed the
	// fallback: a row's generation counts them with the fallback's.
	PriorAttempts int `dynamodbav:"prior_attempts,omitempty"`

	// Set while claimed.
	Run      string `dynamodbav:"run"`
	Lease    int64  `dynamodbav:"lease"` // unix milliseconds
	Attempts int    `dynamodbav:"attempts"`
	Slots    int    `dynamodbav:"slots"`
	Shard    int    `dynamodbav:"shard"`

	// Set when done. Attempt names the run whose parts were committed: each
	// run writes parts under its own keys, so two runs of one chunk (a
	// duplicate delivery) never mix their lines.
	Attempt  string `dynamodbav:"attempt"`
	Pattern  string `dynamodbav:"pattern"` // one byte per row, the file its line is in (part.KindOut, part.KindErr)
	OutBytes int64  `dynamodbav:"out_bytes"`
	ErrBytes int64  `dynamodbav:"err_bytes"`
	// Next is the chunk the commit claimed for the same slots, so a run
	// whose commit took effect although its call failed can still send it.
	Next *Next `dynamodbav:"next"`
	// Dead is set when the chunk was closed by the dead-letter path.
	Dead bool `dynamodbav:"dead"`
	// Reported is what runs of the chunk added to the batch's progress
	// (completed and failed rows); its commit takes it out again.
	ReportedCompleted int64 `dynamodbav:"reported_completed"`
	ReportedFailed    int64 `dynamodbav:"reported_failed"`
}

// RunsAlone says the chunk is in no ready entry's chain and is claimed
// without capacity: its rows are all refused without an upstream call
// (NoCall), or it is a workflow record the plan refused (Invalid)
// (docs/design.md "Scheduling").
func (c Chunk) RunsAlone() bool { return c.NoCall || c.Invalid }

// Span is a run of a chunk's rows that follow each other in the input:
// rows [Row, Row+Rows) at bytes [Start, End).
type Span struct {
	Start int64 `dynamodbav:"s"`
	End   int64 `dynamodbav:"e"`
	Row   int   `dynamodbav:"r"`
	Rows  int   `dynamodbav:"n"`
}

// Runs are c's spans: Spans, or the one span its Start, End, FirstRow and
// Rows describe.
func (c Chunk) Runs() []Span {
	if len(c.Spans) > 0 {
		return c.Spans
	}
	return []Span{{Start: c.Start, End: c.End, Row: c.FirstRow, Rows: c.Rows}}
}

// Row is the input row index of c's i-th row (0 ≤ i < c.Rows): the one
// place a chunk's row maps to the batch's row (line ids, dead letters,
// native results).
func (c Chunk) Row(i int) int {
	if len(c.Spans) == 0 {
		return c.FirstRow + i
	}
	j := i
	for _, s := range c.Spans {
		if j < s.Rows {
			return s.Row + j
		}
		j -= s.Rows
	}
	panic(fmt.Sprintf("chunk %d of %s: row %d of %d", c.Index, c.Batch, i, c.Rows))
}

// Bytes is the size of c's rows in the input, without the other rows
// between its spans.
func (c Chunk) Bytes() int64 {
	var n int64
	for _, s := range c.Runs() {
		n += s.End - s.Start
	}
	return n
}

// Next names a claimed chunk: what a work message carries.
type Next struct {
	Tenant  string `json:"tenant" dynamodbav:"tenant"`
	Batch   string `json:"batch_id" dynamodbav:"batch"`
	Chunk   int    `json:"chunk" dynamodbav:"chunk"`
	Run     string `json:"run" dynamodbav:"run"`
	Attempt int    `json:"attempt" dynamodbav:"attempt"`
}

// PartKey is where one run (attempt) of a chunk writes its lines of one
// kind ("out", "err", "usage"): under the tenant and the batch, so they are
// listed, scoped and expired together.
func PartKey(tenant, batchID string, chunk int, attempt, kind string) string {
	return fmt.Sprintf("%s%s.%s", ChunkPartsPrefix(tenant, batchID, chunk), attempt, kind)
}

// ChunkPartsPrefix is where the parts of every run of one chunk live.
func ChunkPartsPrefix(tenant, batchID string, chunk int) string {
	return fmt.Sprintf("%s%06d-", PartsPrefix(tenant, batchID), chunk)
}

// PartsPrefix is where all parts of a batch live.
func PartsPrefix(tenant, batchID string) string {
	return fmt.Sprintf("parts/%s/%s/", tenant, batchID)
}

// Parts returns the committed part keys of a done chunk.
func (c Chunk) Parts(kind string) string {
	return PartKey(c.Tenant, c.Batch, c.Index, c.Attempt, kind)
}

// Fallback is the batch's fallback model, "" for none.
func (b Batch) Fallback() string {
	if b.FallbackModel != nil {
		return *b.FallbackModel
	}
	return ""
}

// FinalStatus is the terminal status a finalized batch ends in: cancelled
// once a cancel was asked for (whatever ran meanwhile), expired when a row
// got batch_expired, else completed, however many rows failed (OpenAI's
// batches complete with failed rows; failed is for an input that breaks a
// rule, see InvalidInputStatus).
//
// A batch whose input changed after it was planned (CodeInputChanged in
// its errors) ends failed: some of its rows could not be read as validated.
func FinalStatus(b *Batch) Status {
	switch {
	case b.CancellingAt != nil:
		return Cancelled
	case slices.ContainsFunc(b.ErrorList, func(e jsonl.LineError) bool { return e.Code == CodeInputChanged || e.Code == CodeInputMissing }):
		return Failed
	case b.ExpiredRows > 0:
		return Expired
	}
	return Completed
}

// CodeInputChanged is the error of a batch whose input object is not the
// one validated and planned: a presigned upload replaced since
// (SECURITY.md "Presigned URLs").
const CodeInputChanged = "input_file_changed"

// InputChanged is the error a batch records when its input changed.
func InputChanged(fileID string) jsonl.LineError {
	return jsonl.LineError{Code: CodeInputChanged, Message: fmt.Sprintf(
		"input file %s changed after it was uploaded and validated: upload it again as a new file", fileID)}
}

// CodeInputMissing is the error of a batch whose input object is gone, and
// of each row of it that was not run.
const CodeInputMissing = "input_file_missing"

// InputMissing is the batch error recorded when the input object of file
// fileID is gone before all its rows ran.
func InputMissing(fileID string) jsonl.LineError {
	return jsonl.LineError{Code: CodeInputMissing, Message: fmt.Sprintf(
		"input file %s is gone: its rows that had not run were not run", fileID)}
}

// AddError is an update (UpdateBatch's fn) that records e in the batch's
// errors once.
func AddError(e jsonl.LineError) func(*Batch) error {
	return func(b *Batch) error {
		if !slices.Contains(b.ErrorList, e) {
			b.ErrorList = append(b.ErrorList, e)
		}
		return nil
	}
}

// InvalidInputStatus is where a batch whose input cannot run ends from
// status s: cancelled if it was being cancelled, else failed.
func InvalidInputStatus(s Status) Status {
	if s == Cancelling {
		return Cancelled
	}
	return Failed
}
