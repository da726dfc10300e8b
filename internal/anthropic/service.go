// Package anthropic is Anthropic's Message Batches API (docs/api.md
// "Anthropic Message Batches"): its service and its routes under
// /v1/messages/batches. Message Batches run on the same engine as OpenAI
// batches: a create writes its requests as an input file of /v1/messages
// rows and records, through internal/batches, a batch whose id starts with
// msgbatch_, so chunks, retries, fallback, capacity, cancel, expiry and
// accounting are the ones every batch gets. The Message Batch object and
// its results are views of that batch and of its output and error lines.
package anthropic

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/batches"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/quote"
	"github.com/relaybatch/relay/internal/store"
)

// MaxMessageRequests is Anthropic's limit of requests in one batch.
const MaxMessageRequests = 100_000

// customIDPattern is Anthropic's rule for a request's custom_id.
var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Service runs Message Batches as batches of the batches service, on its
// engine.
type Service struct {
	Batches *batches.Service
}

// CreateMessageBatch validates the requests of POST /v1/messages/batches
// and records their batch.
//
// Anthropic refuses a batch whose structure is wrong and reports a
// request whose params it cannot run as an errored result; the engine
// validates an input file when it plans the batch and fails the whole
// batch, a state the Message Batch object cannot even show. So a
// structural problem (a malformed request, a bad or duplicate custom_id,
// params that are not an object or name no model) is refused here, with a
// 400 naming the request, before anything is recorded; a request naming a
// model that is not configured, or streaming, is recorded as a refused row
// (refusedRow) that comes back errored, as at Anthropic. Everything else is
// the upstream's to judge: a row naming a model of another shape comes
// back errored with cross_shape_dispatch, an upstream 400 comes back
// errored with its error.
func (s *Service) CreateMessageBatch(ctx context.Context, p auth.Principal, requests []json.RawMessage, idem store.IdemKey, up provider.Anthropic) (wire.MessageBatch, error) {
	// A repeat writes nothing: its key is checked before the input is.
	first, ok, err := s.Batches.Repeat(ctx, p.Tenant, idem)
	if ok && err == nil {
		return s.repeated(first)
	}
	if errors.Is(err, store.ErrBatchNotFound) {
		return wire.MessageBatch{}, errKeyOfDeletedBatch()
	}
	if err != nil {
		return wire.MessageBatch{}, err
	}
	data, err := s.messageRows(requests, p.MayUse)
	if err != nil {
		return wire.MessageBatch{}, err
	}
	// Written past files.Service, whose 4 MiB limit is on what a client
	// sends: the rows of a 4 MiB create body take a little more.
	f, err := s.Batches.WriteInputFile(ctx, p.Tenant, "message_batch_requests.jsonl", data)
	if err != nil {
		return wire.MessageBatch{}, fmt.Errorf("message batch input: %w", err)
	}
	req := batches.CreateRequest{InputFileID: f.ID, Endpoint: endpoint.Messages, CompletionWindow: "24h"}
	id := ids.New(batches.MessageBatchPrefix)
	b, err := s.Batches.CreateShaped(ctx, p, req, idem, []string{endpoint.Messages}, func(b *batch.Batch) {
		b.ID = id
		// Known now; planning sets the same number again.
		b.RequestCounts.Total = int64(len(requests))
		b.AnthropicBetas, b.UserProfileID = up.Betas, up.UserProfile
	})
	if s.unreferenced(ctx, p.Tenant, id, b, err) {
		s.deleteFile(ctx, f)
	}
	switch {
	case errors.Is(err, store.ErrBatchNotFound):
		return wire.MessageBatch{}, errKeyOfDeletedBatch()
	case err != nil:
		return wire.MessageBatch{}, err
	}
	return s.repeated(b)
}

