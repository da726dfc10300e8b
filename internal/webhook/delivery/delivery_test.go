package delivery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
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
	if s.client().Policy != (egress.Policy{}) {
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

// memTable is the delivery records, circuits and secrets of an in-memory
// table.
type memTable struct {
	mu       sync.Mutex
	records  map[string]store.WebhookDeliveries
	circuits map[string]webhook.Circuit
	pending  map[string]int64 // batch: when its webhook took a slot
}

func (m *memTable) ReserveWebhook(_ context.Context, _, batchID string, max int, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pending[batchID]; ok {
		return nil
	}
	if len(m.pending) >= max {
		return store.ErrWebhookLimit
	}
	if m.pending == nil {
		m.pending = map[string]int64{}
	}
	m.pending[batchID] = now.Unix()
	return nil
}

func (m *memTable) ReleaseWebhook(_ context.Context, _, batchID string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.pending[batchID]
	delete(m.pending, batchID)
	return ok, nil
}

func (m *memTable) WebhookMarkers(context.Context, string) ([]store.InflightMarker, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ms []store.InflightMarker
	for id, at := range m.pending {
		ms = append(ms, store.InflightMarker{Batch: id, CreatedAt: at})
	}
	return ms, nil
}

func (m *memTable) GetCircuit(_ context.Context, receiver string) (webhook.Circuit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.circuits[receiver]
	if !ok {
		c.Receiver = receiver
	}
	return c, nil
}

func (m *memTable) UpdateCircuit(ctx context.Context, receiver string, fn func(*webhook.Circuit) error) (webhook.Circuit, error) {
	c, _ := m.GetCircuit(ctx, receiver)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := fn(&c); err != nil {
		return c, err
	}
	if m.circuits == nil {
		m.circuits = map[string]webhook.Circuit{}
	}
	m.circuits[receiver] = c
	return c, nil
}

// recordKey keys the records as the store does: the terminal event's by
// the batch id alone, an operator endpoint's (webhook.Record) with
// @<endpoint> after it.
func recordKey(batchID, event string) string {
	endpoint, typ := webhook.SplitRecord(event)
	if endpoint != "" {
		batchID += "@" + endpoint
	}
	if webhook.Terminal(typ) {
		return batchID
	}
	return batchID + "/" + typ
}

func (m *memTable) GetWebhookDeliveries(_ context.Context, batchID, event string) (store.WebhookDeliveries, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.records[recordKey(batchID, event)], nil
}

func (m *memTable) UpdateWebhookDeliveries(_ context.Context, batchID, event string, fn func(*store.WebhookDeliveries) error) (store.WebhookDeliveries, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	batchID = recordKey(batchID, event)
	d := m.records[batchID]
	if err := fn(&d); err != nil {
		return store.WebhookDeliveries{}, err
	}
	if m.records == nil {
		m.records = map[string]store.WebhookDeliveries{}
	}
	m.records[batchID] = d
	return d, nil
}

func (m *memTable) WebhookSecret(context.Context, string, func() string) (string, error) {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")), nil
}

// memQueue keeps what was sent.
type memQueue struct {
	mu   sync.Mutex
	sent []message
}

func (q *memQueue) Send(_ context.Context, name string, v any, _ time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if name != resources.Webhook {
		return errors.New("sent to " + name)
	}
	q.sent = append(q.sent, v.(message))
	return nil
}

// A batch with a webhook_url queues its first attempt; an attempt the
// receiver refuses is recorded and the next one queued; the same message
// again (a duplicate delivery) makes no second attempt.
func TestAttemptRecordedAndNextQueued(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Client: webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}), Backoff: func(int) time.Duration { return time.Minute }}
	url := srv.URL
	ctx := context.Background()
	if err := s.Enqueue(ctx, batch.Batch{ID: "batch_1", Tenant: "t", Status: batch.Completed}); err != nil || len(q.sent) != 0 {
		t.Fatalf("batch without webhook_url: %v, sent %+v", err, q.sent)
	}
	if err := s.Enqueue(ctx, batch.Batch{ID: "batch_1", Tenant: "t", Status: batch.Completed, WebhookURL: &url}); err != nil || len(q.sent) != 1 {
		t.Fatalf("enqueue: %v, sent %+v", err, q.sent)
	}
	first := q.sent[0]
	body, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if failed, err := s.Deliver(ctx, []msg.Delivery{{ID: "m1", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
			t.Fatalf("deliver: %v, failed %v", err, failed)
		}
	}
	d := table.records["batch_1"]
	if posts.Load() != 1 || d.Count != 1 || d.Delivered || d.GaveUp || len(d.Attempts) != 1 || d.Attempts[0].StatusCode != 500 {
		t.Fatalf("%d posts, record %+v; want one failed attempt", posts.Load(), d)
	}
	if len(q.sent) != 2 || q.sent[1].Attempt != 2 || q.sent[1].Event.ID != first.Event.ID || q.sent[1].NotBefore == 0 {
		t.Fatalf("sent %+v; want attempt 2 of the same event, not before its backoff", q.sent)
	}
}

