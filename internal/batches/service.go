// Package batches is the OpenAI Batch API (docs/api.md "Batches", "Output
// and error files", "Templates", "Usage") on the engine: a create is
// validated and recorded here, with its tenant's in-flight slot (docs/api.md
// "Limits"), and the engine (internal/engine) plans, runs and finalizes it
// (docs/design.md "Chunks"). Cron templates are batches with a schedule;
// their runs are recorded by the same path. internal/anthropic creates
// Message Batches and reads their lines with this service.
package batches

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/files"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/schedule"
	"github.com/relaybatch/relay/internal/store"
)

// Service runs the batches of the API on the engine: internal/api serves
// its routes, internal/anthropic creates and reads Message Batches with it,
// and the scheduler function is its Fire.
type Service struct {
	Models *config.Models
	Log    *slog.Logger
	// Now is the clock (required), the engine's, so the times recorded
	// here agree with the engine's.
	Now func() time.Time
	// Store, Blobs and Queue are the table, the bucket and the queues the
	// engine runs on.
	Store Store
	Blobs Blobs
	Queue Queue
	// MaxInflight caps each tenant's batches that have not ended
	// (RELAY_MAX_INFLIGHT_BATCHES, limits.go); 0 is no cap.
	MaxInflight int
	// MaxTemplates caps each tenant's scheduled templates
	// (RELAY_MAX_TEMPLATES, limits.go); 0 is no cap.
	MaxTemplates int
	// Webhooks is the policy webhook_url is checked against at create: the
	// deliveries' (app.New gives both the same client).
	Webhooks egress.Policy
	// Files reads the input file a create names and stores inline requests.
	Files Files
	// Schedules creates and deletes the schedules of cron templates
	// (templates.go); nil refuses templates.
	Schedules *schedule.Manager
	// Reservations, if set, reserve a batch's estimate against its tenant's
	// budget at create and release it when the batch ends (quote.go).
	Reservations Reserver
	// Chunks are the plan's chunk limits (RELAY_CHUNK_ROWS), with which a
	// quote counts the rows queued on a model.
	Chunks plan.Limits
	// Deliveries queues a terminal batch's webhook (Terminal) and its
	// lifecycle events (Announce), and adds the webhook_deliveries summary
	// to the batch Get returns.
	Deliveries Deliveries
}

// Deliveries are a batch's completion webhooks (internal/webhook/delivery).
type Deliveries interface {
	Enqueue(ctx context.Context, b batch.Batch) error
	Announce(ctx context.Context, b batch.Batch, event string) error
	Announces(b batch.Batch) bool
	WithDeliveries(ctx context.Context, b batch.Batch) batch.Batch
}

// Store is what the service needs of the table (internal/store), and what
// internal/anthropic reads and deletes through it.
type Store interface {
	holdingStore
	UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error)
	ListBatches(ctx context.Context, tenant, after string, limit int, templateID string) ([]batch.Batch, bool, error)
	IdempotentBatch(ctx context.Context, tenant, idemKey string) (store.Idem, error)
	Chunks(ctx context.Context, batchID string) ([]batch.Chunk, error)
	GetFile(ctx context.Context, tenant, id string) (file.File, error)
	PutFile(ctx context.Context, f file.File) error
	PutFileOverwrite(ctx context.Context, f file.File) error
	Inflight(ctx context.Context, tenant string) (int, error)
	InflightMarkers(ctx context.Context, tenant string) ([]store.InflightMarker, error)
	ReserveInflight(ctx context.Context, tenant, batchID string, max int, now time.Time) error
	Templates(ctx context.Context, tenant string) (int, error)
	TemplateMarkers(ctx context.Context, tenant string) ([]store.InflightMarker, error)
	ReserveTemplate(ctx context.Context, tenant, templateID string, max int, now time.Time) error
	ReleaseTemplate(ctx context.Context, tenant, templateID string) (bool, error)
	KeyByID(ctx context.Context, id string) (apikey.Key, error)
	// A quote's work queued on a model (quote.go).
	ReadyEntries(ctx context.Context, model string) ([]sched.Ready, error)
	Usage(ctx context.Context, tenant, from, to string) ([]store.UsageRow, error)
	UsageDetails(ctx context.Context, tenant, from, to string, max int) ([]store.UsageDetail, error)
	BatchUsage(ctx context.Context, tenant, keyID, batchID string, days []string) ([]store.UsageDetail, error)
	// internal/anthropic's delete of a Message Batch.
	DeleteBatch(ctx context.Context, tenant, id string) error
	DeleteFile(ctx context.Context, tenant, id string) error
}

// Reserver holds batches' estimates against their tenants' budgets
// (internal/govern).
type Reserver interface {
	Reserve(ctx context.Context, tenant, id string, estimate func() (store.Reservation, error)) error
	Release(ctx context.Context, b batch.Batch) error
}

// Blobs is what the service, and internal/anthropic through it, needs of
// the bucket (internal/blob): the inputs it writes (retries, inline
// requests) and the parts and files it reads and deletes.
type Blobs interface {
	batch.Putter
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error)
	Concat(ctx context.Context, keys []string) io.ReadCloser
	List(ctx context.Context, prefix string) ([]string, error)
	Delete(ctx context.Context, keys ...string) error
}

// Queue sends to the dispatcher (internal/queue).
type Queue interface {
	Send(ctx context.Context, name string, v any, delay time.Duration) error
}

