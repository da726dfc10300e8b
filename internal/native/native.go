// Package native runs the rows of batch: native models on their provider's
// own batch API, OpenAI's Files + Batch or Anthropic's Message Batches, for
// its discount (docs/design.md "Native batches"). It is the engine's
// Native delegate (engine.Delegate): the engine plans a batch as usual and
// hands it the chunks of such models, which this package cuts into chunk
// groups (batch.Group), one provider batch each. A group's steps are work
// messages like any chunk's: native_submit uploads its rows and creates the
// provider batch, native_poll looks at it with backoff and, once it ended,
// imports its results into the same chunk parts and commits an executor
// writes (engine.CommitRows), so output and error files, counts, usage and
// webhooks are a direct batch's. Rows the provider batch did not answer
// for good (expired, cancelled, failed transiently) run directly, with
// fallback, within the model's capacity: a hybrid batch. Each step that
// spends asks the engine first (Engine.Admit, as an executor's run does):
// a tenant stopped since the plan (a key disabled, a budget spent) creates
// no provider batch, has a running one cancelled at its next poll, and
// gets the refusal's line on each row its provider batch did not answer.
//
// A retried submit never leaves two provider batches running for a group:
// the group records that it is submitting before the provider batch is
// created, and a retry cancels the provider batches of the group it finds
// unrecorded (orphans: OpenAI batches carry metadata naming the group;
// message batches, which carry none, are matched on a listing by their
// request count and then by custom ids) before creating its own. Results
// come from the one provider batch the group records.
package native

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/engine"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/quote"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// Store is what native batches need of the table (internal/store).
type Store interface {
	GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error)
	UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error)
	Chunks(ctx context.Context, batchID string) ([]batch.Chunk, error)
	GetChunk(ctx context.Context, batchID string, i int) (batch.Chunk, error)
	ClaimAlone(ctx context.Context, c batch.Chunk, run string, lease time.Time) error
	Takeover(ctx context.Context, c batch.Chunk, run string, endedBy, lease time.Time) (batch.Chunk, error)
	RenewLease(ctx context.Context, batchID string, chunk int, run string, until time.Time) error
	PutGroups(ctx context.Context, gs []batch.Group) error
	Group(ctx context.Context, batchID string, i int) (batch.Group, error)
	UpdateGroup(ctx context.Context, batchID string, i int, fn func(*batch.Group) error) (batch.Group, error)
}

// Blobs reads a batch's input (internal/blob).
type Blobs interface {
	ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error)
}

// Queue sends to the queues (internal/queue).
type Queue interface {
	Send(ctx context.Context, name string, v any, delay time.Duration) error
	SendBatch(ctx context.Context, name string, vs []any, delay time.Duration) error
}

// Engine commits chunks, lends them its models' slots and says what their
// rows may still spend and run on (*engine.Engine).
type Engine interface {
	CommitRows(ctx context.Context, b batch.Batch, c batch.Chunk, rows *part.Lines) error
	TakeSlots(ctx context.Context, c batch.Chunk) (batch.Chunk, error)
	Route(ctx context.Context, b batch.Batch) (provider.Route, error)
	Admit(ctx context.Context, b batch.Batch, c batch.Chunk, more ...batch.Chunk) (code, message string, err error)
	// AnnounceInProgress queues b's batch.in_progress webhook event once
	// (engine.Engine.AnnounceInProgress).
	AnnounceInProgress(ctx context.Context, b batch.Batch)
}

var (
	_ Store           = (*store.Store)(nil)
	_ Engine          = (*engine.Engine)(nil)
	_ engine.Delegate = (*Service)(nil)
)

// Limit bounds one provider batch: its rows and the bytes of its upload.
type Limit struct {
	Rows  int
	Bytes int64
}

// Limits are the providers' own (docs/api.md "Batches", "Anthropic Message
// Batches"), a little under their byte limits for the framing of each row.
var Limits = map[config.Provider]Limit{
	config.OpenAI:    {Rows: 50_000, Bytes: 199_000_000},
	config.Anthropic: {Rows: 100_000, Bytes: 256_000_000},
}

// Service runs native batches; zero options take their defaults.
type Service struct {
	Store    Store
	Blobs    Blobs
	Queue    Queue
	Engine   Engine
	Provider engine.Provider // rows run directly (hybrid rescue)
	Models   *config.Models
	Keys     provider.KeySource
	HTTP     *http.Client
	Log      *slog.Logger

	// MaxResponseBytes caps an answer imported from a provider batch, as
	// provider.Client.MaxResponseBytes caps a direct one (0:
	// provider.DefaultMaxResponseBytes; docs/design.md "Memory").
	MaxResponseBytes int64
	// Limits override the package's Limits per provider (tests).
	Limits map[config.Provider]Limit
	// PollMin is the first poll's delay, doubling up to PollMax (defaults
	// 30 s and 10 min).
	PollMin, PollMax time.Duration
	// RescueBefore is how long before a batch's window ends a provider
	// batch still running is cancelled, so that its unfinished rows run
	// directly; nil is a tenth of the window, at most two hours.
	RescueBefore func(window time.Duration) time.Duration
	// Lease is how long an import's claim on a chunk lasts unrenewed
	// (default 15 min): longer than the work queue's visibility timeout,
	// so the redelivery of an import that crashed resumes its claims
	// before the tick could hand the chunk to an executor.
	Lease time.Duration
	// AfterCreate, if set, runs after a provider batch is created and
	// before it is recorded; an error there is a crash at the worst
	// moment (docs/design.md "Fault model").
	AfterCreate func(g batch.Group, providerID string) error
	// Now is the clock (required), the engine's.
	Now func() time.Time
}

