package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/webhook"
)

// hookRequest is one request a receiver got.
type hookRequest struct {
	header http.Header
	body   []byte
}

// hookReceiver is a webhook receiver on loopback that records every
// request and answers with handle(n, …) for the n-th (1-based), or 204.
type hookReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []hookRequest
}

func newHookReceiver(t *testing.T, handle func(n int, w http.ResponseWriter, r *http.Request)) *hookReceiver {
	t.Helper()
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, hookRequest{req.Header.Clone(), body})
		n := len(r.reqs)
		r.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(body))
		if handle == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		handle(n, w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) got() []hookRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookRequest(nil), r.reqs...)
}

// wait returns the requests once there are at least n.
func (r *hookReceiver) wait(t *testing.T, n int) []hookRequest {
	t.Helper()
	eventually(t, "webhook requests", time.Minute, func() bool { return len(r.got()) >= n })
	return r.got()
}

// eventType is the type of the event a webhook request carries.
func eventType(body []byte) string {
	var ev struct{ Type string }
	json.Unmarshal(body, &ev)
	return ev.Type
}

// ofType returns the requests of events of type typ ("batch.completed"):
// a batch sends batch.queued and batch.in_progress before its terminal
// event (docs/api.md "Webhooks").
func (r *hookReceiver) ofType(typ string) []hookRequest {
	var reqs []hookRequest
	for _, q := range r.got() {
		if eventType(q.body) == typ {
			reqs = append(reqs, q)
		}
	}
	return reqs
}

// waitType returns the requests of events of type typ once there is one.
func (r *hookReceiver) waitType(t *testing.T, typ string) []hookRequest {
	t.Helper()
	eventually(t, typ+" webhook requests", time.Minute, func() bool { return len(r.ofType(typ)) > 0 })
	return r.ofType(typ)
}

// fastRetries makes webhook retries immediate, attempts time out after
// timeout and retries stop retryFor after the first attempt.
func fastRetries(timeout, retryFor time.Duration) func(*localrun.Options) {
	return func(o *localrun.Options) {
		o.Wire = func(a *app.App) {
			a.Webhooks.Backoff = func(int) time.Duration { return 0 }
			a.Webhooks.RetryFor = retryFor
			a.Webhooks.Client.Timeout = timeout
		}
	}
}

// waitDeliveries polls GET /v1/batches/{id} until its webhook_deliveries
// has status.
func waitDeliveries(t *testing.T, rt *localrun.Runtime, key, id, status string) apiBatch {
	t.Helper()
	var b apiBatch
	eventually(t, "webhook_deliveries "+status, time.Minute, func() bool {
		b = getBatch(t, rt, key, id)
		return b.WebhookDeliveries != nil && b.WebhookDeliveries.Status == status
	})
	return b
}

// The webhook of a completed batch carries the whole Batch object and is
// verified by the OpenAI SDK with the tenant's secret.
func TestWebhookSignedWithTheWholeBatch(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	c, key := client(t, rt, "acme")
	rcv := newHookReceiver(t, nil)
	rows := nRows(5, "hook")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	b := createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", rcv.URL+"/hooks/relay"), option.WithJSONSet("metadata", map[string]string{"job": "hooked"}))
	done := waitBatch(t, c, b.ID)
	if done.Status != "completed" {
		t.Fatalf("batch ended %s", done.Status)
	}
	req := rcv.waitType(t, "batch.completed")[0]

	secret, err := auth.WebhookSecret(ctx, rt.App.Store, "acme")
	if err != nil {
		t.Fatal(err)
	}
	hooks := openai.NewClient(option.WithAPIKey("unused"), option.WithWebhookSecret(secret))
	ev, err := hooks.Webhooks.Unwrap(req.body, req.header)
	if err != nil {
		t.Fatalf("Unwrap: %v", err)
	}
	completed := ev.AsBatchCompleted()
	if completed.Type != "batch.completed" || completed.Data.ID != b.ID || completed.ID != req.header.Get("webhook-id") {
		t.Fatalf("event: %s %s for %s", completed.Type, completed.ID, completed.Data.ID)
	}
	// The whole Batch: the event's data is what GET returns (less the
	// delivery summary, which the event precedes).
	var sent struct {
		Data map[string]any `json:"data"`
	}
	var now map[string]any
	json.Unmarshal(req.body, &sent)
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+b.ID), &now)
	delete(now, "webhook_deliveries")
	if !reflect.DeepEqual(sent.Data, now) {
		t.Fatalf("event data differs from the batch:\n sent %v\n  GET %v", sent.Data, now)
	}
	// Another tenant's secret does not verify it.
	other, err := auth.WebhookSecret(ctx, rt.App.Store, "globex")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hooks.Webhooks.Unwrap(req.body, req.header, option.WithWebhookSecret(other)); err == nil {
		t.Fatal("another tenant's secret verified the webhook")
	}
	got := waitDeliveries(t, rt, key, b.ID, "delivered")
	if d := got.WebhookDeliveries; d.Attempts != 1 || d.LastStatusCode == nil || *d.LastStatusCode != 204 || d.LastError != nil {
		t.Fatalf("webhook_deliveries: %+v", d)
	}
	// A batch without webhook_url has no summary.
	plain := createBatch(t, c, f.ID)
	waitBatch(t, c, plain.ID)
	if got := getBatch(t, rt, key, plain.ID); got.WebhookDeliveries != nil {
		t.Fatalf("batch without webhook: webhook_deliveries %+v", got.WebhookDeliveries)
	}
}

