package delivery

import (
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
)

func TestEventID(t *testing.T) {
	t.Parallel()
	a := eventID("batch_1", batch.Completed)
	if a != eventID("batch_1", batch.Completed) {
		t.Error("one batch's terminal state gave two event ids")
	}
	if a == eventID("batch_2", batch.Completed) || a == eventID("batch_1", batch.Cancelled) {
		t.Error("different batches or states share an event id")
	}
	if !ids.Valid("evt_", a) || len(a) != len(ids.New("evt_")) {
		t.Errorf("event id %q does not look like the service's ids", a)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	var s Service
	first := time.Now()
	if s.giveUp(first, first.Add(23*time.Hour)) || !s.giveUp(first, first.Add(24*time.Hour)) {
		t.Error("default retry horizon is not 24 h")
	}
	if d := s.backoff(1); d < 2500*time.Millisecond || d > 5*time.Second {
		t.Errorf("default first backoff %s, want webhook.Backoff's 2.5–5 s", d)
	}
	if s.client().Policy != (webhook.Policy{}) {
		t.Error("default client does not use the deployment policy")
	}
	s = Service{RetryFor: time.Second, Backoff: func(int) time.Duration { return 0 }}
	if !s.giveUp(first, first.Add(time.Second)) || s.backoff(7) != 0 {
		t.Error("injected retry schedule not used")
	}
}

func TestDeliveriesSummaryCountsDroppedAttempts(t *testing.T) {
	t.Parallel()
	d := store.WebhookDeliveries{Count: 60}
	for n := 11; n <= 60; n++ {
		d.Attempts = append(d.Attempts, webhook.Attempt{N: n, At: int64(n), StatusCode: 500, Error: "receiver answered 500"})
	}
	d.GaveUp = true
	s := d.Summary()
	if s.Status != webhook.StatusFailed || s.Attempts != 60 || s.LastStatusCode == nil || *s.LastStatusCode != 500 {
		t.Errorf("summary = %+v, want failed after 60 attempts", s)
	}
	if s := (store.WebhookDeliveries{}).Summary(); s.Status != webhook.StatusPending || s.Attempts != 0 {
		t.Errorf("summary before any attempt = %+v, want pending", s)
	}
}
