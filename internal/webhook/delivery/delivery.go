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
// re-sent until the attempt's time comes. An attempt goes only when its
// receiver's circuit, its tenant's (webhook.CircuitOf), admits it; one
// that finds it open
// waits, uncounted. Each tenant's pending webhooks are capped (pending.go).
// The deployment's operator endpoints get every tenant's events beside
// them, as messages of their own (operator.go).
//
// It is apart from package webhook, which holds the HTTP client, URL policy
// and retry schedule, because it reads and writes the store, which imports
// package webhook.
package delivery

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/ids"
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
	// CircuitThreshold and CircuitCooldown set each receiver's circuit
	// (webhook.Circuit); zero means webhook.CircuitThreshold and
	// webhook.CircuitCooldown.
	CircuitThreshold int
	CircuitCooldown  time.Duration
	// MaxPending caps each tenant's webhooks not yet delivered or given up
	// (RELAY_MAX_PENDING_WEBHOOKS, pending.go); 0 is no cap.
	MaxPending int
	// Operators are the deployment's operator endpoints (relay.yaml
	// operator_webhooks, operator.go): each gets every tenant's events of
	// the types it wants, signed with its secret from OperatorKeys.
	Operators    []config.OperatorWebhook
	OperatorKeys OperatorKeys
}