// A receiver that fails twice, then succeeds, gets three attempts of one
// event, and the batch shows them. (It fails the completion event's first
// two: the lifecycle events before it have records of their own.)
func TestWebhookRetriedUntilDelivered(t *testing.T) {
	t.Parallel()
	rt := runtime(t, fastRetries(5*time.Second, time.Hour))
	c, key := client(t, rt, "acme")
	var completions atomic.Int32
	rcv := newHookReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if eventType(body) == "batch.completed" && completions.Add(1) <= 2 {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(3, "retry")))
	b := createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", rcv.URL))
	waitBatch(t, c, b.ID)

	got := waitDeliveries(t, rt, key, b.ID, "delivered")
	if d := got.WebhookDeliveries; d.Attempts != 3 || d.LastStatusCode == nil || *d.LastStatusCode != 200 {
		t.Fatalf("webhook_deliveries: %+v", d)
	}
	reqs := rcv.ofType("batch.completed")
	if len(reqs) != 3 {
		t.Fatalf("receiver got %d requests of batch.completed, want 3", len(reqs))
	}
	for i, r := range reqs {
		if id := r.header.Get("webhook-id"); id != reqs[0].header.Get("webhook-id") || id == "" {
			t.Errorf("request %d webhook-id %q, want every attempt to carry %q", i+1, id, reqs[0].header.Get("webhook-id"))
		}
	}
}

// A receiver that never answers is tried until the retry horizon passes,
// then given up and recorded as failed. (Its circuit is kept closed: the
// lifecycle events' failures before the completion would open it, which
// TestWebhookCircuitStopsCallingADeadReceiver is about.)
func TestWebhookReceiverNeverAnswers(t *testing.T) {
	t.Parallel()
	rt := runtime(t, fastRetries(300*time.Millisecond, 2*time.Second), func(o *localrun.Options) {
		prev := o.Wire
		o.Wire = func(a *app.App) {
			prev(a)
			a.Webhooks.CircuitThreshold = 1000
		}
	})
	c, key := client(t, rt, "acme")
	rcv := newHookReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(2, "silent")))
	b := createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", rcv.URL))
	waitBatch(t, c, b.ID)

	got := waitDeliveries(t, rt, key, b.ID, "failed")
	d := got.WebhookDeliveries
	if d.Attempts < 2 || d.LastError == nil || !strings.Contains(*d.LastError, "no answer") || d.LastStatusCode != nil {
		t.Fatalf("webhook_deliveries: %+v (last error %v)", d, d.LastError)
	}
	// Given up means no more attempts.
	time.Sleep(2 * time.Second)
	if n := len(rcv.ofType("batch.completed")); n != d.Attempts {
		t.Fatalf("receiver got %d requests of batch.completed, the batch records %d attempts", n, d.Attempts)
	}
	if again := getBatch(t, rt, key, b.ID).WebhookDeliveries; again.Attempts != d.Attempts {
		t.Fatalf("attempts went on after giving up: %d, then %d", d.Attempts, again.Attempts)
	}
}