// QuoteMessageBatch quotes a message batch's requests as a dry-run create
// of /v1/batches quotes its rows (docs/api.md "Quotes"): the same checks
// as CreateMessageBatch's, nothing recorded.
func (s *Service) QuoteMessageBatch(ctx context.Context, p auth.Principal, requests []json.RawMessage) (quote.Quote, error) {
	data, err := s.messageRows(requests, p.MayUse)
	if err != nil {
		return quote.Quote{}, err
	}
	return s.Batches.QuoteJSONL(ctx, p, endpoint.Messages, data)
}

func errKeyOfDeletedBatch() error {
	return errs.E(errs.Invalid, "idempotency_key_reused", "", "the batch first created with this Idempotency-Key was deleted: send a new key")
}

// repeated is the message batch b, which a create returned. Keys are
// scoped to their route, so b is one unless the store holds a key of
// another kind of batch under this route: refused rather than shown.
func (s *Service) repeated(b batch.Batch) (wire.MessageBatch, error) {
	if !strings.HasPrefix(b.ID, batches.MessageBatchPrefix) {
		return wire.MessageBatch{}, errs.E(errs.Invalid, "idempotency_key_reused", "", "this Idempotency-Key created batch %s, which is not a message batch: send a new key", b.ID)
	}
	return s.view(b), nil
}

// unreferenced reports whether no batch uses the input file written for
// batch id, given what creating it returned: an Idempotency-Key returned
// the batch created the first time, or the create failed before the batch
// was recorded. A create that failed after recording it (queueing its
// planning, which the dispatcher's sweep does again) keeps its input, and
// so does one whose outcome cannot be read: an orphan file costs less than
// a batch without its input.
func (s *Service) unreferenced(ctx context.Context, tenant, id string, b batch.Batch, err error) bool {
	if err == nil {
		return b.ID != id
	}
	_, gerr := s.Batches.Store.GetBatch(ctx, tenant, id)
	return errors.Is(gerr, store.ErrBatchNotFound)
}

// messageRows checks the requests and returns them as JSONL input rows
// {custom_id, method, url, body: params}; a request naming a model the
// key may not use (mayUse) comes back errored, as an unknown model does.
func (s *Service) messageRows(requests []json.RawMessage, mayUse func(model string) bool) ([]byte, error) {
	switch {
	case len(requests) == 0:
		return nil, errs.Invalidf("requests", "requests: send at least one request")
	case len(requests) > MaxMessageRequests:
		return nil, errs.Invalidf("requests", "requests: a batch holds at most %d requests, got %d", MaxMessageRequests, len(requests))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep prompts byte for byte
	seen := make(map[string]int, len(requests))
	lastModel := s.defaultModel()
	for i, raw := range requests {
		at := fmt.Sprintf("requests.%d", i)
		invalid := func(field, format string, args ...any) error {
			return errs.Invalidf(at+field, "%s%s: %s", at, field, fmt.Sprintf(format, args...))
		}
		if !utf8.Valid(raw) {
			return nil, invalid("", "not valid UTF-8")
		}
		var r map[string]json.RawMessage
		if err := json.Unmarshal(raw, &r); err != nil || r == nil {
			return nil, invalid("", "must be an object {custom_id, params}")
		}
		for k := range r {
			if k != "custom_id" && k != "params" {
				return nil, invalid("."+k, "unknown field: a request has only custom_id and params")
			}
		}
		var id string
		if v, ok := r["custom_id"]; !ok || json.Unmarshal(v, &id) != nil {
			return nil, invalid(".custom_id", "a string is required")
		}
		if !customIDPattern.MatchString(id) {
			return nil, invalid(".custom_id", "%q must be 1 to 64 letters, digits, underscores or hyphens", id)
		}
		if first, dup := seen[id]; dup {
			return nil, invalid(".custom_id", "%q is also the custom_id of requests.%d: custom_id must be unique within a batch", id, first)
		}
		seen[id] = i
		var params map[string]json.RawMessage
		if err := json.Unmarshal(r["params"], &params); err != nil || params == nil {
			return nil, invalid(".params", "an object of Messages API parameters is required")
		}
		var model string
		if v, ok := params["model"]; !ok || json.Unmarshal(v, &model) != nil || model == "" {
			return nil, invalid(".params.model", "a model name is required")
		}
		// Anthropic refuses a batch request of max_tokens below 1 at
		// create (docs/api.md "Anthropic Message Batches"); any other
		// value is the upstream's to judge.
		var maxTokens float64
		if v, ok := params["max_tokens"]; ok && json.Unmarshal(v, &maxTokens) == nil && maxTokens < 1 {
			return nil, invalid(".params.max_tokens", "must be at least 1, not %s", bytes.TrimSpace(v))
		}
		body := r["params"]
		if _, ok := s.Batches.Models.Lookup(model); !ok {
			body = refusedRow(lastModel, fmt.Sprintf("params.model: %q is not a configured model (configured: %s)", model, strings.Join(s.Batches.Models.Names(), ", ")))
		} else if !mayUse(model) {
			body = refusedRow(lastModel, fmt.Sprintf("params.model: %q is not a model this API key may use (model_not_allowed)", model))
		} else if v, ok := params["stream"]; ok && string(bytes.TrimSpace(v)) == "true" {
			body = refusedRow(lastModel, "params.stream: streaming is not supported in a message batch")
		} else {
			lastModel = model
		}
		if err := enc.Encode(jsonl.Request{CustomID: id, Method: "POST", URL: endpoint.Messages, Body: body}); err != nil {
			return nil, invalid(".params", "%v", err)
		}
	}
	return buf.Bytes(), nil
}

// refusedRow is the body of a row that must come back errored without
// being sent: provider.RefusedKey carries why, and model, a configured
// one, only says whose chunk it runs in (the previous request's, so it
// does not cut the batch's chunks in two).
func refusedRow(model, message string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"model": model, "relay": map[string]string{provider.RefusedKey: message}})
	return b
}