// Files is the Files API the service records and reads files with
// (internal/files).
type Files interface {
	Create(ctx context.Context, tenant, filename, purpose string, size int64, expiresAfter int64, body io.Reader) (file.File, error)
	Get(ctx context.Context, tenant, id string) (file.File, error)
	SetExpiresAt(ctx context.Context, tenant, id string, at *int64) error
	// Hold and Release keep a file's bytes while a batch reads it
	// (docs/api.md "Files", deleting an input).
	Hold(ctx context.Context, tenant, id, batchID string) error
	Release(ctx context.Context, tenant, id, batchID string) error
}

var (
	_ Store = (*store.Store)(nil)
	_ Blobs = (*blob.Store)(nil)
	_ Queue = (*queue.Sender)(nil)
	_ Files = (*files.Service)(nil)
)

// errSkip ends a store update that finds nothing to do.
var errSkip = errors.New("batches: nothing to do")

// send queues m for the dispatcher.
func (s *Service) send(ctx context.Context, m msg.Message) error {
	return s.Queue.Send(ctx, resources.Dispatch, m, 0)
}

// Endpoints an OpenAI-shaped batch may name (docs/api.md "Batches").
var Endpoints = endpoint.Paths(func(e endpoint.Endpoint) bool { return e.OpenAIBatch })

// MessageBatchPrefix starts the id of every Message Batch: internal/anthropic
// gives it to the batches it creates, and Get takes such ids as well.
const MessageBatchPrefix = "msgbatch_"

// CreateRequest is the body of POST /v1/batches.
type CreateRequest struct {
	InputFileID        string            `json:"input_file_id"`
	Endpoint           string            `json:"endpoint"`
	CompletionWindow   string            `json:"completion_window"`
	Metadata           map[string]string `json:"metadata"`
	OutputExpiresAfter *struct {
		Anchor  string `json:"anchor"`
		Seconds int64  `json:"seconds"`
	} `json:"output_expires_after"`
	// Extensions.
	Requests         []json.RawMessage `json:"requests"`
	Priority         int               `json:"priority"`
	WebhookURL       string            `json:"webhook_url"`
	Schedule         string            `json:"schedule"`
	ScheduleTimezone string            `json:"schedule_timezone"`
	FallbackModel    string            `json:"fallback_model"`
	Model            string            `json:"model"` // the model of a CSV input's rows
	// DryRun asks for a quote instead of a batch (quote.go).
	DryRun bool `json:"dry_run"`
	// MaxCost is the most the batch may cost in USD (quote.go).
	MaxCost *float64 `json:"max_cost"`
	// CompleteBy is when the batch is to have ended, Unix seconds within
	// its window (internal/native moves native rows to direct for it).
	CompleteBy *int64 `json:"complete_by"`
}

// Limits of the create body.
const (
	MaxPriority      = 1000
	maxMetadataPairs = 16
)

