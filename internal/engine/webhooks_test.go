package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
)

func TestSQSDelay(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		wait, want time.Duration
	}{
		{0, 0},
		{time.Millisecond, time.Second}, // never back before it is due
		{time.Second, time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
		{10 * time.Minute, 10 * time.Minute},
		{time.Hour, 15 * time.Minute}, // SQS's longest delay; the rest is chained
	} {
		if got := sqsDelay(tt.wait); got != tt.want {
			t.Errorf("sqsDelay(%s) = %s, want %s", tt.wait, got, tt.want)
		}
	}
}

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

func TestRunKey(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 7, 6, 0, 0, 0, time.FixedZone("CET", 3600))
	if runKey("batch_t", at) != runKey("batch_t", at.UTC()) {
		t.Error("one instant in two zones gave two run keys")
	}
	if runKey("batch_t", at) == runKey("batch_t", at.Add(time.Minute)) || runKey("batch_t", at) == runKey("batch_u", at) {
		t.Error("different firings share a run key")
	}
	// No HTTP header value holds a NUL: a client's Idempotency-Key cannot
	// take a run's.
	if !strings.Contains(runKey("batch_t", at), "\x00") {
		t.Error("run key could collide with an Idempotency-Key header")
	}
}

func TestWebhooksDefaults(t *testing.T) {
	t.Parallel()
	var w Webhooks
	first := time.Now()
	if w.giveUp(first, first.Add(23*time.Hour)) || !w.giveUp(first, first.Add(24*time.Hour)) {
		t.Error("default retry horizon is not 24 h")
	}
	if d := w.backoff(1); d < 2500*time.Millisecond || d > 5*time.Second {
		t.Errorf("default first backoff %s, want webhook.Backoff's 2.5–5 s", d)
	}
	if w.client().Policy != (webhook.Policy{}) {
		t.Error("default client does not use the deployment policy")
	}
	w = Webhooks{RetryFor: time.Second, Backoff: func(int) time.Duration { return 0 }}
	if !w.giveUp(first, first.Add(time.Second)) || w.backoff(7) != 0 {
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