// defaultModel is the chunk of refused rows before any good one: the first
// configured model of Anthropic's shape, else the first model.
func (s *Service) defaultModel() string {
	ms := s.Batches.Models
	for _, name := range ms.Names() {
		if m, _ := ms.Lookup(name); m.Shape == config.Anthropic {
			return name
		}
	}
	return ms.Names()[0]
}

// deleteFile removes the input file CreateMessageBatch wrote; a failure
// only leaves an orphan behind, so it is logged, not returned.
func (s *Service) deleteFile(ctx context.Context, f file.File) {
	bs := s.Batches
	if err := bs.Blobs.Delete(ctx, f.Objects...); err != nil {
		bs.Log.WarnContext(ctx, "delete file objects", "file_id", f.ID, "tenant", f.Tenant, "err", err)
	}
	if err := bs.Store.DeleteFile(ctx, f.Tenant, f.ID); err != nil {
		bs.Log.WarnContext(ctx, "delete file", "file_id", f.ID, "tenant", f.Tenant, "err", err)
	}
}

// getMessageBatch reads a tenant's message batch; another tenant's, or a
// batch of the OpenAI API, is not found.
func (s *Service) getMessageBatch(ctx context.Context, tenant, id string) (batch.Batch, error) {
	if !ids.Valid(batches.MessageBatchPrefix, id) {
		return batch.Batch{}, errs.NotFoundf("no such message batch: %s", id)
	}
	b, err := s.Batches.Store.GetBatch(ctx, tenant, id)
	if errors.Is(err, store.ErrBatchNotFound) || (err == nil && b.Endpoint != endpoint.Messages) {
		return batch.Batch{}, errs.NotFoundf("no such message batch: %s", id)
	}
	return b, err
}

// GetMessageBatch returns a tenant's message batch, with its cost.
func (s *Service) GetMessageBatch(ctx context.Context, tenant, id string) (wire.MessageBatch, error) {
	b, err := s.getMessageBatch(ctx, tenant, id)
	if err != nil {
		return wire.MessageBatch{}, err
	}
	return s.view(s.Batches.WithCost(ctx, b)), nil
}