// A receiver that never answers stops being called once its circuit opens:
// one tenant's batches whose webhook_url hangs get at most the threshold's
// attempts plus those already running (the webhook poller's batches), not
// one every 300 ms each for their whole retry horizon, and are given up at
// the horizon; meanwhile another tenant's webhooks are delivered at their
// first attempt, promptly.
func TestWebhookCircuitStopsCallingADeadReceiver(t *testing.T) {
	t.Parallel()
	const threshold, retryFor = 3, 8 * time.Second
	rt := runtime(t, func(o *localrun.Options) {
		o.Env.MaxPendingWebhooks = 100
		o.Wire = func(a *app.App) {
			a.Webhooks.Backoff = func(int) time.Duration { return 0 }
			a.Webhooks.RetryFor = retryFor
			a.Webhooks.Client.Timeout = 300 * time.Millisecond
			a.Webhooks.CircuitThreshold, a.Webhooks.CircuitCooldown = threshold, time.Hour
		}
	})
	c, key := client(t, rt, "acme")
	oc, okey := client(t, rt, "globex")
	dead := newHookReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	var (
		mu      sync.Mutex
		arrived = map[string]time.Time{}
	)
	alive := newHookReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	alive.Config.Handler = func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var ev struct {
				Data struct{ ID string } `json:"data"`
			}
			body, _ := io.ReadAll(r.Body)
			json.Unmarshal(body, &ev)
			mu.Lock()
			arrived[ev.Data.ID] = time.Now()
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
		})
	}(alive.Config.Handler)
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(1, "dead")))
	of := upload(t, oc, "in.jsonl", jsonlRows(nRows(1, "alive")))
	var deadBatches []string
	for range 6 {
		deadBatches = append(deadBatches, createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", dead.URL)).ID)
	}
	dead.wait(t, 1)
	var aliveBatches []string
	for range 3 {
		aliveBatches = append(aliveBatches, createBatch(t, oc, of.ID, option.WithJSONSet("webhook_url", alive.URL)).ID)
	}

	for _, id := range aliveBatches {
		done := waitBatch(t, oc, id)
		got := waitDeliveries(t, rt, okey, id, "delivered").WebhookDeliveries
		if got.Attempts != 1 {
			t.Errorf("globex's %s delivered after %d attempts, want its first", id, got.Attempts)
		}
		mu.Lock()
		at := arrived[id]
		mu.Unlock()
		if late := at.Sub(time.Unix(done.CompletedAt, 0)); late > 5*time.Second {
			t.Errorf("globex's webhook of %s arrived %s after it completed", id, late)
		}
	}
	for _, id := range deadBatches {
		waitBatch(t, c, id)
		waitDeliveries(t, rt, key, id, "failed")
	}
	// Given up, each batch's webhook makes no attempt more (TestWebhookReceiverNeverAnswers).
	bound := threshold + rt.App.Resources.Function("webhook").BatchSize*2 // the local poller runs 2 invocations
	if n := len(dead.got()); n > bound {
		t.Fatalf("the dead receiver was called %d times for %d batches, want at most %d", n, len(deadBatches), bound)
	}
	circuit, err := rt.App.Store.GetCircuit(context.Background(), webhook.CircuitOf("acme", dead.URL))
	if err != nil || circuit.Closed() || circuit.Failures < threshold {
		t.Fatalf("the dead receiver's circuit: %+v, %v; want open", circuit, err)
	}
	// Every webhook settled, delivered or given up, gave its pending slot back.
	for _, tenant := range []string{"acme", "globex"} {
		if ms, err := rt.App.Store.WebhookMarkers(context.Background(), tenant); err != nil || len(ms) != 0 {
			t.Errorf("%s: pending webhook slots %+v, %v; want none", tenant, ms, err)
		}
	}
}

