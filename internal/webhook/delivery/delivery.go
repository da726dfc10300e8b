// Package delivery delivers completion webhooks (docs/api.md "Webhooks").
// A terminal batch with a webhook_url puts one message on the webhook queue
// carrying the signed-to-be event, so every attempt sends the same
// webhook-id and body; so do its lifecycle events before it (queued,
// in_progress: Announce), each with a delivery record of its own, and an
// event's first attempt waits for the first attempts of those queued
// before it (message.After), so a receiver that answers gets them in order. The webhook function makes one attempt per message
// and records it on the batch's delivery record (store.WebhookDeliveries);
// a failed attempt re-enqueues the message with an SQS delay for the next
// one, until a 2xx, a permanent refusal, or the retry horizon. SQS delays
// stop at 15 minutes, so a longer wait is a chain of delayed messages, each
// re-sent until the attempt's time comes.
//
// It is apart from package webhook, which holds the HTTP client, URL policy
// and retry schedule, because it reads and writes the store, which imports
// package webhook.
package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
)

// Service delivers completion webhooks. The zero options deliver with the
// deployment policy and the schedule of docs/api.md "Webhooks".
type Service struct {
	Store Store
	Queue Queue
	Log   *slog.Logger
	// Now is the clock, the service's one (app.New): when an event was
	// created, an attempt is due and the retries give up.
	Now func() time.Time

	// Client makes the attempts; nil means webhook.NewClient(egress.Policy{}).
	// The engine checks webhook_url at create against the same client's
	// Policy (app.New gives both the same one).
	Client *webhook.Client
	// Backoff is the wait before the attempt after n failed ones; nil means
	// webhook.Backoff (5 s doubling to 1 h, jittered).
	Backoff func(n int) time.Duration
	// RetryFor is how long after the first attempt retries go on; zero
	// means webhook.GiveUp's 24 hours.
	RetryFor time.Duration
}

// Store holds the batches' delivery records and the tenants' signing
// secrets (internal/store).
type Store interface {
	auth.Secrets
	GetWebhookDeliveries(ctx context.Context, batchID, event string) (store.WebhookDeliveries, error)
	UpdateWebhookDeliveries(ctx context.Context, batchID, event string, fn func(*store.WebhookDeliveries) error) (store.WebhookDeliveries, error)
}

// Queue sends the attempts' messages (internal/queue).
type Queue interface {
	Send(ctx context.Context, name string, v any, delay time.Duration) error
}

var (
	_ Store = (*store.Store)(nil)
	_ Queue = (*queue.Sender)(nil)
)

var defaultClient = webhook.NewClient(egress.Policy{})

func (s *Service) client() *webhook.Client {
	if s.Client != nil {
		return s.Client
	}
	return defaultClient
}

func (s *Service) backoff(n int) time.Duration {
	if s.Backoff != nil {
		return s.Backoff(n)
	}
	return webhook.Backoff(n)
}

func (s *Service) giveUp(first, now time.Time) bool {
	if s.RetryFor > 0 {
		return now.Sub(first) >= s.RetryFor
	}
	return webhook.GiveUp(first, now)
}

// message is what travels on the webhook queue: one attempt.
type message struct {
	Tenant string        `json:"tenant"`
	Batch  string        `json:"batch_id"`
	URL    string        `json:"url"`
	Event  webhook.Event `json:"event"`
	// Attempt is the 1-based number of the attempt this message makes.
	Attempt int `json:"attempt"`
	// NotBefore (Unix milliseconds) is when the attempt is due; a message
	// that arrives earlier (waits beyond SQS's 15-minute delay) goes back.
	NotBefore int64 `json:"not_before,omitempty"`
	// After are the types of the batch's events queued before this one;
	// its first attempt waits until theirs are made, for at most orderWait
	// from WaitFrom (Unix milliseconds), the first wait.
	After    []string `json:"after,omitempty"`
	WaitFrom int64    `json:"wait_from,omitempty"`
}

// orderWait bounds how long an event's first attempt waits for the first
// attempts of the events before it: one of those lost (or queued by a
// version that sent none) must not hold the next ones back for long.
const orderWait = 2 * time.Minute

// orderPoll is the wait before looking again at the events before one.
const orderPoll = time.Second

// errDuplicate stops the record of an attempt a duplicate message recorded
// first.
var errDuplicate = errors.New("delivery: attempt already recorded")

