package batches

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/store"
)

// Batches in flight per tenant (Service.MaxInflight,
// RELAY_MAX_INFLIGHT_BATCHES; docs/api.md "Limits").
//
// A counter per tenant, T#<tenant>/INFLIGHT, goes up when a batch is
// recorded (conditional on being under the limit, so concurrent creates on
// any number of API instances never overshoot) and down when the batch
// becomes terminal (ReleaseInflight, in Terminal, the engine's
// Lifecycle). Each
// counted batch has a marker item next to the counter; the decrement
// deletes the marker in the same transaction, conditional on it existing,
// so however often a terminal state is reported (finalize redeliveries
// report it again) the slot is given back once. Batches recorded while the limit was off hold no marker
// and give nothing back.
//
// A crash between taking a slot and recording the batch, or between the
// terminal write and the release, leaves a marker behind. Those are
// repaired when they matter: a create that finds the tenant at the limit
// first releases the markers of batches that are terminal or were never
// recorded, then tries once more.

// inflightGrace is how old a marker of a batch that does not exist must
// be before it counts as left behind by a failed create (the API's own
// timeout is 29 s).
const inflightGrace = 2 * time.Minute

// inflightRetryAfter is what a client at the limit is told to wait: batches
// take minutes, so retrying sooner only costs requests.
const inflightRetryAfter = 60

func (s *Service) inflightLimited() error {
	return &errs.Error{
		Kind: errs.RateLimited, Code: "too_many_batches_in_flight", RetryAfter: inflightRetryAfter,
		Message: fmt.Sprintf("this organization already has %d batches in flight, the most allowed: "+
			"wait for one to finish (or cancel one) before creating another", s.MaxInflight),
	}
}

// checkInflight refuses a create early, before its input is read or
// stored, when the tenant is at the limit. It takes nothing: the slot is
// taken when the batch is recorded (createCounted). Templates run nothing
// of their own and are not counted. A repeated Idempotency-Key got its
// first batch before this (Repeat); a new one is checked like no key.
func (s *Service) checkInflight(ctx context.Context, tenant string, req CreateRequest) error {
	if s.MaxInflight <= 0 || req.Schedule != "" {
		return nil
	}
	n, err := s.Store.Inflight(ctx, tenant)
	if err != nil || n < s.MaxInflight {
		return err
	}
	if freed, err := s.repairInflight(ctx, tenant); err != nil || freed > 0 {
		return err
	}
	return s.inflightLimited()
}

// createCounted records b, holding one of its tenant's in-flight slots
// while it runs (templates hold none). A slot taken for a batch that is not
// recorded after all (an error, or an Idempotency-Key that returns the
// first batch instead) is given back at once. At the limit, a retried
// create still gets the batch its Idempotency-Key made the first time.
func (s *Service) createCounted(ctx context.Context, b batch.Batch, idem store.IdemKey) (batch.Batch, bool, error) {
	if b.Status == batch.Scheduled {
		return s.createTemplateCounted(ctx, b, idem)
	}
	if s.MaxInflight <= 0 {
		return s.Store.CreateBatch(ctx, b, idem)
	}
	err := s.Store.ReserveInflight(ctx, b.Tenant, b.ID, s.MaxInflight, s.Now())
	if errors.Is(err, store.ErrInflightLimit) {
		if freed, rerr := s.repairInflight(ctx, b.Tenant); rerr == nil && freed > 0 {
			err = s.Store.ReserveInflight(ctx, b.Tenant, b.ID, s.MaxInflight, s.Now())
		}
	}
	if errors.Is(err, store.ErrInflightLimit) {
		// A create racing the first one with the same key.
		if first, ok, rerr := s.Repeat(ctx, b.Tenant, idem); rerr != nil || ok {
			return first, false, rerr
		}
	}
	if errors.Is(err, store.ErrInflightLimit) {
		return batch.Batch{}, false, s.inflightLimited()
	}
	if err != nil {
		return batch.Batch{}, false, err
	}
	return recordHolding(ctx, s.Store, s.Log, b, idem)
}

// holdingStore is what recording a batch that holds a slot needs of the
// table (internal/store).
type holdingStore interface {
	CreateBatch(ctx context.Context, b batch.Batch, k store.IdemKey) (batch.Batch, bool, error)
	GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error)
	ReleaseInflight(ctx context.Context, tenant, batchID string) (bool, error)
}