// MessagePage selects a page of message batches, newest first: the ones
// right after (older than) AfterID, or right before (newer than) BeforeID.
type MessagePage struct {
	AfterID, BeforeID string
	Limit             int
}

// ListMessageBatches lists a tenant's message batches newest first, with
// their costs.
func (s *Service) ListMessageBatches(ctx context.Context, tenant string, pg MessagePage) ([]wire.MessageBatch, bool, error) {
	for name, id := range map[string]string{"after_id": pg.AfterID, "before_id": pg.BeforeID} {
		if id != "" && !ids.Valid(batches.MessageBatchPrefix, id) {
			return nil, false, errs.Invalidf(name, "%s: %q is not a message batch id", name, id)
		}
	}
	if pg.AfterID != "" && pg.BeforeID != "" {
		return nil, false, errs.Invalidf("before_id", "send before_id or after_id, not both")
	}
	var bs []batch.Batch
	var more bool
	var err error
	if pg.BeforeID != "" {
		bs, more, err = s.messageBatchesBefore(ctx, tenant, pg.BeforeID, pg.Limit)
	} else {
		bs, more, err = s.messageBatchesAfter(ctx, tenant, pg.AfterID, pg.Limit)
	}
	if err != nil {
		return nil, false, err
	}
	s.Batches.WithCosts(ctx, bs)
	out := make([]wire.MessageBatch, len(bs))
	for i, b := range bs {
		out[i] = s.view(b)
	}
	return out, more, nil
}

// A tenant's batches sort by id under one key, newest first, and every
// message batch id sorts above every batch_ id; messageTop sorts above every
// message batch id, so a listing from it starts with the newest of them.
const messageTop = batches.MessageBatchPrefix + "~"

func isMessageBatch(b batch.Batch) bool { return strings.HasPrefix(b.ID, batches.MessageBatchPrefix) }

// messageBatchesAfter lists up to limit message batches older than after.
func (s *Service) messageBatchesAfter(ctx context.Context, tenant, after string, limit int) ([]batch.Batch, bool, error) {
	if after == "" {
		after = messageTop
	}
	// One more than asked tells whether another message batch follows (the
	// store's "more" may be about the OpenAI batches listed after them).
	bs, _, err := s.Batches.Store.ListBatches(ctx, tenant, after, limit+1, "")
	if err != nil {
		return nil, false, err
	}
	n := 0
	for n < len(bs) && isMessageBatch(bs[n]) {
		n++
	}
	bs = bs[:n]
	if len(bs) > limit {
		return bs[:limit], true, nil
	}
	return bs, false, nil
}

// messageBatchesBefore lists the limit message batches just newer than
// before, newest first. The store lists only downwards, so this reads the
// newer ones from the top, keeping the last limit+1: cheap for the pages
// near the top that before_id is used for.
func (s *Service) messageBatchesBefore(ctx context.Context, tenant, before string, limit int) ([]batch.Batch, bool, error) {
	const pageSize = 1000
	var newer []batch.Batch
	cursor := messageTop
scan:
	for {
		bs, more, err := s.Batches.Store.ListBatches(ctx, tenant, cursor, pageSize, "")
		if err != nil {
			return nil, false, err
		}
		for _, b := range bs {
			if !isMessageBatch(b) || b.ID <= before {
				break scan
			}
			newer = append(newer, b)
			if len(newer) > 2*(limit+1) {
				newer = append(newer[:0:0], newer[len(newer)-(limit+1):]...)
			}
		}
		if !more || len(bs) == 0 {
			break
		}
		cursor = bs[len(bs)-1].ID
	}
	more := len(newer) > limit
	if more {
		newer = newer[len(newer)-limit:]
	}
	return newer, more, nil
}

