package store

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/webhook"
)

// A receiver's circuit counts concurrent failures exactly, opens once at
// the threshold, and after the cool-down admits one probe among racing
// deliveries: the conditions of UpdateCircuit on the emulator.
func TestCircuitConditions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := emulatorStore(t)
	const receiver, threshold, n = "hooks.example.com:443", 4, 8
	now := time.Now()
	if c, err := s.GetCircuit(ctx, receiver); err != nil || !c.Closed() || c.Failures != 0 || c.Receiver != receiver {
		t.Fatalf("a circuit never written: %+v, %v; want closed", c, err)
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := s.UpdateCircuit(ctx, receiver, func(c *webhook.Circuit) error {
				c.Record(webhook.Attempt{Error: "no answer"}, now, threshold, time.Minute)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	c, err := s.GetCircuit(ctx, receiver)
	if err != nil || c.Failures != n || c.Closed() {
		t.Fatalf("after %d racing failures: %+v, %v; want %d failures, open", n, c, err, n)
	}
	if other, err := s.GetCircuit(ctx, "other.example.com"); err != nil || !other.Closed() {
		t.Fatalf("another receiver: %+v, %v", other, err)
	}

	after := time.UnixMilli(c.OpenUntil)
	var probes atomic.Int32
	for range n {
		wg.Go(func() {
			_, err := s.UpdateCircuit(ctx, receiver, func(c *webhook.Circuit) error {
				if ok, _ := c.Admit(after, 10*time.Second); !ok {
					return errConflict // not admitted: nothing to write
				}
				return nil
			})
			switch {
			case err == nil:
				probes.Add(1) // an admission written
			case err != errConflict:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := probes.Load(); got != 1 {
		t.Fatalf("%d probes admitted after the cool-down, want one", got)
	}
}

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
