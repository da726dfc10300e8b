package batches

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/govern"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/quote"
	"github.com/relaybatch/relay/internal/store"
)

// Quote answers a create with dry_run (docs/api.md "Quotes"): it checks
// the create as Create does, then reads its input as the plan would,
// without recording anything, and estimates its rows, tokens, cost and
// duration per execution mode (internal/quote). A row the plan would
// refuse is a 400 naming its line.
func (s *Service) Quote(ctx context.Context, p auth.Principal, req CreateRequest) (quote.Quote, error) {
	if req.Endpoint == "" && req.Model != "" {
		req.Endpoint = endpoint.Chat
	}
	window, err := checkCreate(req, Endpoints)
	if err != nil {
		return quote.Quote{}, err
	}
	opts, err := checkOptions(req, false, s.checkWebhookURL, s.Models, p.MayUse)
	if err != nil {
		return quote.Quote{}, err
	}
	if req.Model != "" {
		if _, ok := s.Models.Lookup(req.Model); !ok {
			return quote.Quote{}, errs.Invalidf("model", "model %q is not a configured model (configured: %s)", req.Model, strings.Join(s.Models.Names(), ", "))
		}
	}
	f, err := s.quotedFile(ctx, p.Tenant, req)
	if err != nil {
		return quote.Quote{}, err
	}
	return s.quoteInput(ctx, p, req, window, opts.inline, f)
}

// QuoteJSONL quotes rows of endpoint given as JSONL, within a 24 h window:
// a message batch's requests (internal/anthropic).
func (s *Service) QuoteJSONL(ctx context.Context, p auth.Principal, endpoint string, data []byte) (quote.Quote, error) {
	req := CreateRequest{Endpoint: endpoint, CompletionWindow: "24h"}
	return s.quoteInput(ctx, p, req, 24*time.Hour, data, file.File{})
}

// quotedFile reads and checks the input file req names, as a create does;
// the zero File when it names none (inline requests).
func (s *Service) quotedFile(ctx context.Context, tenant string, req CreateRequest) (file.File, error) {
	if req.InputFileID == "" {
		return file.File{}, nil
	}
	f, err := s.Files.Get(ctx, tenant, req.InputFileID)
	if errs.Is(err, errs.NotFound) {
		return f, errs.Invalidf("input_file_id", "no such file: %s", req.InputFileID)
	}
	if err != nil {
		return f, err
	}
	return f, checkInputFile(f, req)
}

// quoteInput quotes a create's input: inline, the JSONL of its inline
// requests, or else file f.
func (s *Service) quoteInput(ctx context.Context, p auth.Principal, req CreateRequest, window time.Duration, inline []byte, f file.File) (quote.Quote, error) {
	format := jsonl.JSONL
	var in io.Reader = bytes.NewReader(inline)
	if f.ID != "" {
		var err error
		if format, err = jsonl.FormatOf(f.Filename); err != nil {
			return quote.Quote{}, errs.Invalidf("input_file_id", "%s", err.Error())
		}
		rc := s.Blobs.Concat(ctx, f.Objects)
		defer func() { _ = rc.Close() }()
		in = rc
	}
	tallies, err := s.tally(in, format, req, p)
	if err != nil {
		return quote.Quote{}, err
	}
	models := make(map[string]quote.Model, len(tallies))
	for name := range tallies {
		if models[name], err = s.quoteModel(ctx, name); err != nil {
			return quote.Quote{}, err
		}
	}
	return quote.Estimate(req.Endpoint, tallies, models, window), nil
}

// reserve reserves batch b's estimate (its quote: quoteInput) against its
// tenant's budget (docs/api.md "Budgets, revocation and allow-lists",
// reservations); a create that does not fit is refused with
// budget_exceeded and its quote.
func (s *Service) reserve(ctx context.Context, p auth.Principal, b batch.Batch, quoted func() (quote.Quote, error)) error {
	if s.Reservations == nil {
		return nil
	}
	var q quote.Quote
	err := s.Reservations.Reserve(ctx, p.Tenant, b.ID, func() (store.Reservation, error) {
		var err error
		q, err = quoted()
		if errs.Is(err, errs.Invalid) {
			// An input the plan will refuse runs nothing: it reserves
			// nothing, and the batch fails with its errors as any other.
			return store.Reservation{}, nil
		}
		if err != nil {
			return store.Reservation{}, err
		}
		tokens, usd := q.Reservation()
		return store.Reservation{Tokens: tokens, USD: usd, Rows: q.Rows}, nil
	})
	var e *errs.Error
	if errors.As(err, &e) && e.Code == govern.CodeBudgetExceeded {
		e.Extra = map[string]any{"quote": q}
	}
	return err
}