func (s *Service) lease() time.Duration {
	if s.Lease > 0 {
		return s.Lease
	}
	return 15 * time.Minute
}

func (s *Service) limit(p config.Provider) Limit {
	if l, ok := s.Limits[p]; ok {
		return l
	}
	return Limits[p]
}

var errSkip = errors.New("native: nothing to do")

// tag names a group at its provider: in an OpenAI batch's metadata and in
// every custom id of its rows.
func tag(batchID string, group int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", batchID, group))
	return "g" + hex.EncodeToString(sum[:6])
}

// Handle runs a native batch's step (engine.Delegate): dead is a message
// out of receives, from the work DLQ. A step runs under its group's fence
// (fence.go): a second delivery of it while it runs backs off.
func (s *Service) Handle(ctx context.Context, m msg.Message, dead bool) error {
	var err error
	switch {
	case dead:
		err = s.fenced(ctx, m, s.dead) // busy: the DLQ delivers it again
	case m.Type == msg.NativeSubmit:
		err = s.fenced(ctx, m, s.submit)
	case m.Type == msg.NativePoll:
		err = s.fenced(ctx, m, s.poll)
	}
	var busy busyError
	if !dead && errors.As(err, &busy) {
		return s.backOff(ctx, m, busy)
	}
	if err != nil {
		s.Log.ErrorContext(ctx, "native batch step failed", "type", m.Type, "batch_id", m.Batch, "group", m.Chunk, "dead", dead, "err", err)
	}
	return err
}

// load reads a step's batch and group; false when either is gone.
func (s *Service) load(ctx context.Context, m msg.Message) (batch.Batch, batch.Group, bool, error) {
	b, err := s.Store.GetBatch(ctx, m.Tenant, m.Batch)
	if err == nil {
		var g batch.Group
		g, err = s.Store.Group(ctx, m.Batch, m.Chunk)
		if err == nil {
			return b, g, true, nil
		}
	}
	if errors.Is(err, store.ErrBatchNotFound) {
		return b, batch.Group{}, false, nil
	}
	return b, batch.Group{}, false, err
}

func (s *Service) step(typ string, g batch.Group, n int) msg.Message {
	return msg.Message{Type: typ, Tenant: g.Tenant, Batch: g.Batch, Chunk: g.Index, Attempt: n}
}

// pollDelay is poll n's delay: PollMin doubling up to PollMax.
func (s *Service) pollDelay(n int) time.Duration {
	lo, hi := s.PollMin, s.PollMax
	if lo <= 0 {
		lo = 30 * time.Second
	}
	if hi <= 0 {
		hi = 10 * time.Minute
	}
	d := lo
	for i := 0; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

func (s *Service) sendPoll(ctx context.Context, g batch.Group, n int) error {
	return s.Queue.Send(ctx, resources.Work, s.step(msg.NativePoll, g, n), s.pollDelay(n))
}

// lateForDeadline reports whether group g's provider batch, still
// running, must be cancelled for its rows to run directly by b's
// complete_by: its rows take about quote.DirectSeconds on the model, and
// the next poll may come PollMax later.
func (s *Service) lateForDeadline(b batch.Batch, g batch.Group) bool {
	return b.CompleteBy != nil && !s.rescueFits(s.Now(), b, g.Model, g.Rows)
}

// rescueFits reports whether rows of model, running directly from a poll
// after at (PollMax later at most), would end before b's complete_by.
func (s *Service) rescueFits(at time.Time, b batch.Batch, model string, rows int) bool {
	return at.Add(s.directTime(model, rows) + s.pollDelay(1<<10)).Before(time.Unix(*b.CompleteBy, 0))
}

// directTime is how long rows of model take to run directly: the quote's
// duration for them (quote.DirectTime).
func (s *Service) directTime(model string, rows int) time.Duration {
	m, _ := s.Models.Lookup(model)
	return quote.DirectTime(m, rows)
}

// startsNative reports whether b's rows of model start on a provider
// batch: always without a complete_by; with one, only when, from the
// batch's creation, the model's batch_turnaround (when known) ends before
// it and its rows' direct run would still fit after a poll
// (rescueFits). Otherwise the cheapest mode the estimate says meets the
// deadline is direct, from the start (docs/api.md "Extensions"). It
// counts from the creation, not now, so that a plan retried decides the
// same.
func (s *Service) startsNative(b batch.Batch, model string, rows int) bool {
	if b.CompleteBy == nil {
		return true
	}
	m, _ := s.Models.Lookup(model)
	created := time.Unix(b.CreatedAt, 0)
	return created.Add(m.BatchTurnaround).Before(time.Unix(*b.CompleteBy, 0)) && s.rescueFits(created, b, model, rows)
}

// closeToEnd reports whether b's window is near enough its end that a
// provider batch still running is cancelled for its rows to run directly.
func (s *Service) closeToEnd(b batch.Batch) bool {
	if b.ExpiresAt == nil {
		return false
	}
	window := time.Duration(*b.ExpiresAt-b.CreatedAt) * time.Second
	before := min(window/10, 2*time.Hour)
	if s.RescueBefore != nil {
		before = s.RescueBefore(window)
	}
	return s.Now().After(time.Unix(*b.ExpiresAt, 0).Add(-before))
}