// CancelMessageBatch cancels a message batch: it is canceling until the
// requests that are running finish; the rest come back canceled.
func (s *Service) CancelMessageBatch(ctx context.Context, tenant, id string) (wire.MessageBatch, error) {
	b, err := s.getMessageBatch(ctx, tenant, id)
	if err != nil {
		return wire.MessageBatch{}, err
	}
	switch {
	case b.Status.Terminal():
		return wire.MessageBatch{}, errs.E(errs.Invalid, "batch_ended", "", "message batch %s has ended: there is nothing left to cancel", id)
	case b.Status == batch.Finalizing:
		// Every request has run; it ends in a moment with nothing to cancel.
		return s.view(b), nil
	}
	nb, err := s.Batches.Cancel(ctx, tenant, id)
	if errs.Is(err, errs.Conflict) {
		// It began finalizing or ended meanwhile.
		return s.CancelMessageBatch(ctx, tenant, id)
	}
	if err != nil {
		return wire.MessageBatch{}, err
	}
	return s.view(nb), nil
}

// DeleteMessageBatch deletes an ended message batch: its results, its
// input and its records.
func (s *Service) DeleteMessageBatch(ctx context.Context, tenant, id string) error {
	bs := s.Batches
	b, err := s.getMessageBatch(ctx, tenant, id)
	if err != nil {
		return err
	}
	if !b.Status.Terminal() {
		return errs.E(errs.Invalid, "batch_not_ended", "", "message batch %s is %s: only a batch whose processing has ended can be deleted (cancel it first)", id, processingStatus(b))
	}
	// Objects first and the batch record last, so that a delete cut short
	// leaves a batch that can be deleted again.
	parts, err := bs.Blobs.List(ctx, batch.PartsPrefix(tenant, id))
	if err != nil {
		return err
	}
	if err := bs.Blobs.Delete(ctx, parts...); err != nil {
		return err
	}
	for _, fid := range []*string{b.OutputFileID, b.ErrorFileID, &b.InputFileID} {
		if fid == nil || *fid == "" {
			continue
		}
		f, err := bs.Store.GetFile(ctx, tenant, *fid)
		if errors.Is(err, file.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		// An output file's objects are the parts deleted above.
		if err := bs.Blobs.Delete(ctx, f.Objects...); err != nil {
			return err
		}
		if err := bs.Store.DeleteFile(ctx, tenant, f.ID); err != nil {
			return err
		}
	}
	if err := bs.Store.DeleteBatch(ctx, tenant, id); err != nil {
		return fmt.Errorf("delete message batch %s: %w", id, err)
	}
	bs.Log.InfoContext(ctx, "message batch deleted", "batch_id", id, "tenant", tenant)
	return nil
}

// ResultsKept is how long after a message batch ended its results are
// served, as at Anthropic; then it is archived. The bucket removes result
// parts 32 days after they were written (docs/design.md "Data
// layout"), and a message batch writes them within its 24-hour window, so
// results are refused before they could be cut short.
const ResultsKept = 29 * 24 * time.Hour

// view is the Message Batch view of b now. Cancelled rows are counted at
// each chunk's commit, so the object never reads a part.
func (s *Service) view(b batch.Batch) wire.MessageBatch {
	return messageBatchOf(b, b.CancelledRows, s.Batches.Now())
}

// endedAt is when a terminal batch ended; nil while it runs.
func endedAt(b batch.Batch) *int64 {
	for _, at := range []*int64{b.CompletedAt, b.CancelledAt, b.ExpiredAt, b.FailedAt} {
		if at != nil {
			return at
		}
	}
	return nil
}

// archivedAt is when an ended batch's results stop being served (by now),
// nil before.
func archivedAt(b batch.Batch, now time.Time) *int64 {
	end := endedAt(b)
	if end == nil || !b.Status.Terminal() {
		return nil
	}
	at := *end + int64(ResultsKept/time.Second)
	if now.Unix() < at {
		return nil
	}
	return &at
}

// processingStatus maps the batch lifecycle onto Anthropic's three states.
func processingStatus(b batch.Batch) string {
	switch {
	case b.Status.Terminal():
		return wire.ProcessingEnded
	case b.CancellingAt != nil:
		return wire.ProcessingCanceling
	}
	return wire.ProcessingInProgress
}

// messageBatchOf builds the object from the batch and its count of
// cancelled rows, at now: once it ended, failed rows split into canceled,
// expired (both counted exactly) and errored (the rest); before, every
// request is processing (docs/api.md "Anthropic Message Batches").
func messageBatchOf(b batch.Batch, canceled int64, now time.Time) wire.MessageBatch {
	n := b.RequestCounts
	m := wire.MessageBatch{
		ID: b.ID, Type: "message_batch", ProcessingStatus: processingStatus(b),
		CreatedAt: rfc3339(b.CreatedAt), ExpiresAt: stamp(b.ExpiresAt), CancelInitiatedAt: stamp(b.CancellingAt),
		Cost: b.Cost, Modes: jsonOf(b.Modes),
		RequestCounts: wire.MessageRequestCounts{
			Succeeded: n.Completed, Canceled: canceled, Expired: b.ExpiredRows,
			Errored: n.Failed - canceled - b.ExpiredRows,
		},
	}
	if m.Ended() {
		m.EndedAt, m.ArchivedAt = stamp(endedAt(b)), stamp(archivedAt(b, now))
		// Rows that never ran (a batch that failed before its rows were
		// planned) are errored, so the counts still add up.
		c := m.RequestCounts
		if rest := n.Total - c.Succeeded - c.Errored - c.Canceled - c.Expired; rest > 0 {
			m.RequestCounts.Errored += rest
		}
	} else {
		// As Anthropic reports them: succeeded, errored, canceled and
		// expired stay 0 until processing of the whole batch has ended.
		m.RequestCounts = wire.MessageRequestCounts{Processing: n.Total}
		m.EstimatedCompletionAt = stamp(b.ETA(now))
	}
	return m
}

// jsonOf is modes as JSON, nil without them.
func jsonOf(modes *batch.Modes) json.RawMessage {
	if modes == nil {
		return nil
	}
	j, _ := json.Marshal(modes)
	return j
}

func rfc3339(unix int64) string { return time.Unix(unix, 0).UTC().Format(time.RFC3339) }

func stamp(unix *int64) *string {
	if unix == nil {
		return nil
	}
	s := rfc3339(*unix)
	return &s
}

// MessageResults checks that a message batch has ended and returns what
// writes its results: one JSONL line per request, in input order.
func (s *Service) MessageResults(ctx context.Context, tenant, id string) (func(io.Writer) error, error) {
	b, err := s.getMessageBatch(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if !b.Status.Terminal() {
		return nil, errs.E(errs.Invalid, "batch_not_ended", "", "message batch %s is %s: its results are available once processing_status is ended", id, processingStatus(b))
	}
	if at := archivedAt(b, s.Batches.Now()); at != nil {
		return nil, errs.E(errs.NotFound, "batch_archived", "", "message batch %s was archived at %s: results are kept %d days after a batch ends", id, rfc3339(*at), int(ResultsKept/(24*time.Hour)))
	}
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 64<<10)
		write := func(r wire.MessageResult) error {
			line, err := json.Marshal(r)
			if err != nil {
				return err
			}
			_, err = bw.Write(append(line, '\n'))
			return err
		}
		if b.ChunksTotal == 0 {
			if err := s.unplannedResults(ctx, b, write); err != nil {
				return err
			}
			return bw.Flush()
		}
		chunks, err := s.Batches.Store.Chunks(ctx, id)
		if err != nil {
			return err
		}
		err = s.Batches.EachLine(ctx, chunks, func(c batch.Chunk, i int, _ byte, line []byte) error {
			var l part.Line
			if err := json.Unmarshal(line, &l); err != nil {
				return fmt.Errorf("line %d of chunk %d of %s: %w", i, c.Index, id, err)
			}
			return write(MessageResultOf(l))
		})
		if err != nil {
			return err
		}
		return bw.Flush()
	}, nil
}