// checkMaxCost checks a create's max_cost: a positive amount, and a price
// for every model of the batch (each chunk's most is priced when the batch
// is planned, internal/engine).
func checkMaxCost(req CreateRequest, quoted func() (quote.Quote, error)) error {
	if *req.MaxCost <= 0 {
		return errs.Invalidf("max_cost", "max_cost must be a positive amount of USD")
	}
	q, err := quoted()
	if err != nil {
		return err
	}
	if q.Modes.Direct.CostUSD == nil {
		return errs.Invalidf("max_cost", "max_cost needs a price for every model of the batch (relay.yaml price)")
	}
	return nil
}

// quoteOnce is quoteInput's answer, read once however often it is asked
// (a create with max_cost and a budget needs it twice).
func (s *Service) quoteOnce(ctx context.Context, p auth.Principal, req CreateRequest, window time.Duration, inline []byte, f file.File) func() (quote.Quote, error) {
	var (
		q    quote.Quote
		err  error
		done bool
	)
	return func() (quote.Quote, error) {
		if !done {
			q, err = s.quoteInput(ctx, p, req, window, inline, f)
			done = true
		}
		return q, err
	}
}

// tally reads the input's rows by model, refusing the input the plan
// would (internal/plan Scan) with its first error.
func (s *Service) tally(in io.Reader, format jsonl.Format, req CreateRequest, p auth.Principal) (map[string]*quote.Tally, error) {
	known := func(m string) bool { _, ok := s.Models.Lookup(m); return ok }
	opts := jsonl.Options{Format: format, Endpoint: req.Endpoint, Model: req.Model, KnownModel: known, AllowedModel: p.MayUse,
		DefaultModel: endpoint.DefaultModel(s.Models, req.Endpoint)}
	if req.Endpoint == endpoint.Messages {
		// As the plan reads a message batch (internal/plan Scan).
		opts.MaxRows, opts.MaxBytes = 100_000, 256*1000*1000
	}
	tallies := map[string]*quote.Tally{}
	res, err := jsonl.Scan(in, opts, func(r jsonl.Row) error {
		var row struct {
			Body json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(r.JSON, &row); err != nil {
			return fmt.Errorf("row %d: %w", r.Line, err)
		}
		m, _ := s.Models.Lookup(r.Model)
		t := tallies[r.Model]
		if t == nil {
			t = &quote.Tally{}
			tallies[r.Model] = t
		}
		t.Add(m.Tokenizer, quote.ParsePrompt(row.Body))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the input to quote: %w", err)
	}
	if len(res.Errors) > 0 {
		e := res.Errors[0]
		return nil, errs.E(errs.Invalid, e.Code, "input_file_id", "%s", e.Message)
	}
	return tallies, nil
}

// quoteModel is what a quote knows of model name: its configuration, its
// latency and the rows queued on it (its ready entries' chunks left, at
// the plan's chunk size).
func (s *Service) quoteModel(ctx context.Context, name string) (quote.Model, error) {
	m, _ := s.Models.Lookup(name)
	qm := quote.Model{Config: m, Latency: config.DefaultLatency, LatencySource: quote.LatencyDefault}
	if m.Latency > 0 {
		qm.Latency, qm.LatencySource = m.Latency, quote.LatencyConfigured
	}
	entries, err := s.Store.ReadyEntries(ctx, name)
	if err != nil {
		return quote.Model{}, fmt.Errorf("quote %s: %w", name, err)
	}
	rows := s.Chunks.OrDefaults().RowsFor(m.MaxConcurrency)
	for _, e := range entries {
		qm.QueuedRows += max(e.Total-e.Next, 0) * rows
	}
	return qm, nil
}
