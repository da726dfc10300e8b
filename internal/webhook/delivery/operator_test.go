package delivery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/webhook"
)

// keyMap is an OperatorKeys of fixed secrets by secret_env.
type keyMap map[string]string

func (k keyMap) Key(_ context.Context, name string) (string, error) { return k[name], nil }

// posted is one request a receiver got: its event and whether the
// signature verified with the receiver's secret.
type posted struct {
	Tenant, Type, ID string
	Verified         bool
}

// signedReceiver records the events posted to it, checking each signature
// with secret.
func signedReceiver(t *testing.T, secret string) (*httptest.Server, func() []posted) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []posted
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev struct {
			ID, Type string
			Data     struct{ Metadata map[string]string }
		}
		json.Unmarshal(body, &ev)
		unix, _ := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
		want, _ := webhook.Sign(secret, r.Header.Get(webhook.HeaderID), time.Unix(unix, 0), body)
		mu.Lock()
		got = append(got, posted{ev.Data.Metadata["tenant"], ev.Type, ev.ID,
			want.Get(webhook.HeaderSignature) == r.Header.Get(webhook.HeaderSignature)})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []posted {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// Operator endpoints get every tenant's events, whether or not a batch
// has a webhook_url, signed with their own secret, each only the types it
// wants; each has delivery records of its own, apart from the batch's.
func TestOperatorEndpointsGetEveryTenantsEvents(t *testing.T) {
	t.Parallel()
	opsSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("operator-secret-0123456789abcdef"))
	ops, opsGot := signedReceiver(t, opsSecret)
	done, doneGot := signedReceiver(t, opsSecret)
	table, q := &memTable{}, &memQueue{}
	tenantSecret, _ := table.WebhookSecret(context.Background(), "acme", nil)
	own, ownGot := signedReceiver(t, tenantSecret)
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Client: webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}),
		Operators: []config.OperatorWebhook{
			{Name: "ops", URL: ops.URL, SecretEnv: "OPS_SECRET"},
			{Name: "done", URL: done.URL, SecretEnv: "OPS_SECRET", Events: []string{"batch.completed"}},
		},
		OperatorKeys: keyMap{"OPS_SECRET": opsSecret}}
	ctx := context.Background()
	ownURL := own.URL
	for _, b := range []batch.Batch{
		{ID: "batch_a", Tenant: "acme", Status: batch.Validating, WebhookURL: &ownURL, Metadata: map[string]string{"tenant": "acme"}},
		{ID: "batch_g", Tenant: "globex", Status: batch.Validating, Metadata: map[string]string{"tenant": "globex"}},
	} {
		if !s.Announces(b) {
			t.Fatalf("%s: Announces false with operator endpoints", b.ID)
		}
		if err := s.Announce(ctx, b, webhook.Queued); err != nil {
			t.Fatal(err)
		}
		b.Status, b.Started = batch.Completed, true
		if err := s.Enqueue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// Delivered in the order queued: the completions' first attempts
	// find the queued events' made.
	for i := 0; i < len(q.sent); i++ {
		body, _ := json.Marshal(q.sent[i])
		if failed, err := s.Deliver(ctx, []msg.Delivery{{ID: "m", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
			t.Fatalf("deliver %+v: %v, failed %v", q.sent[i], err, failed)
		}
	}
	summary := func(ps []posted) []string {
		var out []string
		for _, p := range ps {
			if !p.Verified {
				t.Errorf("%s %s: signature does not verify with the receiver's secret", p.Tenant, p.Type)
			}
			out = append(out, p.Tenant+" "+p.Type)
		}
		sort.Strings(out)
		return out
	}
	for name, c := range map[string]struct {
		got  []posted
		want []string
	}{
		"ops":  {opsGot(), []string{"acme batch.completed", "acme batch.queued", "globex batch.completed", "globex batch.queued"}},
		"done": {doneGot(), []string{"acme batch.completed", "globex batch.completed"}},
		"own":  {ownGot(), []string{"acme batch.completed", "acme batch.queued"}},
	} {
		if got := summary(c.got); !slices.Equal(got, c.want) {
			t.Errorf("%s receiver got %v, want %v", name, got, c.want)
		}
	}
	// One event, one id, whoever receives it; a record per receiver.
	ids := map[string]string{}
	for _, p := range append(opsGot(), ownGot()...) {
		if id, ok := ids[p.Tenant+p.Type]; ok && id != p.ID {
			t.Errorf("%s %s sent with two ids: %s, %s", p.Tenant, p.Type, id, p.ID)
		}
		ids[p.Tenant+p.Type] = p.ID
	}
	for _, key := range []string{"batch_a", "batch_a@ops", "batch_a@done", "batch_g@ops", "batch_g@done", "batch_g@ops/batch.queued"} {
		if d := table.records[key]; !d.Delivered || d.Count != 1 {
			t.Errorf("record %s: %+v, want delivered at the first attempt", key, d)
		}
	}
	if _, ok := table.records["batch_g"]; ok {
		t.Error("a batch without webhook_url has a delivery record of its own")
	}
}

// The event types an operator endpoint may filter on (config.EventTypes)
// are the ones NewEvent makes.
func TestOperatorEventTypesAreTheEvents(t *testing.T) {
	t.Parallel()
	for _, typ := range config.EventTypes {
		status, ok := strings.CutPrefix(typ, "batch.")
		if _, err := webhook.NewEvent(status, []byte(`{}`), time.Now()); !ok || err != nil {
			t.Errorf("%s: no such event (%v)", typ, err)
		}
	}
	if _, err := webhook.NewEvent("validating", []byte(`{}`), time.Now()); err == nil {
		t.Error("NewEvent makes batch.validating, which config.EventTypes lacks")
	}
}

// A message queued for an operator endpoint carried its URL of the time:
// after the operator moved the endpoint (or narrowed its events) in
// relay.yaml, its retries, for a day, still went to the old URL signed
// with the endpoint's secret. They go where the endpoint is now, and only
// if it still wants the event.
func TestOperatorMessagesFollowTheConfig(t *testing.T) {
	t.Parallel()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("operator-secret-0123456789abcdef"))
	oldSrv, oldGot := signedReceiver(t, secret)
	newSrv, newGot := signedReceiver(t, secret)
	table, q := &memTable{}, &memQueue{}
	s := &Service{Store: table, Queue: q, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Client:       webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}),
		Operators:    []config.OperatorWebhook{{Name: "ops", URL: oldSrv.URL, SecretEnv: "OPS"}},
		OperatorKeys: keyMap{"OPS": secret}}
	ctx := context.Background()
	for _, id := range []string{"batch_x", "batch_y"} {
		if err := s.Enqueue(ctx, batch.Batch{ID: id, Tenant: "acme", Status: batch.Completed}); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func(m any) {
		body, _ := json.Marshal(m)
		if failed, err := s.Deliver(ctx, []msg.Delivery{{ID: "m", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
			t.Fatalf("deliver: %v, failed %v", err, failed)
		}
	}
	s.Operators = []config.OperatorWebhook{{Name: "ops", URL: newSrv.URL, SecretEnv: "OPS"}}
	deliver(q.sent[0])
	if len(oldGot()) != 0 || len(newGot()) != 1 {
		t.Fatalf("moved endpoint: the old URL got %d, the new %d; want 0 and 1", len(oldGot()), len(newGot()))
	}
	s.Operators[0].Events = []string{"batch.failed"}
	deliver(q.sent[1])
	if len(oldGot()) != 0 || len(newGot()) != 1 {
		t.Fatalf("an event the endpoint no longer wants was sent: old %d, new %d", len(oldGot()), len(newGot()))
	}
}