// With the deployment policy, webhook URLs at private addresses are refused
// at create, and a host name that resolves to one is refused when dialled.
func TestWebhookSSRFRefused(t *testing.T) {
	t.Parallel()
	rt := runtime(t, func(o *localrun.Options) { o.StrictWebhooks = true })
	c, key := client(t, rt, "acme")
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(2, "ssrf")))
	for _, u := range []string{
		"https://127.0.0.1/x",
		"https://10.0.0.1/hook",
		"https://169.254.169.254/latest/meta-data/",
		"https://[::1]:8443/x",
		"https://[::ffff:192.168.1.1]/x",
		"http://hooks.example.com/relay", // https only
		"https://user:pw@hooks.example.com/relay",
	} {
		t.Run(u, func(t *testing.T) {
			t.Parallel()
			status, body := postBatch(t, rt, key, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "webhook_url": u})
			var e struct{ Error struct{ Param string } }
			json.Unmarshal(body, &e)
			if status != 400 || e.Error.Param != "webhook_url" {
				t.Fatalf("got %d %s, want 400 naming webhook_url", status, body)
			}
		})
	}

	// localhost passes the create check (names are not resolved then: what
	// they resolve to at create says nothing about delivery time) and is
	// refused at dial time, before a connection: the receiver gets nothing.
	// (A name resolving to 10.x is refused the same way; internal/webhook
	// tests that with an in-process resolver, so no packet goes to 10.x.)
	var conns atomic.Int32
	tlsRcv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	tlsRcv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	tlsRcv.StartTLS()
	t.Cleanup(tlsRcv.Close)
	port := mustPort(t, tlsRcv.URL)
	b := createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", "https://localhost:"+port+"/hook"))
	waitBatch(t, c, b.ID)
	got := waitDeliveries(t, rt, key, b.ID, "failed")
	if d := got.WebhookDeliveries; d.Attempts != 1 || d.LastError == nil || !strings.Contains(*d.LastError, "refused: loopback") {
		t.Fatalf("webhook_deliveries: %+v (last error %v)", d, d.LastError)
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("the loopback receiver saw %d connections", n)
	}
}

// A redirect is never followed, so a receiver cannot point deliveries at a
// private address (here another loopback server) by answering 302. (Its
// circuit is kept closed: the lifecycle events' 302s could open it before
// the completion's first attempt, which would then be given up unattempted.)
func TestWebhookRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	rt := runtime(t, fastRetries(5*time.Second, time.Second), func(o *localrun.Options) {
		prev := o.Wire
		o.Wire = func(a *app.App) {
			prev(a)
			a.Webhooks.CircuitThreshold = 1000
		}
	})
	c, key := client(t, rt, "acme")
	inside := newHookReceiver(t, nil)
	rcv := newHookReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inside.URL+"/admin", http.StatusFound)
	})
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(2, "redirect")))
	b := createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", rcv.URL))
	waitBatch(t, c, b.ID)
	got := waitDeliveries(t, rt, key, b.ID, "failed")
	if d := got.WebhookDeliveries; d.Attempts < 1 || d.LastStatusCode == nil || *d.LastStatusCode != 302 || d.LastError == nil || !strings.Contains(*d.LastError, "not followed") {
		t.Fatalf("webhook_deliveries: %+v", d)
	}
	if n := len(inside.got()); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
	if len(rcv.got()) == 0 {
		t.Fatal("the receiver got nothing")
	}
}

func mustPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// A batch's receiver gets batch.queued (its input validated), then
// batch.in_progress (its first chunk started), then batch.completed, each
// signed with the tenant's secret and carrying the Batch object, each
// delivered once (docs/api.md "Webhooks").
func TestWebhookLifecycleEventsInOrder(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	rcv := newHookReceiver(t, nil)
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(25, "order")))
	b := createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", rcv.URL))
	rcv.waitType(t, "batch.completed")
	waitDeliveries(t, rt, key, b.ID, "delivered")

	secret, err := auth.WebhookSecret(context.Background(), rt.App.Store, "acme")
	if err != nil {
		t.Fatal(err)
	}
	hooks := openai.NewClient(option.WithAPIKey("unused"), option.WithWebhookSecret(secret))
	var types []string
	ids := map[string]bool{}
	for _, r := range rcv.got() {
		if err := hooks.Webhooks.VerifySignature(r.body, r.header); err != nil {
			t.Fatalf("%s: signature: %v", r.body, err)
		}
		var ev struct {
			ID, Type string
			Data     apiBatch
		}
		if err := json.Unmarshal(r.body, &ev); err != nil || ev.Data.ID != b.ID || ev.ID != r.header.Get("webhook-id") {
			t.Fatalf("event %s (%v), want one of batch %s", r.body, err, b.ID)
		}
		types = append(types, ev.Type)
		ids[ev.ID] = true
	}
	want := []string{"batch.queued", "batch.in_progress", "batch.completed"}
	if !reflect.DeepEqual(types, want) || len(ids) != 3 {
		t.Fatalf("receiver got %v (%d event ids), want %v, three events", types, len(ids), want)
	}
}
