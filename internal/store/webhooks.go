package store

import (
	"context"
	"errors"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/webhook"
)

// MaxWebhookAttempts is how many attempts a delivery record keeps: the
// latest ones, which are what a summary describes. About 40 fit in the
// 24-hour retry horizon, so in practice none are dropped.
const MaxWebhookAttempts = 50

const webhookSK = "WEBHOOK"

// webhookSKOf is the sort key of the delivery record event (webhook.Record)
// of a batch: WEBHOOK for its terminal state's (one per batch), WEBHOOK#<type>
// for a lifecycle event before it (webhook.Terminal); an operator
// endpoint's records have @<endpoint> after WEBHOOK.
func webhookSKOf(event string) string {
	endpoint, typ := webhook.SplitRecord(event)
	sk := webhookSK
	if endpoint != "" {
		sk += "@" + endpoint
	}
	if webhook.Terminal(typ) {
		return sk
	}
	return sk + "#" + typ
}

// WebhookDeliveries is the delivery record of one of a batch's webhook
// events (item B#<batch> / WEBHOOK for the completion webhook, webhookSKOf),
// kept apart from the batch so that retries never contend with the batch's
// own updates.
type WebhookDeliveries struct {
	Batch   string `dynamodbav:"batch"`
	EventID string `dynamodbav:"event_id"`
	// Attempts are the latest attempts, oldest first.
	Attempts []webhook.Attempt `dynamodbav:"attempts"`
	// Count is every attempt made, those dropped from Attempts included.
	Count        int       `dynamodbav:"count"`
	FirstAttempt time.Time `dynamodbav:"first_attempt"`
	Delivered    bool      `dynamodbav:"delivered"`
	GaveUp       bool      `dynamodbav:"gave_up"`
	// Refused says why the webhook was given up without an attempt (its
	// tenant had the most pending webhooks), or waiting (its receiver's
	// circuit stayed open): the summary's last_error when no attempt has one.
	Refused string `dynamodbav:"refused,omitempty"`
	// Recorder is a token of the write that recorded the latest attempt:
	// that write, retried after it took effect but answered an error, knows
	// the attempt for its own, not a duplicate's.
	Recorder string `dynamodbav:"recorder,omitempty"`
}

// Summary is the webhook_deliveries field of the batch.
func (d WebhookDeliveries) Summary() batch.WebhookSummary {
	s := webhook.Summarize(d.Attempts, d.GaveUp)
	s.Attempts = max(d.Count, len(d.Attempts))
	if d.Refused != "" && s.LastError == nil {
		s.LastError = &d.Refused
	}
	return s
}

// GetWebhookDeliveries reads the delivery record of a batch's event of
// type event ("batch.completed"…); an event not attempted yet has an
// empty one.
func (s *Store) GetWebhookDeliveries(ctx context.Context, batchID, event string) (WebhookDeliveries, error) {
	var d WebhookDeliveries
	_, err := s.get(ctx, chunksPK(batchID), webhookSKOf(event), &d)
	if errors.Is(err, errMissing) {
		return WebhookDeliveries{Batch: batchID}, nil
	}
	return d, err
}

// UpdateWebhookDeliveries changes the delivery record of a batch's event
// of type event through fn, creating it first if needed, conditional on no
// concurrent write (two deliveries of one attempt record it once).
func (s *Store) UpdateWebhookDeliveries(ctx context.Context, batchID, event string, fn func(*WebhookDeliveries) error) (WebhookDeliveries, error) {
	sk := webhookSKOf(event)
	d, err := update(ctx, s, chunksPK(batchID), sk, nil, fn)
	if !errors.Is(err, errMissing) {
		return d, err
	}
	if err := s.put(ctx, chunksPK(batchID), sk, WebhookDeliveries{Batch: batchID}, nil, true); err != nil && !errors.Is(err, errConflict) {
		return d, err
	}
	return update(ctx, s, chunksPK(batchID), sk, nil, fn)
}

// A tenant's circuit of a receiver (webhook.Circuit) is one item,
// HOOK#<tenant>#<receiver> / CIRCUIT (webhook.CircuitOf), shared by every
// delivery of the tenant's to it, whatever its batch, and updated
// conditionally on its version (update): concurrent attempts on any number
// of functions count each failure once and admit one probe.
// It expires circuitTTL after its last change.
const (
	circuitSK  = "CIRCUIT"
	circuitTTL = 48 * time.Hour
)

func circuitPK(receiver string) string { return "HOOK#" + receiver }

// GetCircuit reads receiver's circuit; one never written is closed.
func (s *Store) GetCircuit(ctx context.Context, receiver string) (webhook.Circuit, error) {
	var c webhook.Circuit
	_, err := s.get(ctx, circuitPK(receiver), circuitSK, &c)
	if errors.Is(err, errMissing) {
		return webhook.Circuit{Receiver: receiver}, nil
	}
	return c, err
}

// UpdateCircuit changes receiver's circuit through fn, creating it first
// if needed, conditional on no concurrent write; an error from fn writes
// nothing and is returned.
func (s *Store) UpdateCircuit(ctx context.Context, receiver string, fn func(*webhook.Circuit) error) (webhook.Circuit, error) {
	ttl := func(*webhook.Circuit) item { return item{"ttl": avN64(time.Now().Add(circuitTTL).Unix())} }
	c, err := update(ctx, s, circuitPK(receiver), circuitSK, ttl, fn)
	if !errors.Is(err, errMissing) {
		return c, err
	}
	if err := s.put(ctx, circuitPK(receiver), circuitSK, webhook.Circuit{Receiver: receiver}, nil, true); err != nil && !errors.Is(err, errConflict) {
		return c, err
	}
	return update(ctx, s, circuitPK(receiver), circuitSK, ttl, fn)
}