// ParseWindow accepts 1h…24h in whole hours.
func ParseWindow(w string) (time.Duration, error) {
	if w == "" {
		return 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(w)
	if err != nil || d < time.Hour || d > 24*time.Hour || d%time.Hour != 0 {
		return 0, errs.Invalidf("completion_window", "completion_window must be a whole number of hours from 1h to 24h, such as \"24h\"")
	}
	return d, nil
}

// CheckMetadata enforces OpenAI's metadata limits.
func CheckMetadata(md map[string]string) error {
	if len(md) > maxMetadataPairs {
		return errs.E(errs.Invalid, "invalid_metadata", "metadata", "metadata may hold at most 16 pairs, got %d", len(md))
	}
	for k, v := range md {
		if !utf8.ValidString(k) || !utf8.ValidString(v) || utf8.RuneCountInString(k) > 64 || utf8.RuneCountInString(v) > 512 {
			return errs.E(errs.Invalid, "invalid_metadata", "metadata", "metadata keys must be at most 64 characters and values at most 512")
		}
	}
	return nil
}

func checkEndpoint(ep string, allowed []string) error {
	for _, a := range allowed {
		if ep == a {
			return nil
		}
	}
	if ep == "" {
		return errs.Missingf("endpoint", "endpoint is required: one of %s", strings.Join(allowed, ", "))
	}
	return errs.E(errs.Invalid, "invalid_endpoint", "endpoint", "endpoint %q is not supported: use one of %s", ep, strings.Join(allowed, ", "))
}

// checkWebhookURL checks webhook_url at create with the delivery policy,
// so a URL accepted at create is one the deliveries may use.
func (s *Service) checkWebhookURL(raw string) error {
	return s.Webhooks.CheckURL(raw)
}

// checkCreate validates what CreateShaped checks before it looks at the
// tenant's batches in flight, in its order: endpoint (one of endpoints),
// completion_window, metadata, priority. It returns the window.
func checkCreate(req CreateRequest, endpoints []string) (time.Duration, error) {
	if err := checkEndpoint(req.Endpoint, endpoints); err != nil {
		return 0, err
	}
	window, err := ParseWindow(req.CompletionWindow)
	if err != nil {
		return 0, err
	}
	if err := CheckMetadata(req.Metadata); err != nil {
		return 0, err
	}
	if req.Priority < -MaxPriority || req.Priority > MaxPriority {
		return 0, errs.Invalidf("priority", "priority must be between -%d and %d", MaxPriority, MaxPriority)
	}
	return window, nil
}

// createOptions is what checkOptions makes of a valid create's options.
type createOptions struct {
	spec               schedule.Spec // a template's schedule
	outputExpiresAfter *int64
	inline             []byte // the JSONL of inline requests
}

// checkOptions validates the rest of a create that needs nothing stored,
// in CreateShaped's order after the in-flight check: schedule and
// schedule_timezone, output_expires_after, webhook_url (with checkURL),
// fallback_model (one of models, taking the endpoint's requests, that the
// creating key may use: mayUse), and the input: input_file_id or inline
// requests, not both, and one of them unless a template is made by
// CreateShaped with a shape (shaped).
func checkOptions(req CreateRequest, shaped bool, checkURL func(string) error, models *config.Models, mayUse func(model string) bool) (createOptions, error) {
	var o createOptions
	var err error
	switch {
	case req.Schedule != "":
		if o.spec, err = schedule.Parse(req.Schedule, req.ScheduleTimezone); err != nil {
			return o, err
		}
	case req.ScheduleTimezone != "":
		return o, errs.Invalidf("schedule_timezone", "schedule_timezone applies to a schedule: send schedule too")
	}
	if req.OutputExpiresAfter != nil {
		if req.OutputExpiresAfter.Anchor != "created_at" {
			return o, errs.Invalidf("output_expires_after.anchor", "output_expires_after.anchor must be created_at")
		}
		s := req.OutputExpiresAfter.Seconds
		if s < 3600 || s > 30*24*3600 {
			return o, errs.Invalidf("output_expires_after.seconds", "output_expires_after.seconds must be between 3600 and 2592000")
		}
		o.outputExpiresAfter = &s
	}
	if req.WebhookURL != "" {
		if err := checkURL(req.WebhookURL); err != nil {
			return o, err
		}
	}
	if req.FallbackModel != "" {
		m, ok := models.Lookup(req.FallbackModel)
		if !ok {
			return o, errs.Invalidf("fallback_model", "fallback_model %q is not a configured model (configured: %s)", req.FallbackModel, strings.Join(models.Names(), ", "))
		}
		if shape, _ := provider.ShapeOf(req.Endpoint); shape != m.Shape {
			return o, errs.Invalidf("fallback_model", "fallback_model %q takes %s requests, not %s", req.FallbackModel, m.Shape, req.Endpoint)
		}
		if mayUse != nil && !mayUse(req.FallbackModel) {
			// Its rows would fall back onto it, outside the key's
			// allow-list (docs/api.md "Budgets, revocation and allow-lists").
			return o, errs.E(errs.Invalid, jsonl.CodeModelNotAllowed, "fallback_model", "fallback_model %q is not a model this API key may use", req.FallbackModel)
		}
	}
	switch {
	case req.InputFileID != "" && len(req.Requests) > 0:
		return o, errs.Invalidf("requests", "send input_file_id or requests, not both")
	case len(req.Requests) > 0:
		if o.inline, err = inlineJSONL(req.Requests, req.Endpoint); err != nil {
			return o, err
		}
		if err := checkInline(o.inline, req.Endpoint, req.Model, models); err != nil {
			return o, err
		}
	case req.InputFileID != "":
	default:
		if req.Schedule == "" || !shaped {
			return o, errs.Missingf("input_file_id", "input_file_id is required (or inline requests)")
		}
	}
	return o, nil
}

// checkInputFile validates the input file a create names: a processed
// batch file, and a CSV one needs the create's model and the chat endpoint.
func checkInputFile(f file.File, req CreateRequest) error {
	if f.Purpose != files.PurposeBatch {
		return errs.Invalidf("input_file_id", "file %s has purpose %q, a batch needs purpose \"batch\"", f.ID, f.Purpose)
	}
	if f.Status != files.StatusProcessed {
		return errs.Invalidf("input_file_id", "file %s is %s: wait until its upload is processed", f.ID, f.Status)
	}
	if format, _ := jsonl.FormatOf(f.Filename); format == jsonl.CSV {
		if req.Model == "" {
			return errs.Missingf("model", "a CSV input needs model: the model every row is sent to")
		}
		if req.Endpoint != "/v1/chat/completions" {
			return errs.Invalidf("endpoint", "a CSV input makes chat completions: use endpoint /v1/chat/completions")
		}
	}
	return nil
}

// Create validates and records a batch, then asks the dispatcher to plan
// it. A repeated idem (NewIdemKey) returns the first batch it made.
func (s *Service) Create(ctx context.Context, p auth.Principal, req CreateRequest, idem store.IdemKey) (batch.Batch, error) {
	if req.Endpoint == "" && req.Model != "" {
		// A batch-level model makes chat completions (docs/api.md "Batches").
		req.Endpoint = endpoint.Chat
	}
	return s.CreateShaped(ctx, p, req, idem, Endpoints, nil)
}

// CreateShaped is Create for the batches of another API (internal/anthropic
// creates Message Batches with it): req.Endpoint must be one of endpoints,
// and shape, when not nil, edits the batch before it is recorded (its id,
// its request count).
func (s *Service) CreateShaped(ctx context.Context, p auth.Principal, req CreateRequest, idem store.IdemKey, endpoints []string, shape func(*batch.Batch)) (batch.Batch, error) {
	window, err := checkCreate(req, endpoints)
	if err != nil {
		return batch.Batch{}, err
	}
	if first, ok, err := s.Repeat(ctx, p.Tenant, idem); err != nil || ok {
		return first, err
	}
	if req.CompletionWindow == "" {
		req.CompletionWindow = "24h"
	}
	if err := s.checkInflight(ctx, p.Tenant, req); err != nil {
		return batch.Batch{}, err
	}
	opts, err := checkOptions(req, shape != nil, s.checkWebhookURL, s.Models, p.MayUse)
	if err != nil {
		return batch.Batch{}, err
	}
	spec := opts.spec
	now := s.Now()
	b := batch.Batch{
		ID: ids.New("batch_"), Endpoint: req.Endpoint, CompletionWindow: req.CompletionWindow, Status: batch.Validating,
		CreatedAt: now.Unix(), Metadata: req.Metadata, Priority: req.Priority, Tenant: p.Tenant, KeyID: p.KeyID,
	}
	exp := now.Add(window).Unix()
	b.ExpiresAt = &exp
	b.OutputExpiresAfter = opts.outputExpiresAfter
	if req.WebhookURL != "" {
		b.WebhookURL = &req.WebhookURL
	}
	if req.FallbackModel != "" {
		b.FallbackModel = &req.FallbackModel
	}
	input, err := s.quotedFile(ctx, p.Tenant, req)
	if err != nil {
		return batch.Batch{}, err
	}
	b.InputFileID = input.ID
	if req.Model != "" {
		if _, ok := s.Models.Lookup(req.Model); !ok {
			return batch.Batch{}, errs.Invalidf("model", "model %q is not a configured model (configured: %s)", req.Model, strings.Join(s.Models.Names(), ", "))
		}
		b.CSVModel = req.Model
	}
	if shape != nil {
		shape(&b)
	}
	if req.CompleteBy != nil {
		if *req.CompleteBy <= now.Unix() || *req.CompleteBy > exp {
			return batch.Batch{}, errs.Invalidf("complete_by", "complete_by must be a Unix time after now and within the completion window (by %d)", exp)
		}
		b.CompleteBy = req.CompleteBy
	}
	quoted := s.quoteOnce(ctx, p, req, window, opts.inline, input)
	if req.MaxCost != nil {
		if err := checkMaxCost(req, quoted); err != nil {
			return batch.Batch{}, err
		}
		b.MaxCost, b.CostHolds = req.MaxCost, map[string]float64{}
	}
	if req.Schedule == "" {
		if err := s.reserve(ctx, p, b, quoted); err != nil {
			return batch.Batch{}, err
		}
	}
	saved, err := s.recordNew(ctx, b, req, spec, opts.inline, idem)
	if req.Schedule == "" && s.Reservations != nil && s.unrecorded(ctx, b, saved, err) {
		if rerr := s.Reservations.Release(ctx, b); rerr != nil {
			s.Log.WarnContext(ctx, "release the reservation of a batch not recorded", "batch_id", b.ID, "err", rerr)
		}
	}
	return saved, err
}

// unrecorded reports whether batch b, whose record answered saved and err,
// is surely not recorded: a repeated Idempotency-Key's first batch (which
// holds its own reservation) or a failed create whose batch is not there.
// A create that failed after its batch was written (the plan's message
// lost, an ambiguous write) keeps b's reservation while b runs; one of a
// batch never recorded is dropped by the next Reserve after its grace
// (govern.Holds).
func (s *Service) unrecorded(ctx context.Context, b, saved batch.Batch, err error) bool {
	if err == nil {
		return saved.ID != b.ID
	}
	_, gerr := s.Store.GetBatch(ctx, b.Tenant, b.ID)
	return errors.Is(gerr, store.ErrBatchNotFound)
}

// recordNew stores the inline requests of a create as its input file, if
// it has some, and records b as a batch or, with a schedule, a template.
func (s *Service) recordNew(ctx context.Context, b batch.Batch, req CreateRequest, spec schedule.Spec, inline []byte, idem store.IdemKey) (batch.Batch, error) {
	if len(req.Requests) > 0 {
		f, err := s.inlineFile(ctx, b.Tenant, inline)
		if err != nil {
			return batch.Batch{}, err
		}
		b.InputFileID = f.ID
	}
	if req.Schedule != "" {
		return s.createTemplate(ctx, b, spec, idem)
	}
	return s.record(ctx, b, idem)
}

// record stores a new batch and queues its planning. The batch holds its
// input file first (files.Service.Hold), so the file's bytes outlive a
// delete until the batch ends (ReleaseInput); a retry's input is written
// by its plan (RetryInput) and holds nothing.
func (s *Service) record(ctx context.Context, b batch.Batch, idem store.IdemKey) (batch.Batch, error) {
	holds := b.RetryOf == nil
	if holds {
		if err := s.Files.Hold(ctx, b.Tenant, b.InputFileID, b.ID); err != nil {
			if errors.Is(err, file.ErrNotFound) {
				return batch.Batch{}, errs.Invalidf("input_file_id", "no such file: %s", b.InputFileID)
			}
			return batch.Batch{}, fmt.Errorf("hold input file %s: %w", b.InputFileID, err)
		}
	}
	saved, created, err := s.createCounted(ctx, b, idem)
	if holds && (err != nil || saved.ID != b.ID) {
		// Not recorded, or a repeated Idempotency-Key's first batch,
		// which holds the file itself.
		if rerr := s.Files.Release(ctx, b.Tenant, b.InputFileID, b.ID); rerr != nil {
			s.Log.WarnContext(ctx, "release the input file of a batch not recorded", "batch_id", b.ID, "err", rerr)
		}
	}
	if err != nil {
		return batch.Batch{}, keyReused(err)
	}
	if created && saved.Status == batch.Validating {
		if err := s.send(ctx, msg.Message{Type: msg.Plan, Tenant: b.Tenant, Batch: b.ID}); err != nil {
			return batch.Batch{}, err
		}
	}
	return saved.Out(), nil
}

// ReleaseInput ends terminal batch b's hold on its input file (record),
// removing the file if it was deleted meanwhile and b was its last
// reader. app.New hangs it off the engine's OnTerminal; a second call is
// a no-op.
func (s *Service) ReleaseInput(ctx context.Context, b batch.Batch) error {
	if b.InputFileID == "" || b.RetryOf != nil {
		return nil
	}
	return s.Files.Release(ctx, b.Tenant, b.InputFileID, b.ID)
}

// inlineFile stores inline rows (inlineJSONL) as a JSONL input file.
func (s *Service) inlineFile(ctx context.Context, tenant string, data []byte) (file.File, error) {
	return s.Files.Create(ctx, tenant, "requests.jsonl", files.PurposeBatch, int64(len(data)), 0, bytes.NewReader(data))
}

// inlineJSONL writes inline rows as the lines of a JSONL input file; a row
// without a custom_id gets request-<index>, without a method POST, without
// a url the batch's endpoint (the only values they may have). A simple row
// ({custom_id?, messages} or {custom_id?, prompt}: isSimple) is written as
// it is, for the batch's model: the plan makes its request and its
// custom_id, row-<index+1> (jsonl, simple rows). A row that is not an
// object is refused (param requests[<index>]).
func inlineJSONL(rows []json.RawMessage, endpoint string) ([]byte, error) {
	var buf bytes.Buffer
	for i, raw := range rows {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, errs.Invalidf(fmt.Sprintf("requests[%d]", i), "requests[%d] must be an object like a line of a batch input file, or {\"messages\": […]} or {\"prompt\": \"…\"} with the batch's model", i)
		}
		if isSimple(obj) {
			line, _ := json.Marshal(obj)
			buf.Write(line)
			buf.WriteByte('\n')
			continue
		}
		for k, v := range map[string]string{"custom_id": fmt.Sprintf("request-%d", i), "method": "POST", "url": endpoint} {
			if _, ok := obj[k]; !ok {
				obj[k], _ = json.Marshal(v)
			}
		}
		line, _ := json.Marshal(obj)
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// isSimple reports whether an inline row is a simple row: no body, and
// messages or prompt (jsonl, simple rows).
func isSimple(row map[string]json.RawMessage) bool {
	_, body := row["body"]
	_, messages := row["messages"]
	_, prompt := row["prompt"]
	return !body && (messages || prompt)
}

// checkInline validates inline rows (inlineJSONL's JSONL) of a batch of
// model (its create's, or "") as the batch's run would, so a broken row is
// a 400 of the create naming requests[<index>] rather than a batch that
// fails with an error about a "line".
func checkInline(data []byte, path, model string, models *config.Models) error {
	known := func(m string) bool { _, ok := models.Lookup(m); return ok }
	res, err := jsonl.Scan(bytes.NewReader(data), jsonl.Options{Format: jsonl.JSONL, Endpoint: path, Model: model, KnownModel: known,
		DefaultModel: endpoint.DefaultModel(models, path)}, nil)
	if err != nil {
		return fmt.Errorf("check inline requests: %w", err)
	}
	if len(res.Errors) == 0 {
		return nil
	}
	e := res.Errors[0]
	if e.Line == 0 {
		return errs.Invalidf(cmp.Or(e.Param, "requests"), "requests: %s", e.Message)
	}
	param := fmt.Sprintf("requests[%d]", e.Line-1)
	if e.Param == "model" || e.Param == "endpoint" {
		// A simple row's problem with the batch's own field.
		msg := fmt.Sprintf("%s: %s", param, strings.TrimPrefix(e.Message, fmt.Sprintf("line %d: ", e.Line)))
		if e.Code == jsonl.CodeMissingModel {
			return errs.Missingf("model", "%s: send model", msg)
		}
		return errs.Invalidf(e.Param, "%s", msg)
	}
	if e.Param != "" {
		param += "." + e.Param
	}
	return errs.Invalidf(param, "%s: %s", param, strings.TrimPrefix(e.Message, fmt.Sprintf("line %d: ", e.Line)))
}

// WriteInputFile stores data as a processed batch input file of tenant.
// It writes past files.Service, whose 4 MiB limit is on what a client
// sends: internal/anthropic stores a Message Batch's requests with it, and
// the rows of a 4 MiB create body take a little more.
func (s *Service) WriteInputFile(ctx context.Context, tenant, filename string, data []byte) (file.File, error) {
	id := ids.New("file-")
	// It expires as an uploaded file does by default (docs/api.md "Files").
	exp := s.Now().Add(files.DefaultTTL).Unix()
	f := file.File{ID: id, Bytes: int64(len(data)), CreatedAt: s.Now().Unix(), Filename: filename,
		Purpose: files.PurposeBatch, Status: files.StatusProcessed, Tenant: tenant, ExpiresAt: &exp}
	w := batch.NewObjectWriter(ctx, s.Blobs, fmt.Sprintf("files/%s/%s/", tenant, id))
	w.Tag = files.ExpiryTag(f)
	if _, err := w.Write(data); err != nil {
		return file.File{}, fmt.Errorf("write file %s: %w", id, err)
	}
	objs, err := w.Close()
	if err != nil {
		return file.File{}, fmt.Errorf("write file %s: %w", id, err)
	}
	for _, o := range objs {
		f.Objects = append(f.Objects, o.Key)
	}
	if err := s.Store.PutFile(ctx, f); err != nil {
		return file.File{}, fmt.Errorf("record file %s: %w", id, err)
	}
	return f, nil
}

// Get returns a tenant's batch; another tenant's is not found.
func (s *Service) Get(ctx context.Context, tenant, id string) (batch.Batch, error) {
	if !ids.Valid("batch_", id) && !ids.Valid(MessageBatchPrefix, id) {
		return batch.Batch{}, errs.NotFoundf("no such batch: %s", id)
	}
	b, err := s.Store.GetBatch(ctx, tenant, id)
	if errors.Is(err, store.ErrBatchNotFound) {
		return batch.Batch{}, errs.NotFoundf("no such batch: %s", id)
	}
	if err != nil {
		return batch.Batch{}, err
	}
	out := s.WithCost(ctx, b.Out())
	out.EstimatedCompletionAt = out.ETA(s.Now())
	out = s.Deliveries.WithDeliveries(ctx, out)
	return out, nil
}

// List lists a tenant's batches newest first (or a template's runs).
func (s *Service) List(ctx context.Context, tenant, after string, limit int, templateID string) ([]batch.Batch, bool, error) {
	if after != "" && !ids.Valid("batch_", after) {
		return nil, false, errs.Invalidf("after", "after %q is not a batch id", after)
	}
	if templateID != "" && !ids.Valid("batch_", templateID) {
		return nil, false, errs.Invalidf("template_id", "template_id %q is not a template id", templateID)
	}
	if after == "" && templateID == "" {
		// Start below the Anthropic API's msgbatch_ ids, which sort above
		// every batch_ id: this list is of OpenAI batches only.
		after = "batch_~"
	}
	bs, more, err := s.Store.ListBatches(ctx, tenant, after, limit, templateID)
	now := s.Now()
	for i := range bs {
		bs[i] = bs[i].Out()
		bs[i].EstimatedCompletionAt = bs[i].ETA(now)
	}
	s.WithCosts(ctx, bs)
	return bs, more, err
}

// Cancel stops a batch: no new chunk starts, running chunks stop at their
// next row boundary, unfinished rows get batch_cancelled.
func (s *Service) Cancel(ctx context.Context, tenant, id string) (batch.Batch, error) {
	cur, err := s.Get(ctx, tenant, id)
	if err != nil {
		return batch.Batch{}, err
	}
	if cur.Status == batch.Scheduled {
		return s.cancelTemplate(ctx, tenant, id)
	}
	b, err := s.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
		switch {
		case b.Status == batch.Cancelling:
			return errSkip
		case b.Status.Terminal():
			return errs.E(errs.Conflict, "batch_not_cancellable", "", "batch %s is %s and cannot be cancelled", b.ID, b.Status)
		case b.Status == batch.Finalizing:
			return errs.E(errs.Conflict, "batch_not_cancellable", "", "batch %s is finalizing: every request has run", b.ID)
		}
		return b.To(batch.Cancelling, s.Now())
	})
	if errors.Is(err, errSkip) {
		return s.Get(ctx, tenant, id)
	}
	if err != nil {
		return batch.Batch{}, err
	}
	if err := s.send(ctx, msg.Message{Type: msg.Drain, Tenant: tenant, Batch: id}); err != nil {
		return batch.Batch{}, err
	}
	return b.Out(), nil
}