// Enqueue queues the completion event of a terminal batch that has a
// webhook_url (batches.Service.Terminal calls it), after the lifecycle
// events it announced: queued once started (batch.Batch.Started, which the
// plan records after queueing it), in_progress once recorded
// (batch.Batch.AnnouncedInProgress).
func (s *Service) Enqueue(ctx context.Context, b batch.Batch) error {
	var after []string
	if b.Started {
		after = append(after, "batch."+webhook.Queued)
	}
	if b.AnnouncedInProgress {
		after = append(after, "batch."+webhook.InProgress)
	}
	return s.enqueue(ctx, b, b.Status, after)
}

// Announce queues lifecycle event (webhook.Queued or webhook.InProgress) of
// batch b, if it has a webhook_url; in_progress comes after queued, which
// the plan queues before any chunk can start.
func (s *Service) Announce(ctx context.Context, b batch.Batch, event string) error {
	var after []string
	if event == webhook.InProgress {
		after = []string{"batch." + webhook.Queued}
	}
	return s.enqueue(ctx, b, batch.Status(event), after)
}

// enqueue queues the first attempt of b's event batch.<status>, whose
// first attempt waits for those of the events of types after.
func (s *Service) enqueue(ctx context.Context, b batch.Batch, status batch.Status, after []string) error {
	if b.WebhookURL == nil || *b.WebhookURL == "" {
		return nil
	}
	data, err := json.Marshal(b.Out())
	if err != nil {
		return fmt.Errorf("webhook event of %s: %w", b.ID, err)
	}
	ev, err := webhook.NewEvent(string(status), data, s.Now())
	if err != nil {
		return fmt.Errorf("webhook event of %s: %w", b.ID, err)
	}
	ev.ID = eventID(b.ID, status)
	m := message{Tenant: b.Tenant, Batch: b.ID, URL: *b.WebhookURL, Event: ev, Attempt: 1, After: after}
	if err := s.Queue.Send(ctx, resources.Webhook, m, 0); err != nil {
		return fmt.Errorf("queue webhook of %s: %w", b.ID, err)
	}
	return nil
}

// eventID names the event of a batch's status (terminal, or a lifecycle
// event's). It is derived, not random, so that a state reported twice (a
// redelivered finalize) is one event to receivers, who dedupe on
// webhook-id, and one delivery record here.
func eventID(batchID string, status batch.Status) string {
	sum := sha256.Sum256([]byte(batchID + "\x00" + string(status)))
	return "evt_" + hex.EncodeToString(sum[:])[:25]
}

