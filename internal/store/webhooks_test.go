package store

import (
	"context"
	"testing"
)

// Each event of a batch has its own delivery record: recording an attempt
// of batch.queued leaves the completion webhook's record (the batch's
// webhook_deliveries) untouched, and the other way round.
func TestWebhookDeliveriesPerEvent(t *testing.T) {
	t.Parallel()
	s := emulatorStore(t)
	ctx := context.Background()
	attempt := func(event, id string) {
		t.Helper()
		if _, err := s.UpdateWebhookDeliveries(ctx, "batch_1", event, func(d *WebhookDeliveries) error {
			d.EventID, d.Count, d.Delivered = id, d.Count+1, true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	attempt("batch.queued", "evt_q")
	done, err := s.GetWebhookDeliveries(ctx, "batch_1", "batch.completed")
	if err != nil || done.Count != 0 || done.Delivered {
		t.Fatalf("completion record after a queued attempt: %+v, %v; want empty", done, err)
	}
	attempt("batch.completed", "evt_c")
	attempt("batch.completed", "evt_c")
	for event, want := range map[string]WebhookDeliveries{
		"batch.queued":      {Batch: "batch_1", EventID: "evt_q", Count: 1, Delivered: true},
		"batch.completed":   {Batch: "batch_1", EventID: "evt_c", Count: 2, Delivered: true},
		"batch.in_progress": {Batch: "batch_1"},
	} {
		got, err := s.GetWebhookDeliveries(ctx, "batch_1", event)
		if err != nil || got.EventID != want.EventID || got.Count != want.Count || got.Delivered != want.Delivered || got.Batch != want.Batch {
			t.Errorf("%s: got %+v, %v; want %+v", event, got, err, want)
		}
	}
}