// Store holds the batches' delivery records and the tenants' signing
// secrets (internal/store).
type Store interface {
	auth.Secrets
	GetWebhookDeliveries(ctx context.Context, batchID, event string) (store.WebhookDeliveries, error)
	UpdateWebhookDeliveries(ctx context.Context, batchID, event string, fn func(*store.WebhookDeliveries) error) (store.WebhookDeliveries, error)
	ReserveWebhook(ctx context.Context, tenant, batchID string, max int, now time.Time) error
	ReleaseWebhook(ctx context.Context, tenant, batchID string) (bool, error)
	WebhookMarkers(ctx context.Context, tenant string) ([]store.InflightMarker, error)
	GetCircuit(ctx context.Context, receiver string) (webhook.Circuit, error)
	UpdateCircuit(ctx context.Context, receiver string, fn func(*webhook.Circuit) error) (webhook.Circuit, error)
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

// horizon is when a webhook first attempted at first is given up.
func (s *Service) horizon(first time.Time) time.Time {
	if s.RetryFor > 0 {
		return first.Add(s.RetryFor)
	}
	return webhook.Horizon(first)
}

func (s *Service) circuitThreshold() int {
	if s.CircuitThreshold > 0 {
		return s.CircuitThreshold
	}
	return webhook.CircuitThreshold
}

func (s *Service) circuitCooldown() time.Duration {
	if s.CircuitCooldown > 0 {
		return s.CircuitCooldown
	}
	return webhook.CircuitCooldown
}

// probeWindow is how long a probe keeps the other deliveries to its
// receiver waiting: its attempt's timeout, and a margin for the rest.
func (s *Service) probeWindow() time.Duration {
	return cmp.Or(s.client().Timeout, webhook.DefaultTimeout) + 5*time.Second
}

// message is what travels on the webhook queue: one attempt.
type message struct {
	Tenant string `json:"tenant"`
	Batch  string `json:"batch_id"`
	// Endpoint is the operator endpoint the event goes to, by name; ""
	// is the batch's own webhook_url.
	Endpoint string        `json:"endpoint,omitempty"`
	URL      string        `json:"url"`
	Event    webhook.Event `json:"event"`
	// Attempt is the 1-based number of the attempt this message makes.
	Attempt int `json:"attempt"`
	// NotBefore (Unix milliseconds) is when the attempt is due; a message
	// that arrives earlier (waits beyond SQS's 15-minute delay) goes back.
	NotBefore int64 `json:"not_before,omitempty"`
	// After are the types of the batch's events queued before this one;
	// its first attempt waits until theirs are made, for at most OrderWait
	// from WaitFrom (Unix milliseconds), the first wait.
	After    []string `json:"after,omitempty"`
	WaitFrom int64    `json:"wait_from,omitempty"`
}

// OrderWait bounds how long an event's first attempt waits for the first
// attempts of the events before it: one of those lost (or queued by a
// version that sent none) must not hold the next ones back for long.
const OrderWait = 2 * time.Minute

// orderPoll is the wait before looking again at the events before one.
const orderPoll = time.Second

// errDuplicate stops the record of an attempt a duplicate message recorded
// first.
var errDuplicate = errors.New("delivery: attempt already recorded")

// errRecorded stops the retry of a record of an attempt that took effect.
var errRecorded = errors.New("delivery: attempt recorded by this write")

// errNotAdmitted and errUnchanged stop a circuit's update with nothing to
// write.
var (
	errNotAdmitted = errors.New("delivery: the receiver's circuit is open")
	errUnchanged   = errors.New("delivery: circuit unchanged")
)

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

// enqueue queues the first attempt of b's event batch.<status> to its
// webhook_url and to each operator endpoint that wants it, whose first
// attempt waits for those of the events of types after that it gets.
func (s *Service) enqueue(ctx context.Context, b batch.Batch, status batch.Status, after []string) error {
	own := b.WebhookURL != nil && *b.WebhookURL != ""
	ops := s.operatorsOf("batch." + string(status))
	if !own && len(ops) == 0 {
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
	if own {
		if err := s.enqueueOwn(ctx, b, ev, after); err != nil {
			return err
		}
	}
	for _, op := range ops {
		m := message{Tenant: b.Tenant, Batch: b.ID, Endpoint: op.Name, URL: op.URL, Event: ev, Attempt: 1, After: wanted(op, after)}
		if err := s.Queue.Send(ctx, resources.Webhook, m, 0); err != nil {
			return fmt.Errorf("queue webhook of %s to operator endpoint %s: %w", b.ID, op.Name, err)
		}
	}
	return nil
}

// enqueueOwn queues event ev of b to its webhook_url.
func (s *Service) enqueueOwn(ctx context.Context, b batch.Batch, ev webhook.Event, after []string) error {
	// Every event of the batch holds its one pending slot of the tenant,
	// from its first event until its completion webhook settles: lifecycle
	// events too, or a tenant churning short batches at a dead receiver
	// would queue two a batch past the cap.
	if ok, err := s.hold(ctx, b, ev); err != nil || !ok {
		return err
	}
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
	m, ok := s.current(ctx, m)
	if !ok {
		return nil
	}
	d, err := s.Store.GetWebhookDeliveries(ctx, m.Batch, m.record(m.Event.Type))
	if err != nil {
		return err
	}
	switch {
	case d.Delivered || d.GaveUp:
		s.release(ctx, m) // a duplicate message may find a slot given back late
		return nil
	case d.Count > m.Attempt:
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
	receiver := m.circuit()
	circuit, err := s.circuit(ctx, receiver)
	if err != nil {
		return err
	}
	if !circuit.Closed() && now.UnixMilli() < circuit.OpenUntil {
		// Cooling down: no poll for the earlier events, which it holds too.
		return s.snooze(ctx, m, d, time.UnixMilli(circuit.OpenUntil), now)
	}
	if waiting, err := s.waitForEarlier(ctx, &m, now); waiting || err != nil {
		return err
	}
	circuit, admitted, retryAt, err := s.admit(ctx, receiver, circuit, now)
	if err != nil {
		return err
	}
	if !admitted {
		return s.snooze(ctx, m, d, retryAt, now)
	}
	return s.attempt(ctx, m, circuit, now)
}

// waitForEarlier sends m back for another look in orderPoll when it is a
// first attempt and an event of m.After has no attempt made yet, unless it
// has waited OrderWait already, when it waits no more (its After cleared,
// an in_progress still unattempted queued again once: resendLost); true
// when it did.
func (s *Service) waitForEarlier(ctx context.Context, m *message, now time.Time) (bool, error) {
	if m.Attempt != 1 || len(m.After) == 0 {
		return false, nil
	}
	if m.WaitFrom == 0 {
		m.WaitFrom = now.UnixMilli()
	}
	if now.Sub(time.UnixMilli(m.WaitFrom)) >= OrderWait {
		s.Log.WarnContext(ctx, "webhook event sent before an earlier one was attempted", "batch_id", m.Batch, "event", m.Event.Type, "after", m.After)
		if err := s.resendLost(ctx, *m, now); err != nil {
			return false, err
		}
		m.After = nil
		return false, nil
	}
	for _, t := range m.After {
		d, err := s.Store.GetWebhookDeliveries(ctx, m.Batch, m.record(t))
		if err != nil {
			return false, err
		}
		if d.Count == 0 && !d.Delivered && !d.GaveUp {
			if err := s.Queue.Send(ctx, resources.Webhook, *m, orderPoll); err != nil {
				return false, fmt.Errorf("queue webhook %s of %s after %s: %w", m.Event.Type, m.Batch, t, err)
			}
			return true, nil
		}
	}
	return false, nil
}

// resendLost queues again, as a first attempt, the in_progress event of
// m.After when it still has no attempt made once m has waited OrderWait
// for it: the engine records in_progress announced before it queues it,
// and an invocation that died between the two lost it; so it is sent late
// rather than never, with m's batch as its data. One merely slow (waiting
// for its receiver's circuit) is the same event twice: one event id, one
// delivery record. batch.queued needs none: the plan queues it before it
// records the batch started.
func (s *Service) resendLost(ctx context.Context, m message, now time.Time) error {
	for _, t := range m.After {
		if t != "batch."+webhook.InProgress {
			continue
		}
		d, err := s.Store.GetWebhookDeliveries(ctx, m.Batch, m.record(t))
		if err != nil {
			return err
		}
		if d.Count > 0 || d.Delivered || d.GaveUp {
			continue
		}
		status := strings.TrimPrefix(t, "batch.")
		ev, err := webhook.NewEvent(status, m.Event.Data, now)
		if err != nil {
			return fmt.Errorf("webhook event %s of %s: %w", t, m.Batch, err)
		}
		ev.ID = eventID(m.Batch, batch.Status(status))
		lost := message{Tenant: m.Tenant, Batch: m.Batch, Endpoint: m.Endpoint, URL: m.URL, Event: ev, Attempt: 1}
		if err := s.Queue.Send(ctx, resources.Webhook, lost, 0); err != nil {
			return fmt.Errorf("queue webhook %s of %s again: %w", t, m.Batch, err)
		}
	}
	return nil
}

// attempt makes the attempt m stands for, due at now, counts it in its
// receiver's circuit, records it and follows it up: the tenant's pending
// slot back once the webhook is settled, the next attempt queued if not.
func (s *Service) attempt(ctx context.Context, m message, circuit webhook.Circuit, now time.Time) error {
	secret, err := s.secret(ctx, m)
	if err != nil {
		return err
	}
	a := s.client().Deliver(ctx, m.URL, secret, m.Event, m.Attempt)
	done := s.Now()
	s.recordCircuit(ctx, circuit, a, done)
	d, err := s.recordAttempt(ctx, m, a, now, done)
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
		s.release(ctx, m)
		return nil
	case d.GaveUp:
		log.WarnContext(ctx, "webhook given up", "permanent", a.Permanent, "err", a.Error)
		s.release(ctx, m)
		return nil
	}
	log.InfoContext(ctx, "webhook attempt failed", "status_code", a.StatusCode, "err", a.Error)
	return s.queueNextAttempt(ctx, m, done)
}

// recordAttempt records attempt a of m, started at start and finished at
// done, on the batch's delivery record: errDuplicate when a duplicate of
// the attempt got there first.
// A write that took effect but answered an error, retried, finds its own
// token (Recorder) and returns what it wrote.
func (s *Service) recordAttempt(ctx context.Context, m message, a webhook.Attempt, start, done time.Time) (store.WebhookDeliveries, error) {
	token, mine := ids.Secret(12), store.WebhookDeliveries{}
	d, err := s.Store.UpdateWebhookDeliveries(ctx, m.Batch, m.record(m.Event.Type), func(d *store.WebhookDeliveries) error {
		if d.Recorder == token {
			mine = *d
			return errRecorded
		}
		if d.Delivered || d.GaveUp || d.Count >= m.Attempt {
			return errDuplicate // a duplicate of this attempt got here first
		}
		if d.Count == 0 {
			d.FirstAttempt = start
		}
		d.EventID, d.Count, d.Recorder = m.Event.ID, m.Attempt, token
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
	if errors.Is(err, errRecorded) {
		return mine, nil
	}
	return d, err
}

// circuit reads the circuit named receiver (webhook.CircuitOf); a URL
// without a host has none (a closed zero one): its attempt is refused by
// the policy.
func (s *Service) circuit(ctx context.Context, receiver string) (webhook.Circuit, error) {
	if receiver == "" {
		return webhook.Circuit{}, nil
	}
	c, err := s.Store.GetCircuit(ctx, receiver)
	if err != nil {
		return c, fmt.Errorf("circuit of %s: %w", receiver, err)
	}
	return c, nil
}

// admit asks receiver's circuit c, as read, whether an attempt may go to its receiver
// at now, and when not, when to ask again. A closed circuit, the common
// case, costs nothing more; an open one past its cool-down admits one
// probe, written conditionally so that one of many concurrent deliveries
// gets it.
func (s *Service) admit(ctx context.Context, receiver string, c webhook.Circuit, now time.Time) (webhook.Circuit, bool, time.Time, error) {
	if c.Closed() {
		return c, true, time.Time{}, nil
	}
	var retryAt time.Time
	c, err := s.Store.UpdateCircuit(ctx, receiver, func(c *webhook.Circuit) error {
		ok, at := c.Admit(now, s.probeWindow())
		if !ok {
			retryAt = at
			return errNotAdmitted
		}
		return nil
	})
	switch {
	case errors.Is(err, errNotAdmitted):
		return c, false, retryAt, nil
	case err != nil:
		return c, false, time.Time{}, fmt.Errorf("probe circuit of %s: %w", receiver, err)
	}
	return c, true, time.Time{}, nil
}

// recordCircuit counts attempt a in its receiver's circuit, which was c
// when it was admitted: nothing is written for a delivery to a receiver
// with no failures. A failure to record is logged, not returned: the
// attempt itself is recorded on the batch either way.
func (s *Service) recordCircuit(ctx context.Context, c webhook.Circuit, a webhook.Attempt, at time.Time) {
	if c.Receiver == "" || a.Delivered() && c.Closed() && c.Failures == 0 {
		return
	}
	c, err := s.Store.UpdateCircuit(ctx, c.Receiver, func(c *webhook.Circuit) error {
		if !c.Record(a, at, s.circuitThreshold(), s.circuitCooldown()) {
			return errUnchanged
		}
		return nil
	})
	switch {
	case errors.Is(err, errUnchanged):
	case err != nil:
		s.Log.WarnContext(ctx, "record webhook attempt in its receiver's circuit", "receiver", c.Receiver, "err", err)
	case !c.Closed():
		s.Log.WarnContext(ctx, "webhook receiver's circuit open", "receiver", c.Receiver, "failures", c.Failures,
			"until", time.UnixMilli(c.OpenUntil))
	}
}

// snooze puts m back for when its receiver's circuit may admit it: no
// attempt is made or counted. A webhook whose retry horizon (from its
// first attempt, or from its event when it has none) passes while it waits
// is given up, as one whose attempts failed that long would be.
func (s *Service) snooze(ctx context.Context, m message, d store.WebhookDeliveries, retryAt, now time.Time) error {
	first := d.FirstAttempt
	if d.Count == 0 {
		first = time.Unix(m.Event.CreatedAt, 0)
	}
	if s.giveUp(first, now) {
		_, err := s.Store.UpdateWebhookDeliveries(ctx, m.Batch, m.record(m.Event.Type), func(d *store.WebhookDeliveries) error {
			if d.Delivered || d.GaveUp {
				return errDuplicate
			}
			d.EventID, d.GaveUp = m.Event.ID, true
			d.Refused = "not sent: its receiver failed the attempts before, and its circuit stayed open until the retries ended"
			return nil
		})
		switch {
		case errors.Is(err, errDuplicate):
		case err != nil:
			return fmt.Errorf("give up webhook of %s: %w", m.Batch, err)
		default:
			s.Log.WarnContext(ctx, "webhook given up: its receiver's circuit stayed open", "batch_id", m.Batch, "tenant", m.Tenant,
				"attempts", d.Count, "event_id", m.Event.ID)
		}
		s.release(ctx, m)
		return nil
	}
	at := retryAt
	if h := s.horizon(first); h.Before(at) {
		at = h
	}
	next := m
	next.NotBefore = at.UnixMilli()
	if err := s.Queue.Send(ctx, resources.Webhook, next, queue.Delay(at.Sub(now))); err != nil {
		return fmt.Errorf("snooze webhook attempt %d of %s: %w", m.Attempt, m.Batch, err)
	}
	return nil
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