// A batch's lifecycle events have records of their own, and an event's
// first attempt waits until those queued before it have one made: the
// completion of a started batch whose batch.queued was not attempted yet
// goes back to the queue without a post; once queued was attempted (even
// failed), it is sent.
func TestEventWaitsForTheEarlierOnes(t *testing.T) {
	t.Parallel()
	var types []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev webhook.Event
		json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		types = append(types, ev.Type)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Client: webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true})}
	url := srv.URL
	ctx := context.Background()
	b := batch.Batch{ID: "batch_1", Tenant: "t", Status: batch.InProgress, WebhookURL: &url, Started: true}
	if err := s.Announce(ctx, b, webhook.Queued); err != nil {
		t.Fatal(err)
	}
	b.Status = batch.Completed
	if err := s.Enqueue(ctx, b); err != nil {
		t.Fatal(err)
	}
	queued, completed := q.sent[0], q.sent[1]
	if queued.Event.Type != "batch.queued" || completed.Event.Type != "batch.completed" || len(completed.After) != 1 || completed.After[0] != "batch.queued" ||
		queued.Event.ID == completed.Event.ID {
		t.Fatalf("sent %+v, want batch.queued, then batch.completed after it", q.sent)
	}
	deliver := func(m message) {
		t.Helper()
		body, _ := json.Marshal(m)
		if failed, err := s.Deliver(ctx, []msg.Delivery{{ID: "m", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
			t.Fatalf("deliver: %v, failed %v", err, failed)
		}
	}
	deliver(completed)
	if len(types) != 0 || len(q.sent) != 3 || q.sent[2].Event.ID != completed.Event.ID || q.sent[2].WaitFrom == 0 {
		t.Fatalf("posted %v, sent %+v; want the completion back on the queue, not posted", types, q.sent)
	}
	deliver(queued)
	deliver(q.sent[2])
	if len(types) != 2 || types[0] != "batch.queued" || types[1] != "batch.completed" {
		t.Fatalf("posted %v, want batch.queued then batch.completed", types)
	}
	if d := table.records["batch_1"]; !d.Delivered || d.EventID != completed.Event.ID {
		t.Fatalf("completion record %+v, want it delivered (the batch's summary reads it)", d)
	}
	// Past OrderWait, an event goes without the earlier ones.
	late := completed
	late.Event.ID, late.Batch, late.WaitFrom = "evt_late", "batch_2", time.Now().Add(-OrderWait).UnixMilli()
	deliver(late)
	if len(types) != 3 {
		t.Fatalf("posted %v, want the late event sent", types)
	}
}

// refusingReceiver is a webhook receiver that answers every post 500, and
// counts them.
func refusingReceiver(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	posts := &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, posts
}

// TestDeliveryKeepsItsClock: every time delivery decides by is its
// clock's (Service.Now, the service's one): an event's created_at, when
// the next attempt is due, the first attempt and the 24-hour horizon. Here
// the clock is years ahead of the machine's; a test moves it a day on.
// Before, delivery read the machine's clock: the due attempt was put back
// for years and the retries never gave up.
func TestDeliveryKeepsItsClock(t *testing.T) {
	t.Parallel()
	url, posts := refusingReceiver(t)
	at := time.Unix(1_900_000_000, 0)
	var skip atomic.Int64
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler),
		Now:    func() time.Time { return at.Add(time.Duration(skip.Load())) },
		Client: webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}), Backoff: func(int) time.Duration { return time.Minute }}
	ctx := context.Background()
	if err := s.Enqueue(ctx, batch.Batch{ID: "batch_1", Tenant: "t", Status: batch.Failed, WebhookURL: &url}); err != nil || len(q.sent) != 1 {
		t.Fatalf("enqueue: %v, sent %+v", err, q.sent)
	}
	if got := q.sent[0].Event.CreatedAt; got != at.Unix() {
		t.Errorf("event created at %d, want the clock's %d", got, at.Unix())
	}
	deliver := func(m message) {
		t.Helper()
		body, _ := json.Marshal(m)
		if failed, err := s.Deliver(ctx, []msg.Delivery{{ID: "m", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
			t.Fatalf("deliver attempt %d: %v, failed %v", m.Attempt, err, failed)
		}
	}
	deliver(q.sent[0])
	if next := q.sent[1]; next.NotBefore != at.Add(time.Minute).UnixMilli() {
		t.Fatalf("attempt 2 due at %d, want the clock's now plus the backoff, %d", next.NotBefore, at.Add(time.Minute).UnixMilli())
	}
	skip.Store(int64(25 * time.Hour))
	deliver(q.sent[1])
	d := table.records["batch_1"]
	if posts.Load() != 2 || d.Count != 2 || !d.GaveUp || !d.FirstAttempt.Equal(at) {
		t.Fatalf("%d posts, record %+v; want attempt 2 made at once and the retries given up a day after the first, at %s", posts.Load(), d, at)
	}
}

// message body of a batch's first attempt to url.
func firstAttempt(t *testing.T, s *Service, q *memQueue, id, url string) msg.Delivery {
	t.Helper()
	if err := s.Enqueue(context.Background(), batch.Batch{ID: id, Tenant: "t", Status: batch.Completed, WebhookURL: &url}); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(q.last())
	if err != nil {
		t.Fatal(err)
	}
	return msg.Delivery{ID: id, Body: string(body), ReceiveCount: 1}
}

func (q *memQueue) last() message {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sent[len(q.sent)-1]
}

// A receiver that keeps failing is no longer called once its circuit
// opens: the webhooks of further batches to it wait (uncounted, queued for
// the cool-down's end) instead of holding the function, while another
// receiver's are delivered; after the cool-down one probe goes, and one
// that waits past the retry horizon is given up without an attempt.
func TestCircuitStopsCallingAFailingReceiver(t *testing.T) {
	t.Parallel()
	var dead, alive atomic.Int32
	deadSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		dead.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer deadSrv.Close()
	aliveSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { alive.Add(1) }))
	defer aliveSrv.Close()
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Client:  webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}),
		Backoff: func(int) time.Duration { return time.Minute }, CircuitThreshold: 2, CircuitCooldown: time.Hour}
	ctx := context.Background()
	deliver := func(d msg.Delivery) {
		t.Helper()
		if failed, err := s.Deliver(ctx, []msg.Delivery{d}); err != nil || len(failed) != 0 {
			t.Fatalf("deliver %s: %v, failed %v", d.ID, err, failed)
		}
	}
	for i := range 6 {
		deliver(firstAttempt(t, s, q, fmt.Sprintf("batch_dead%d", i), deadSrv.URL))
	}
	if got := dead.Load(); got != 2 {
		t.Fatalf("the failing receiver got %d attempts of 6 batches, want the threshold's 2", got)
	}
	snoozed := q.last()
	if snoozed.Attempt != 1 || time.Until(time.UnixMilli(snoozed.NotBefore)) < 50*time.Minute {
		t.Fatalf("a waiting webhook was queued as %+v, want attempt 1 again at the cool-down's end", snoozed)
	}
	if d := table.records["batch_dead5"]; d.Count != 0 || d.GaveUp {
		t.Fatalf("a waiting webhook's record %+v, want no attempt counted", d)
	}
	deliver(firstAttempt(t, s, q, "batch_alive", aliveSrv.URL))
	if alive.Load() != 1 || !table.records["batch_alive"].Delivered {
		t.Fatalf("another receiver got %d attempts, record %+v", alive.Load(), table.records["batch_alive"])
	}

	// The cool-down over, the waiting webhooks are due: one probe goes.
	table.mu.Lock()
	c := table.circuits[webhook.CircuitOf("t", deadSrv.URL)]
	c.OpenUntil = time.Now().Add(-time.Second).UnixMilli()
	table.circuits[c.Receiver] = c
	table.mu.Unlock()
	for i := 2; i < 6; i++ {
		m := firstAttempt(t, s, q, fmt.Sprintf("batch_dead%d", i), deadSrv.URL)
		deliver(m)
	}
	if got := dead.Load(); got != 3 {
		t.Fatalf("after the cool-down the receiver got %d attempts in all, want one probe more", got)
	}

	// Waiting past the horizon gives the webhook up, unattempted.
	s.RetryFor = time.Nanosecond
	deliver(firstAttempt(t, s, q, "batch_late", deadSrv.URL))
	if d := table.records["batch_late"]; !d.GaveUp || d.Count != 0 || dead.Load() != 3 {
		t.Fatalf("a webhook that waited past its horizon: %+v, %d attempts", d, dead.Load())
	}
	// Its webhook_deliveries say why, not a bare "failed".
	if sum := table.records["batch_late"].Summary(); sum.LastError == nil || !strings.Contains(*sum.LastError, "circuit") {
		t.Fatalf("a webhook given up waiting for its circuit: summary %+v, want last_error naming the circuit", sum)
	}
}