// unplannedResults reports every request of a batch that ended before its
// rows were planned (its input failed validation) as errored.
func (s *Service) unplannedResults(ctx context.Context, b batch.Batch, write func(wire.MessageResult) error) error {
	f, err := s.Batches.Store.GetFile(ctx, b.Tenant, b.InputFileID)
	if errors.Is(err, file.ErrNotFound) {
		return nil // nothing left to name the requests by
	}
	if err != nil {
		return err
	}
	msg := "the batch ended before this request ran"
	if len(b.ErrorList) > 0 {
		msg = "the batch failed validation before this request ran: " + b.ErrorList[0].Message
	}
	rc := s.Batches.Blobs.Concat(ctx, f.Objects)
	defer rc.Close()
	// Line by line: the input may be hundreds of MB (docs/design.md "Memory").
	lines := bufio.NewScanner(rc)
	lines.Buffer(make([]byte, 0, 64<<10), jsonl.DefaultMaxLineBytes+2)
	for lines.Scan() {
		reqs, err := jsonl.ParseRequests(lines.Bytes())
		if err != nil {
			return err
		}
		for _, r := range reqs {
			if err := write(erroredResult(r.CustomID, wire.ErrorType(http.StatusBadRequest), msg, nil)); err != nil {
				return err
			}
		}
	}
	return lines.Err()
}