// Deliver is the webhook function's SQS handler. A batch's messages are
// attempted concurrently: each may take the whole per-attempt timeout, and
// ten in a row would outlast the function.
func (s *Service) Deliver(ctx context.Context, ds []msg.Delivery) ([]string, error) {
	var (
		failed []string
		mu     sync.Mutex
		wg     sync.WaitGroup
	)
	for _, d := range ds {
		var m message
		if err := json.Unmarshal([]byte(d.Body), &m); err != nil || m.Batch == "" || m.Attempt < 1 {
			s.Log.ErrorContext(ctx, "undecodable webhook message dropped", "message_id", d.ID)
			continue
		}
		redelivered := d.ReceiveCount > 1
		wg.Go(func() {
			if err := s.deliver(ctx, m, redelivered); err != nil {
				s.Log.ErrorContext(ctx, "webhook message failed", "message_id", d.ID, "batch_id", m.Batch,
					"tenant", m.Tenant, "attempt", m.Attempt, "err", err)
				mu.Lock()
				failed = append(failed, d.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed, nil
}

// deliver makes the attempt m stands for, unless it was made already (a
// duplicate message) or the webhook is settled, records it and queues the
// next one if it failed.
func (s *Service) deliver(ctx context.Context, m message, redelivered bool) error {
	d, err := s.Store.GetWebhookDeliveries(ctx, m.Batch, m.Event.Type)
	if err != nil {
		return err
	}
	switch {
	case d.Delivered || d.GaveUp || d.Count > m.Attempt:
		return nil
	case d.Count == m.Attempt:
		// Made and recorded. A redelivery means the invocation failed
		// after that, perhaps before queueing the next attempt: queue it
		// (a duplicate of it is dropped when its attempt is recorded).
		if redelivered {
			return s.queueNextAttempt(ctx, m, s.Now())
		}
		return nil
	}
	now := s.Now()
	if wait := time.UnixMilli(m.NotBefore).Sub(now); m.NotBefore > 0 && wait > 0 {
		return s.Queue.Send(ctx, resources.Webhook, m, queue.Delay(wait))
	}
	if waiting, err := s.waitForEarlier(ctx, m, now); waiting || err != nil {
		return err
	}
	secret, err := auth.WebhookSecret(ctx, s.Store, m.Tenant)
	if err != nil {
		return fmt.Errorf("webhook secret of %s: %w", m.Tenant, err)
	}
	a := s.client().Deliver(ctx, m.URL, secret, m.Event, m.Attempt)
	done := s.Now()
	d, err = s.Store.UpdateWebhookDeliveries(ctx, m.Batch, m.Event.Type, func(d *store.WebhookDeliveries) error {
		if d.Delivered || d.GaveUp || d.Count >= m.Attempt {
			return errDuplicate // a duplicate of this attempt got here first
		}
		if d.Count == 0 {
			d.FirstAttempt = now
		}
		d.EventID, d.Count = m.Event.ID, m.Attempt
		d.Attempts = append(d.Attempts, a)
		if n := len(d.Attempts); n > store.MaxWebhookAttempts {
			d.Attempts = d.Attempts[n-store.MaxWebhookAttempts:]
		}
		switch {
		case a.Delivered():
			d.Delivered = true
		case a.Permanent || s.giveUp(d.FirstAttempt, done):
			d.GaveUp = true
		}
		return nil
	})
	if errors.Is(err, errDuplicate) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record webhook attempt %d of %s: %w", m.Attempt, m.Batch, err)
	}
	log := s.Log.With("batch_id", m.Batch, "tenant", m.Tenant, "attempt", m.Attempt, "event_id", m.Event.ID)
	switch {
	case d.Delivered:
		log.InfoContext(ctx, "webhook delivered", "status_code", a.StatusCode)
		return nil
	case d.GaveUp:
		log.WarnContext(ctx, "webhook given up", "permanent", a.Permanent, "err", a.Error)
		return nil
	}
	log.InfoContext(ctx, "webhook attempt failed", "status_code", a.StatusCode, "err", a.Error)
	return s.queueNextAttempt(ctx, m, done)
}

// waitForEarlier sends m back for another look in orderPoll when it is a
// first attempt and an event of m.After has no attempt made yet, unless it
// has waited orderWait already; true when it did.
func (s *Service) waitForEarlier(ctx context.Context, m message, now time.Time) (bool, error) {
	if m.Attempt != 1 || len(m.After) == 0 {
		return false, nil
	}
	if m.WaitFrom == 0 {
		m.WaitFrom = now.UnixMilli()
	}
	if now.Sub(time.UnixMilli(m.WaitFrom)) >= orderWait {
		s.Log.WarnContext(ctx, "webhook event sent before an earlier one was attempted", "batch_id", m.Batch, "event", m.Event.Type, "after", m.After)
		return false, nil
	}
	for _, t := range m.After {
		d, err := s.Store.GetWebhookDeliveries(ctx, m.Batch, t)
		if err != nil {
			return false, err
		}
		if d.Count == 0 && !d.Delivered && !d.GaveUp {
			if err := s.Queue.Send(ctx, resources.Webhook, m, orderPoll); err != nil {
				return false, fmt.Errorf("queue webhook %s of %s after %s: %w", m.Event.Type, m.Batch, t, err)
			}
			return true, nil
		}
	}
	return false, nil
}

// queueNextAttempt queues the attempt after m's, due a backoff after now.
func (s *Service) queueNextAttempt(ctx context.Context, m message, now time.Time) error {
	wait := max(s.backoff(m.Attempt), 0)
	next := m
	next.Attempt++
	next.NotBefore = now.Add(wait).UnixMilli()
	if err := s.Queue.Send(ctx, resources.Webhook, next, queue.Delay(wait)); err != nil {
		return fmt.Errorf("queue webhook attempt %d of %s: %w", next.Attempt, m.Batch, err)
	}
	return nil
}

// WithDeliveries adds the webhook_deliveries summary to a terminal batch
// that has a webhook_url (the engine's Get calls it). The summary is
// decoration: failing to read it does not fail the read of the batch.
func (s *Service) WithDeliveries(ctx context.Context, b batch.Batch) batch.Batch {
	if b.WebhookURL == nil || !b.Status.Terminal() {
		return b
	}
	d, err := s.Store.GetWebhookDeliveries(ctx, b.ID, "batch."+string(b.Status))
	if err != nil {
		s.Log.WarnContext(ctx, "read webhook deliveries", "batch_id", b.ID, "err", err)
		return b
	}
	sum := d.Summary()
	b.WebhookDeliveries = &sum
	return b
}