// A tenant's pending webhooks are capped: past the cap a batch's webhook is
// given up at once, visibly (webhook_deliveries failed, its last_error
// saying why), and queues nothing; a delivered webhook frees its slot, a
// webhook reported twice holds one, and a slot left behind by a webhook
// that was settled is recovered at the cap.
func TestPendingWebhooksCapped(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Client: webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}), MaxPending: 2}
	ctx := context.Background()
	url := srv.URL
	enqueue := func(id string) {
		t.Helper()
		if err := s.Enqueue(ctx, batch.Batch{ID: id, Tenant: "t", Status: batch.Completed, WebhookURL: &url}); err != nil {
			t.Fatalf("enqueue %s: %v", id, err)
		}
	}
	first := firstAttempt(t, s, q, "batch_1", url)
	enqueue("batch_1") // its terminal state reported again
	enqueue("batch_2")
	sent := len(q.sent)
	enqueue("batch_3")
	refused := table.records["batch_3"]
	sum := refused.Summary()
	if len(q.sent) != sent || !refused.GaveUp || sum.Status != webhook.StatusFailed || sum.LastError == nil ||
		!strings.Contains(*sum.LastError, "2 webhooks pending") {
		t.Fatalf("a webhook past the cap: queued %d more, record %+v, summary %+v", len(q.sent)-sent, refused, sum)
	}
	if failed, err := s.Deliver(ctx, []msg.Delivery{first}); err != nil || len(failed) != 0 || !table.records["batch_1"].Delivered {
		t.Fatalf("deliver: %v, %v, %+v", failed, err, table.records["batch_1"])
	}
	enqueue("batch_4")
	if d, ok := table.records["batch_4"]; ok || len(q.sent) != sent+1 {
		t.Fatalf("after a delivery freed a slot: record %+v, queued %d", d, len(q.sent)-sent)
	}
	// batch_2's webhook settled without giving its slot back (a crash).
	table.mu.Lock()
	table.records["batch_2"] = store.WebhookDeliveries{Batch: "batch_2", Delivered: true, Count: 1}
	table.mu.Unlock()
	enqueue("batch_5")
	if _, refused := table.records["batch_5"]; refused || len(q.sent) != sent+2 {
		t.Fatal("a slot left behind by a settled webhook was not recovered at the cap")
	}
}

