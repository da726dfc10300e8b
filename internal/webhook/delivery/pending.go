package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
)

// Pending webhooks per tenant (Service.MaxPending,
// RELAY_MAX_PENDING_WEBHOOKS; docs/api.md "Limits"). A batch's webhooks
// hold one of its tenant's slots (store.ReserveWebhook) from its first
// event's enqueue until its completion webhook is delivered or given up; a
// webhook past the cap is given up at once, visibly: its webhook_deliveries say failed, and why. A slot whose
// webhook settled without giving it back (a crash between the two), or
// whose messages were lost, is recovered by the next enqueue at the cap.

// lostAfter is how long after taking its slot a webhook that has not
// settled is counted as lost: past its retry horizon and the hour a
// message may wait between attempts.
const lostAfter = 26 * time.Hour

// completion names a batch's completion webhook's delivery record: any
// terminal event type does (store.WebhookDeliveries).
const completion = "batch.completed"

// hold takes b's pending slot for its event ev (held once however many of
// its events ask); ok is false when the tenant is at the cap (ev is then
// given up, recorded as refused).
func (s *Service) hold(ctx context.Context, b batch.Batch, ev webhook.Event) (bool, error) {
	if s.MaxPending <= 0 {
		return true, nil
	}
	err := s.Store.ReserveWebhook(ctx, b.Tenant, b.ID, s.MaxPending, s.Now())
	if errors.Is(err, store.ErrWebhookLimit) {
		if freed, rerr := s.repairPending(ctx, b.Tenant); rerr == nil && freed > 0 {
			err = s.Store.ReserveWebhook(ctx, b.Tenant, b.ID, s.MaxPending, s.Now())
		}
	}
	if !errors.Is(err, store.ErrWebhookLimit) {
		return err == nil, err
	}
	why := fmt.Sprintf("not sent: this organization already has %d webhooks pending, the most allowed", s.MaxPending)
	_, err = s.Store.UpdateWebhookDeliveries(ctx, b.ID, ev.Type, func(d *store.WebhookDeliveries) error {
		if d.Delivered || d.GaveUp {
			return errDuplicate
		}
		d.EventID, d.GaveUp, d.Refused = ev.ID, true, why
		return nil
	})
	if err != nil && !errors.Is(err, errDuplicate) {
		return false, fmt.Errorf("refuse webhook of %s: %w", b.ID, err)
	}
	s.Log.WarnContext(ctx, "webhook refused: too many pending", "batch_id", b.ID, "tenant", b.Tenant, "event", ev.Type, "max", s.MaxPending)
	return false, nil
}

// release gives back the slot of a settled webhook (once, however often):
// the completion webhook's to the batch's webhook_url, which alone holds
// one (an operator endpoint's are the operator's, bounded by the batches).
func (s *Service) release(ctx context.Context, m message) {
	if s.MaxPending <= 0 || m.Endpoint != "" || !webhook.Terminal(m.Event.Type) {
		return
	}
	if _, err := s.Store.ReleaseWebhook(ctx, m.Tenant, m.Batch); err != nil {
		s.Log.WarnContext(ctx, "give back a pending webhook slot", "batch_id", m.Batch, "tenant", m.Tenant, "err", err)
	}
}

// repairPending releases the slots of tenant's webhooks that settled or
// were lost, and returns how many it freed.
func (s *Service) repairPending(ctx context.Context, tenant string) (int, error) {
	ms, err := s.Store.WebhookMarkers(ctx, tenant)
	if err != nil {
		return 0, err
	}
	freed := 0
	for _, m := range ms {
		d, err := s.Store.GetWebhookDeliveries(ctx, m.Batch, completion)
		if err != nil {
			return freed, err
		}
		lost := s.Now().Sub(time.Unix(m.CreatedAt, 0)) > lostAfter
		if !d.Delivered && !d.GaveUp && !lost {
			continue
		}
		ok, err := s.Store.ReleaseWebhook(ctx, tenant, m.Batch)
		if err != nil {
			return freed, err
		}
		if ok {
			freed++
		}
	}
	return freed, nil
}