func erroredResult(customID, typ, message string, requestID *string) wire.MessageResult {
	return wire.MessageResult{CustomID: customID, Result: wire.MessageOutcome{Type: "errored", Error: &wire.ErrorResponse{
		Type: "error", Error: wire.ErrorObject{Type: typ, Message: message}, RequestID: requestID,
	}}}
}

// MessageResultOf turns an output or error line into a result: a 2xx
// answer succeeded with the upstream's message; another answer errored
// with the upstream's error; batch_cancelled and batch_expired are canceled
// and expired; any other code (a request that got no answer) errored with
// a message that starts with the code.
func MessageResultOf(l part.Line) wire.MessageResult {
	switch {
	case l.Succeeded():
		return wire.MessageResult{CustomID: l.CustomID, Result: wire.MessageOutcome{Type: "succeeded", Message: l.Response.Body}}
	case l.Response != nil:
		typ, msg := upstreamError(l.Response.StatusCode, l.Response.Body)
		var rid *string
		if l.Response.RequestID != "" {
			rid = &l.Response.RequestID
		}
		return erroredResult(l.CustomID, typ, msg, rid)
	case l.Error == nil:
		return erroredResult(l.CustomID, wire.ErrorType(http.StatusInternalServerError), "the request has no recorded result", nil)
	case l.Error.Code == part.CodeCancelled:
		return wire.MessageResult{CustomID: l.CustomID, Result: wire.MessageOutcome{Type: "canceled"}}
	case l.Error.Code == part.CodeExpired:
		return wire.MessageResult{CustomID: l.CustomID, Result: wire.MessageOutcome{Type: "expired"}}
	}
	return erroredResult(l.CustomID, errorTypeOfCode(l.Error.Code), l.Error.Code+": "+l.Error.Message, nil)
}

// upstreamError reads the type and message of an upstream's error answer,
// Anthropic-shaped when it is; otherwise they come from the status.
func upstreamError(status int, body []byte) (typ, message string) {
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Type != "" && e.Error.Message != "" {
		return e.Error.Type, e.Error.Message
	}
	return wire.ErrorType(status), fmt.Sprintf("the upstream answered HTTP %d", status)
}

// errorTypeOfCode names the Anthropic error type of an engine error code,
// by the status Anthropic would answer it with.
func errorTypeOfCode(code string) string {
	status := http.StatusInternalServerError // dead_letter, connection_error, api_key_unavailable, …
	switch code {
	case inference.CodeModelNotFound:
		status = http.StatusNotFound
	case inference.CodeCrossShapeDispatch, inference.CodeInvalidRequest, inference.CodeModelNotAllowed:
		status = http.StatusBadRequest
	case inference.CodeRequestTimeout:
		status = http.StatusGatewayTimeout
	}
	return wire.ErrorType(status)
}