// ambiguousTable answers an update of a delivery record as the store does
// when its write took effect but answered an error and was retried (the
// SDK's retry fails its condition, store.update reads the record again and
// runs fn on it): fn runs a second time, on what the first run wrote.
type ambiguousTable struct{ *memTable }

func (m ambiguousTable) UpdateWebhookDeliveries(ctx context.Context, batchID, event string, fn func(*store.WebhookDeliveries) error) (store.WebhookDeliveries, error) {
	if _, err := m.memTable.UpdateWebhookDeliveries(ctx, batchID, event, fn); err != nil {
		return store.WebhookDeliveries{}, err
	}
	return m.memTable.UpdateWebhookDeliveries(ctx, batchID, event, fn)
}

// An attempt whose record took effect but answered an error, then was
// retried, is followed up as if the write had answered: before, the retry
// read the attempt back as a duplicate's, so a failed attempt queued no
// next one (the webhook stayed pending for ever) and a delivered one kept
// its tenant's pending slot.
func TestAmbiguousAttemptRecordFollowedUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
	}{{"failed", http.StatusInternalServerError}, {"delivered", http.StatusNoContent}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.status) }))
			defer srv.Close()
			table, q := &memTable{}, &memQueue{}
			s := &Service{Store: ambiguousTable{table}, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now, MaxPending: 10,
				Client: webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}), Backoff: func(int) time.Duration { return time.Minute }}
			m := firstAttempt(t, s, q, "batch_1", srv.URL)
			if failed, err := s.Deliver(context.Background(), []msg.Delivery{m}); err != nil || len(failed) != 0 {
				t.Fatalf("deliver: %v, failed %v", err, failed)
			}
			d := table.records["batch_1"]
			if d.Count != 1 {
				t.Fatalf("record %+v, want one attempt", d)
			}
			if d.Delivered {
				if len(table.pending) != 0 {
					t.Fatalf("delivered, its pending slot still held: %v", table.pending)
				}
				return
			}
			if len(q.sent) != 2 || q.sent[1].Attempt != 2 {
				t.Fatalf("sent %d messages (last attempt %d), want attempt 2 queued after the failed one", len(q.sent), q.last().Attempt)
			}
		})
	}
}