// Results writes every row's line in input order: the output and error
// lines of each done chunk, interleaved by its pattern. Until the batch is
// terminal only partial results are available, on request.
func (s *Service) Results(ctx context.Context, tenant, id string, partial bool, w io.Writer) error {
	if err := s.StartResults(ctx, tenant, id, partial); err != nil {
		return err
	}
	chunks, err := s.Store.Chunks(ctx, id)
	if err != nil {
		return err
	}
	return s.EachLine(ctx, chunks, func(_ batch.Chunk, _ int, _ byte, line []byte) error {
		_, err := w.Write(line)
		return err
	})
}

// StartResults checks that results can be served (so the status code is
// right before streaming starts).
func (s *Service) StartResults(ctx context.Context, tenant, id string, partial bool) error {
	b, err := s.Get(ctx, tenant, id)
	if err != nil {
		return err
	}
	if !b.Status.Terminal() && !partial {
		return errs.E(errs.Conflict, "batch_not_finished", "", "batch %s is %s: results are ready when it ends (or pass ?partial=true)", id, b.Status)
	}
	return s.resultsKept(ctx, b)
}

// resultsKept refuses the results of a batch whose output or error file
// was deleted or expired: they live as long as those files, whose bytes
// are then deleted (docs/api.md "Output and error files").
func (s *Service) resultsKept(ctx context.Context, b batch.Batch) error {
	for _, id := range []*string{b.OutputFileID, b.ErrorFileID} {
		if id == nil {
			continue
		}
		// Results interleave both files' parts: one deleted or expired
		// would cut them short.
		f, err := s.Store.GetFile(ctx, b.Tenant, *id)
		if errors.Is(err, file.ErrNotFound) || (err == nil && f.Deleted) {
			return errs.NotFoundf("the results of batch %s were deleted with its file %s", b.ID, *id)
		}
		if err != nil {
			return err
		}
		if f.ExpiresAt != nil && s.Now().Unix() >= *f.ExpiresAt {
			return errs.NotFoundf("the results of batch %s expired at %s with its output file (output_expires_after)", b.ID,
				time.Unix(*f.ExpiresAt, 0).UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// EachLine calls fn with every line of the done chunks in input order,
// with the line's index in its chunk and its kind (part.KindOut,
// part.KindErr); part.Read reads them. Results uses it, and
// internal/anthropic to write a Message Batch's results. It streams: a
// chunk's parts are read line by line, so memory is a line (at most an
// upstream answer's cap, internal/provider) and two read buffers per chunk
// open at once, whatever the parts' sizes (docs/design.md "Memory"); a
// batch whose chunks hold rows of several models, interleaved
// (docs/design.md "Chunks"), has about one chunk of each model open at a
// time. fn must not keep line.
func (s *Service) EachLine(ctx context.Context, chunks []batch.Chunk, fn func(c batch.Chunk, i int, kind byte, line []byte) error) error {
	get := func(key string) (io.ReadCloser, error) { return s.Blobs.Get(ctx, key) }
	var done []batch.Chunk
	for _, c := range chunks {
		if c.State == batch.ChunkDone {
			done = append(done, c)
		}
	}
	return part.Read(done, get, fn)
}

// DeadLetters lists the rows of batch id that ended failed, read from
// their failed generations, paged as Rows pages them (docs/api.md "Dead
// letters"): the error file's rows, which Retry runs again.
func (s *Service) DeadLetters(ctx context.Context, tenant, id string, after, limit int) ([]part.DeadLetter, RowsPage, error) {
	page, err := s.Rows(ctx, tenant, id, RowsQuery{After: after, Limit: limit, Failed: true})
	if err != nil {
		return nil, page, err
	}
	dls := make([]part.DeadLetter, len(page.Data))
	for i, ev := range page.Data {
		dls[i] = ev.DeadLetter()
	}
	return dls, page, nil
}

// Retry makes a new batch of the rows of a finished batch that ended in
// its error file: failed, expired, cancelled and dead-lettered rows. It
// answers at once with the new batch in validating: its input file, which
// may take minutes to write (up to 200 MB read again), is written by its
// plan (RetryInput), so a client's retry of a slow call finds the first
// retry batch rather than making a second (docs/api.md "Retry").
func (s *Service) Retry(ctx context.Context, p auth.Principal, id string, idem store.IdemKey) (batch.Batch, error) {
	if first, ok, err := s.Repeat(ctx, p.Tenant, idem); err != nil || ok {
		return first, err
	}
	b, err := s.Get(ctx, p.Tenant, id)
	if err != nil {
		return batch.Batch{}, err
	}
	if !b.Status.Terminal() {
		return batch.Batch{}, errs.E(errs.Conflict, "batch_not_finished", "", "batch %s is %s: retry it once it has ended", id, b.Status)
	}
	full, err := s.Store.GetBatch(ctx, p.Tenant, id)
	if err != nil {
		return batch.Batch{}, err
	}
	chunks, err := s.Store.Chunks(ctx, id)
	if err != nil {
		return batch.Batch{}, err
	}
	if !slices.ContainsFunc(chunks, part.HasErrors) {
		return batch.Batch{}, errs.E(errs.Invalid, "nothing_to_retry", "", "batch %s has no failed, expired or cancelled rows", id)
	}
	now := s.Now()
	window, _ := ParseWindow(b.CompletionWindow)
	exp := now.Add(window).Unix()
	nb := batch.Batch{
		ID: ids.New("batch_"), Endpoint: b.Endpoint, CompletionWindow: b.CompletionWindow, Status: batch.Validating,
		CreatedAt: now.Unix(), ExpiresAt: &exp, Metadata: b.Metadata, Priority: b.Priority, Tenant: p.Tenant, KeyID: p.KeyID,
		InputFileID: ids.New("file-"), RetryOf: &b.ID, WebhookURL: b.WebhookURL, FallbackModel: b.FallbackModel,
		OutputExpiresAfter: full.OutputExpiresAfter,
	}
	return s.record(ctx, nb, idem)
}

// RetryInput writes the input file of retry batch nb (Retry) from the rows
// of the batch it retries that ended in its error file, and records it; a
// second call writes the same objects and record again. The engine's plan
// calls it when it finds a retry's input missing. Memory is a chunk's
// range and an 8 MiB object buffer (docs/design.md "Memory"). A source whose
// input is gone fails the retry with input_file_missing.
func (s *Service) RetryInput(ctx context.Context, nb batch.Batch) (file.File, error) {
	src, err := s.Store.GetBatch(ctx, nb.Tenant, *nb.RetryOf)
	if err != nil {
		return file.File{}, fmt.Errorf("retry %s of %s: %w", nb.ID, *nb.RetryOf, err)
	}
	chunks, err := s.Store.Chunks(ctx, src.ID)
	if err != nil {
		return file.File{}, err
	}
	exp := nb.CreatedAt + int64(files.DefaultTTL/time.Second)
	f := file.File{ID: nb.InputFileID, CreatedAt: nb.CreatedAt, Filename: "retry-" + src.ID + ".jsonl", Purpose: files.PurposeBatch,
		Status: files.StatusProcessed, ExpiresAt: &exp, Tenant: nb.Tenant}
	w := batch.NewObjectWriter(ctx, s.Blobs, fmt.Sprintf("files/%s/%s/", nb.Tenant, nb.InputFileID))
	w.Tag = files.ExpiryTag(f)
	for _, c := range chunks {
		if !part.HasErrors(c) {
			continue
		}
		reqs, err := plan.ReadChunk(ctx, s.Blobs, src, c)
		if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrChanged) {
			return file.File{}, plan.Invalid{{Code: "input_file_missing", Message: fmt.Sprintf(
				"the input of batch %s is gone (it expired): its failed rows cannot be read again", src.ID)}}
		}
		if err != nil {
			return file.File{}, err
		}
		if err := writeFailedRows(w, c, reqs); err != nil {
			return file.File{}, fmt.Errorf("retry of %s: %w", src.ID, err)
		}
	}
	objs, err := w.Close()
	if err != nil {
		return file.File{}, err
	}
	for _, o := range objs {
		f.Objects = append(f.Objects, o.Key)
		f.Bytes += o.Size
	}
	return f, s.Store.PutFileOverwrite(ctx, f)
}

// writeFailedRows writes the rows of chunk c, its requests reqs, that its
// pattern puts in the error file.
func writeFailedRows(w io.Writer, c batch.Chunk, reqs []jsonl.Request) error {
	for i, r := range reqs {
		if !part.InErr(c, i) {
			continue
		}
		line, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("row %d: %w", c.Row(i), err)
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("write its input: %w", err)
		}
	}
	return nil
}

// RowsQuery selects generations of a batch's rows (docs/api.md "Rows"):
// those of the chunks after chunk After (-1: from the first), at least
// Limit of them unless none are left or maxPageChunks chunks were read, only CustomID's when it is set,
// only failed ones with Failed.
type RowsQuery struct {
	After    int
	Limit    int
	CustomID string
	Failed   bool
}

// lists says whether chunk c may hold rows q lists: a chunk committed
// after q.After, with rows in the error file when q is of failed rows
// (its pattern says, without reading its parts).
func (q RowsQuery) lists(c batch.Chunk) bool {
	return c.Index > q.After && c.State == batch.ChunkDone && (!q.Failed || part.HasErrors(c))
}

// maxPageChunks bounds the chunks a page of rows reads (docs/api.md
// "Rows"): a custom_id, or failed rows, may be in none of a batch's
// chunks, and each is an object to read and parse.
const maxPageChunks = 20

// RowsPage is a page of generations, in row order: Last is the chunk the
// page ended at (the next page's After), More whether chunks follow.
type RowsPage struct {
	Data []part.UsageEvent
	Last int
	More bool
}

// Rows reads the generations of batch id's committed rows from its chunks'
// usage parts, whole chunks at a time, in chunk order, at most
// maxPageChunks of them (docs/api.md "Rows"). A chunk not committed yet has none; one whose parts expired is
// passed over.
func (s *Service) Rows(ctx context.Context, tenant, id string, q RowsQuery) (RowsPage, error) {
	b, err := s.Get(ctx, tenant, id)
	if err != nil {
		return RowsPage{}, err
	}
	if b.ChunksDone == 0 {
		// No chunk committed (a commit counts its chunk done in the same
		// write), so no row to list: a client polling for the first
		// result costs one read, not a query of every chunk of the batch.
		return RowsPage{Last: q.After}, nil
	}
	chunks, err := s.Store.Chunks(ctx, id)
	if err != nil {
		return RowsPage{}, err
	}
	slices.SortFunc(chunks, func(a, b batch.Chunk) int { return cmp.Compare(a.Index, b.Index) })
	page, read := RowsPage{Last: q.After}, 0
	for i, c := range chunks {
		if !q.lists(c) {
			continue
		}
		if len(page.Data) >= q.Limit || read == maxPageChunks {
			page.More = slices.ContainsFunc(chunks[i:], q.lists)
			break
		}
		read++
		evs, err := s.chunkRows(ctx, c)
		if err != nil {
			return RowsPage{}, err
		}
		for _, ev := range evs {
			if (q.CustomID == "" || ev.CustomID == q.CustomID) && (!q.Failed || ev.Status == "failed") {
				page.Data = append(page.Data, ev)
			}
		}
		page.Last = c.Index
	}
	slices.SortFunc(page.Data, func(a, b part.UsageEvent) int { return cmp.Compare(a.Row, b.Row) })
	return page, nil
}

// chunkRows reads the generations of committed chunk c.
func (s *Service) chunkRows(ctx context.Context, c batch.Chunk) ([]part.UsageEvent, error) {
	rc, err := s.Blobs.Get(ctx, c.Parts("usage"))
	if errors.Is(err, blob.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rows of chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	defer func() { _ = rc.Close() }()
	evs, err := part.ReadUsage(rc)
	if err != nil {
		return nil, fmt.Errorf("rows of chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	return evs, nil
}