// recordHolding records b, which holds an in-flight slot, and gives the
// slot back if b was not recorded. A write whose call failed may have taken
// effect (docs/design.md "Conflicts and ambiguous writes"): b is read back,
// and then it is recorded (its slot kept, the create answered with it) if
// it exists; its slot goes back only if it does not. When even that is
// unknown the slot stays: a marker of a batch never recorded is released
// by the next create at the limit (repairInflight).
func recordHolding(ctx context.Context, st holdingStore, log *slog.Logger, b batch.Batch, idem store.IdemKey) (batch.Batch, bool, error) {
	saved, created, err := st.CreateBatch(ctx, b, idem)
	switch {
	case err == nil && created:
		return saved, true, nil
	case err == nil && saved.ID == b.ID:
		return saved, true, nil // an earlier try of this very write took effect
	case err == nil || errors.Is(err, store.ErrIdemKeyReused):
		// Another batch under the key; nothing of b's was written.
	default:
		got, gerr := st.GetBatch(ctx, b.Tenant, b.ID)
		if gerr == nil {
			log.WarnContext(ctx, "batch recorded although its write failed", "tenant", b.Tenant, "batch_id", b.ID, "err", err)
			return got, true, nil
		}
		if !errors.Is(gerr, store.ErrBatchNotFound) {
			log.ErrorContext(ctx, "read back a batch whose write failed; its in-flight slot stays", "tenant", b.Tenant, "batch_id", b.ID, "err", gerr)
			return saved, created, err
		}
	}
	if _, rerr := st.ReleaseInflight(ctx, b.Tenant, b.ID); rerr != nil {
		log.ErrorContext(ctx, "give back in-flight slot of a batch not recorded", "tenant", b.Tenant, "batch_id", b.ID, "err", rerr)
	}
	return saved, created, err
}

// repairInflight releases the slots of a tenant's batches that ended
// without giving theirs back, or were never recorded, and returns how many
// it freed.
func (s *Service) repairInflight(ctx context.Context, tenant string) (int, error) {
	return s.repair(ctx, tenant, s.Store.InflightMarkers, s.Store.ReleaseInflight)
}

// repair releases, with release, the slots among markers of tenant's
// batches or templates that ended or were never recorded (leftBehind), and
// returns how many it freed.
func (s *Service) repair(ctx context.Context, tenant string,
	markers func(ctx context.Context, tenant string) ([]store.InflightMarker, error),
	release func(ctx context.Context, tenant, id string) (bool, error)) (int, error) {
	ms, err := markers(ctx, tenant)
	if err != nil {
		return 0, err
	}
	freed := 0
	now := s.Now()
	for _, m := range ms {
		b, err := s.Store.GetBatch(ctx, tenant, m.Batch)
		if err != nil && !errors.Is(err, store.ErrBatchNotFound) {
			return freed, err
		}
		if !leftBehind(m, b, err == nil, now) {
			continue
		}
		ok, err := release(ctx, tenant, m.Batch)
		if err != nil {
			return freed, err
		}
		if ok {
			freed++
			s.Log.WarnContext(ctx, "released a left-behind slot", "tenant", tenant, "batch_id", m.Batch)
		}
	}
	return freed, nil
}

// leftBehind reports whether marker m no longer stands for a running
// batch: its batch b (found tells whether it exists) has ended, or was
// never recorded and the create that took the slot is long over.
func leftBehind(m store.InflightMarker, b batch.Batch, found bool, now time.Time) bool {
	if found {
		return b.Status.Terminal()
	}
	return now.Sub(time.Unix(m.CreatedAt, 0)) > inflightGrace
}

// Terminal follows batch b's terminal state, perhaps reported more than
// once (engine.Lifecycle): its in-flight slot back, its hold on its input
// file ended (ReleaseInput), its budget reservation released (quote.go),
// then its webhook queued.
func (s *Service) Terminal(ctx context.Context, b batch.Batch) error {
	if err := s.ReleaseInflight(ctx, b); err != nil {
		return err
	}
	if err := s.ReleaseInput(ctx, b); err != nil {
		return err
	}
	if s.Reservations != nil && b.Schedule == nil {
		if err := s.Reservations.Release(ctx, b); err != nil {
			return err
		}
	}
	// The completion event carries the batch as GET shows it: its cost too.
	return s.Deliveries.Enqueue(ctx, s.WithCost(ctx, b))
}