// One tenant's failing webhooks do not open the circuit of another's: a
// hostile tenant pointing its webhooks at a path of another tenant's
// receiver that fails (here 404) opens its own circuit only, and the other
// tenant's webhooks to that host are still delivered at once. Before, the
// circuit was the host's, whatever the tenant: the other tenant's webhooks
// waited out the cool-down, and a tenant failing every probe could hold
// them until they were given up.
func TestCircuitIsTheTenants(t *testing.T) {
	t.Parallel()
	var good atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/good" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		good.Add(1)
	}))
	defer srv.Close()
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Client:  webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}),
		Backoff: func(int) time.Duration { return time.Minute }, CircuitThreshold: 2, CircuitCooldown: time.Hour}
	ctx := context.Background()
	deliver := func(tenant, id, url string) {
		t.Helper()
		if err := s.Enqueue(ctx, batch.Batch{ID: id, Tenant: tenant, Status: batch.Completed, WebhookURL: &url}); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(q.last())
		if failed, err := s.Deliver(ctx, []msg.Delivery{{ID: id, Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
			t.Fatalf("deliver %s: %v, failed %v", id, err, failed)
		}
	}
	for i := range 3 {
		deliver("evil", fmt.Sprintf("batch_evil%d", i), srv.URL+"/bogus")
	}
	if d := table.records["batch_evil2"]; d.Count != 0 {
		t.Fatalf("the failing tenant's third webhook was attempted (%+v), want its circuit open", d)
	}
	deliver("victim", "batch_victim", srv.URL+"/good")
	if d := table.records["batch_victim"]; good.Load() != 1 || !d.Delivered {
		t.Fatalf("the other tenant's webhook to the same host: %d posts, record %+v; want it delivered at once", good.Load(), d)
	}
}

// An event that waited OrderWait for an earlier one that has no attempt
// yet queues that one again as it goes: the engine records in_progress
// announced before it queues it (engine.announceInProgress), and an
// invocation that died between the two lost the event for good (the
// completion went without it). An earlier event attempted meanwhile is not
// sent again.
func TestLateEventResendsAnUnattemptedEarlierOne(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Client: webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true})}
	ctx := context.Background()
	url := srv.URL
	deliver := func(m message) {
		t.Helper()
		body, _ := json.Marshal(m)
		if failed, err := s.Deliver(ctx, []msg.Delivery{{ID: "m", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
			t.Fatalf("deliver: %v, failed %v", err, failed)
		}
	}
	for _, id := range []string{"batch_lost", "batch_sent"} {
		b := batch.Batch{ID: id, Tenant: "t", Status: batch.Completed, WebhookURL: &url, AnnouncedInProgress: true}
		if err := s.Enqueue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	lost, sent := q.sent[0], q.sent[1]
	table.mu.Lock()
	table.records = map[string]store.WebhookDeliveries{"batch_sent/batch.in_progress": {Batch: "batch_sent", Count: 1}}
	table.mu.Unlock()
	q.sent = nil
	lost.WaitFrom = time.Now().Add(-OrderWait).UnixMilli()
	deliver(lost)
	if d := table.records["batch_lost"]; !d.Delivered || len(q.sent) != 1 || q.sent[0].Event.Type != "batch.in_progress" ||
		q.sent[0].Event.ID != eventID("batch_lost", batch.InProgress) || q.sent[0].Attempt != 1 || len(q.sent[0].After) != 0 {
		t.Fatalf("completion %+v, sent %d messages; want it delivered and its lost in_progress queued again", d, len(q.sent))
	}
	// Waiting on for its receiver's circuit (past its cool-down, another
	// delivery's probe under way), an event sends the lost one again once
	// only.
	table.mu.Lock()
	table.circuits = map[string]webhook.Circuit{webhook.CircuitOf("t", url): {Failures: 5,
		OpenUntil: time.Now().Add(-time.Second).UnixMilli(), ProbeUntil: time.Now().Add(time.Hour).UnixMilli()}}
	table.mu.Unlock()
	b := batch.Batch{ID: "batch_open", Tenant: "t", Status: batch.Completed, WebhookURL: &url, AnnouncedInProgress: true}
	if err := s.Enqueue(ctx, b); err != nil {
		t.Fatal(err)
	}
	open := q.last()
	open.WaitFrom = time.Now().Add(-OrderWait).UnixMilli()
	q.sent = nil
	deliver(open)
	if len(q.sent) != 2 || q.sent[0].Event.Type != "batch.in_progress" || q.sent[1].Event.ID != open.Event.ID || len(q.sent[1].After) != 0 {
		t.Fatalf("sent %d messages; want in_progress again, and the completion snoozed waiting for nothing", len(q.sent))
	}
	snoozed := q.sent[1]
	snoozed.NotBefore = 0
	deliver(snoozed)
	if len(q.sent) != 3 || q.sent[2].Event.ID != open.Event.ID {
		t.Fatalf("sent %d messages; want the completion snoozed again, in_progress not sent again", len(q.sent))
	}
	table.mu.Lock()
	table.circuits = nil
	table.mu.Unlock()

	q.sent = nil
	sent.WaitFrom = time.Now().Add(-OrderWait).UnixMilli()
	deliver(sent)
	if d := table.records["batch_sent"]; !d.Delivered || len(q.sent) != 0 {
		t.Fatalf("completion %+v, sent %d messages; want it delivered, nothing queued", d, len(q.sent))
	}
}

// An event whose tenant's circuit of its receiver is open waits for the
// cool-down's end, not polling every orderPoll for the earlier events the
// same circuit holds: before, each such event came back every second for
// two minutes, a tenant's dead receiver costing the webhook function that
// other tenants' deliveries share.
func TestOpenCircuitWaitsBeforeTheOrder(t *testing.T) {
	t.Parallel()
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now}
	url := "https://hooks.example/x"
	until := time.Now().Add(time.Hour).UnixMilli()
	table.circuits = map[string]webhook.Circuit{webhook.CircuitOf("t", url): {Failures: 5, OpenUntil: until}}
	b := batch.Batch{ID: "batch_1", Tenant: "t", Status: batch.Completed, WebhookURL: &url, Started: true}
	if err := s.Enqueue(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(q.last())
	if failed, err := s.Deliver(context.Background(), []msg.Delivery{{ID: "m", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
		t.Fatalf("deliver: %v, failed %v", err, failed)
	}
	if m := q.last(); len(q.sent) != 2 || m.NotBefore != until {
		t.Fatalf("sent %d, the completion back due at %d; want it due at the cool-down's end, %d", len(q.sent), m.NotBefore, until)
	}
}

// Lifecycle events (batch.queued, batch.in_progress) held no pending slot:
// a tenant past the cap, churning small batches at a webhook_url that never
// answers, still queued two events a batch, each retried for a day. A
// lifecycle event takes its batch's slot (the one its completion holds
// after it); past the cap it is given up at once, visibly, and queues
// nothing.
func TestLifecycleEventsHoldThePendingCap(t *testing.T) {
	t.Parallel()
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now, MaxPending: 2}
	ctx := context.Background()
	url := "https://dead.example.com/hook"
	for _, id := range []string{"batch_1", "batch_2"} {
		if err := s.Announce(ctx, batch.Batch{ID: id, Tenant: "t", Status: batch.Validating, WebhookURL: &url}, webhook.Queued); err != nil {
			t.Fatal(err)
		}
	}
	if len(q.sent) != 2 || len(table.pending) != 2 {
		t.Fatalf("two batches' queued events: %d sent, %d slots held; want 2 and 2", len(q.sent), len(table.pending))
	}
	b3 := batch.Batch{ID: "batch_3", Tenant: "t", Status: batch.Validating, WebhookURL: &url}
	if err := s.Announce(ctx, b3, webhook.Queued); err != nil {
		t.Fatal(err)
	}
	d := table.records["batch_3/batch.queued"]
	if len(q.sent) != 2 || !d.GaveUp || !strings.Contains(d.Refused, "pending") {
		t.Fatalf("a lifecycle event past the cap: %d sent, record %+v; want none sent and it given up", len(q.sent), d)
	}
	// The batch's completion takes the slot its queued event held.
	b1 := batch.Batch{ID: "batch_1", Tenant: "t", Status: batch.Completed, Started: true, WebhookURL: &url}
	if err := s.Enqueue(ctx, b1); err != nil || len(q.sent) != 3 || len(table.pending) != 2 {
		t.Fatalf("batch_1's completion: %v, %d sent, %d slots; want it sent in its batch's slot", err, len(q.sent), len(table.pending))
	}
}