// Announce queues batch b's lifecycle webhook event (webhook.Queued, when
// the plan validated it; webhook.InProgress, when its first chunk starts:
// engine.Lifecycle), if it has a webhook_url.
func (s *Service) Announce(ctx context.Context, b batch.Batch, event string) error {
	return s.Deliveries.Announce(ctx, b, event)
}

// Announces reports whether b's events go anywhere: its webhook_url or an
// operator endpoint (engine.Lifecycle).
func (s *Service) Announces(b batch.Batch) bool { return s.Deliveries.Announces(b) }

// ReleaseInflight gives back terminal batch b's in-flight slot, if it holds
// one: the release deletes the batch's marker, so it happens once however
// often a terminal state is reported.
func (s *Service) ReleaseInflight(ctx context.Context, b batch.Batch) error {
	if b.Schedule != nil {
		return s.releaseTemplate(ctx, b)
	}
	if s.MaxInflight <= 0 || !b.Status.Terminal() {
		return nil
	}
	_, err := s.Store.ReleaseInflight(ctx, b.Tenant, b.ID)
	return err
}

// Templates per tenant (Service.MaxTemplates, RELAY_MAX_TEMPLATES;
// docs/api.md "Limits"): each scheduled template is an EventBridge
// Scheduler schedule, which the account's quota bounds for every tenant
// together. They are counted as batches in flight are, in a pool of their
// own (store.ReserveTemplate): a template holds a slot from its create to
// its cancel, and a slot left behind by a crash is repaired by the next
// create at the limit.

// CodeTooManyTemplates refuses a template past a tenant's MaxTemplates.
const CodeTooManyTemplates = "too_many_templates"

func (s *Service) templatesLimited() error {
	return errs.E(errs.Invalid, CodeTooManyTemplates, "schedule",
		"this organization already has %d scheduled templates, the most allowed: cancel one before creating another", s.MaxTemplates)
}

// checkTemplates refuses a template early, before anything is written for
// it, when the tenant is at the limit; the slot is taken when the template
// is recorded (createTemplateCounted).
func (s *Service) checkTemplates(ctx context.Context, tenant string) error {
	if s.MaxTemplates <= 0 {
		return nil
	}
	n, err := s.Store.Templates(ctx, tenant)
	if err != nil || n < s.MaxTemplates {
		return err
	}
	if freed, err := s.repairTemplates(ctx, tenant); err != nil || freed > 0 {
		return err
	}
	return s.templatesLimited()
}

// createTemplateCounted records template b holding one of its tenant's
// template slots, as createCounted does a batch with an in-flight slot.
func (s *Service) createTemplateCounted(ctx context.Context, b batch.Batch, idem store.IdemKey) (batch.Batch, bool, error) {
	if s.MaxTemplates <= 0 {
		return s.Store.CreateBatch(ctx, b, idem)
	}
	err := s.Store.ReserveTemplate(ctx, b.Tenant, b.ID, s.MaxTemplates, s.Now())
	if errors.Is(err, store.ErrTemplateLimit) {
		if freed, rerr := s.repairTemplates(ctx, b.Tenant); rerr == nil && freed > 0 {
			err = s.Store.ReserveTemplate(ctx, b.Tenant, b.ID, s.MaxTemplates, s.Now())
		}
	}
	if errors.Is(err, store.ErrTemplateLimit) {
		if first, ok, rerr := s.Repeat(ctx, b.Tenant, idem); rerr != nil || ok {
			return first, false, rerr
		}
		return batch.Batch{}, false, s.templatesLimited()
	}
	if err != nil {
		return batch.Batch{}, false, err
	}
	return recordHolding(ctx, templateHolding{s.Store}, s.Log, b, idem)
}

// templateHolding is the table as recordHolding sees it for a template:
// the slot it gives back is a template's.
type templateHolding struct{ Store }

func (t templateHolding) ReleaseInflight(ctx context.Context, tenant, id string) (bool, error) {
	return t.Store.ReleaseTemplate(ctx, tenant, id)
}

func (s *Service) repairTemplates(ctx context.Context, tenant string) (int, error) {
	return s.repair(ctx, tenant, s.Store.TemplateMarkers, s.Store.ReleaseTemplate)
}

// releaseTemplate gives back a cancelled template's slot, once.
func (s *Service) releaseTemplate(ctx context.Context, b batch.Batch) error {
	if s.MaxTemplates <= 0 || !b.Status.Terminal() {
		return nil
	}
	_, err := s.Store.ReleaseTemplate(ctx, b.Tenant, b.ID)
	return err
}
