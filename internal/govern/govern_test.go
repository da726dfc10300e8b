package govern

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/store"
)

// fakeStore is a hand-written Store that counts its reads.
type fakeStore struct {
	keys                  map[string]apikey.Key
	budget                store.Budget
	usage                 []store.UsageRow
	keyReads, budgetReads int
	usageReads            int
	usageFrom, usageTo    string
	// reservations and batches (reserve_test.go).
	reservations store.Reservations
	batches      map[string]batch.Batch
	// writes counts UpdateReservations writes; ambiguous, when set, runs
	// the write and then fails it, as a timed-out call that went through.
	writes    int
	ambiguous bool
	// batchUsage is every batch's usage, holds its cost holds (cost_test.go).
	batchUsage []store.UsageDetail
	holds      map[string]float64
	// dayUsage is more usage, by the UTC day its commit recorded it on.
	dayUsage map[string][]store.UsageDetail
}

// HoldCost holds on f.holds, as the store holds on the batch record.
func (f *fakeStore) HoldCost(_ context.Context, _, _ string, holds map[string]float64, fits func(batch.Batch) (bool, error)) (bool, error) {
	if ok, err := fits(batch.Batch{CostHolds: f.holds}); !ok || err != nil {
		return false, err
	}
	if f.holds == nil {
		f.holds = map[string]float64{}
	}
	for k, v := range holds {
		f.holds[k] = v
	}
	return true, nil
}

func (f *fakeStore) UpdateReservations(_ context.Context, _ string, fn func(*store.Reservations) error) error {
	rs := store.Reservations{Batches: map[string]store.Reservation{}}
	for k, v := range f.reservations.Batches {
		rs.Batches[k] = v
	}
	if err := fn(&rs); err != nil {
		if errors.Is(err, store.ErrUnchanged) {
			return nil
		}
		return err
	}
	f.reservations = rs
	f.writes++
	if f.ambiguous {
		f.ambiguous = false
		return errors.New("timeout: the write's outcome is unknown")
	}
	return nil
}

func (f *fakeStore) BatchUsage(_ context.Context, _, _, _ string, days []string) ([]store.UsageDetail, error) {
	rows := f.batchUsage
	for _, d := range days {
		rows = append(rows, f.dayUsage[d]...)
	}
	return rows, nil
}

func (f *fakeStore) GetBatch(_ context.Context, _, id string) (batch.Batch, error) {
	b, ok := f.batches[id]
	if !ok {
		return b, store.ErrBatchNotFound
	}
	return b, nil
}

func (f *fakeStore) KeyByID(_ context.Context, id string) (apikey.Key, error) {
	f.keyReads++
	k, ok := f.keys[id]
	if !ok {
		return k, apikey.ErrNoKey
	}
	return k, nil
}

func (f *fakeStore) GetBudget(context.Context, string) (store.Budget, error) {
	f.budgetReads++
	return f.budget, nil
}

func (f *fakeStore) Usage(_ context.Context, _, from, to string) ([]store.UsageRow, error) {
	f.usageReads++
	f.usageFrom, f.usageTo = from, to
	return f.usage, nil
}

// clock is a test's clock, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func models(t *testing.T) *config.Models {
	t.Helper()
	ms, err := config.ParseModels([]byte(`
models:
  - {name: priced, provider: openai, base_url: http://x/v1, api_key_env: K, price: {input_per_mtok: 1, output_per_mtok: 3}}
  - {name: free, provider: openai, base_url: http://x/v1, api_key_env: K}
`))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

var bt = batch.Batch{ID: "batch_1", Tenant: "acme", KeyID: "k1"}

// A disabled key is seen once its cached read is older than the TTL:
// chunks admitted until then, credential_revoked after; one read per TTL,
// not one per chunk.
func TestAdmitRevokedKeyAfterTheCache(t *testing.T) {
	t.Parallel()
	st := &fakeStore{keys: map[string]apikey.Key{"k1": {ID: "k1", Tenant: "acme"}}}
	clk := &clock{time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	g := &Checker{Store: st, Now: clk.now}
	ctx := context.Background()
	admit := func() string {
		t.Helper()
		code, _, err := g.Admit(ctx, bt, batch.Chunk{})
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if got := admit(); got != "" {
		t.Fatalf("active key: %q", got)
	}
	st.keys["k1"] = apikey.Key{ID: "k1", Tenant: "acme", Disabled: true}
	clk.t = clk.t.Add(29 * time.Second)
	if got := admit(); got != "" || st.keyReads != 1 {
		t.Fatalf("within the TTL: %q after %d key reads, want admitted on the cached read", got, st.keyReads)
	}
	clk.t = clk.t.Add(2 * time.Second)
	if got := admit(); got != CodeCredentialRevoked || st.keyReads != 2 {
		t.Fatalf("past the TTL: %q after %d key reads, want %s", got, st.keyReads, CodeCredentialRevoked)
	}
	delete(st.keys, "k1")
	clk.t = clk.t.Add(time.Minute)
	if got := admit(); got != CodeCredentialRevoked {
		t.Fatalf("deleted key: %q", got)
	}
	if code, _, _ := g.Admit(ctx, batch.Batch{Tenant: "acme"}, batch.Chunk{}); code != "" {
		t.Fatalf("a batch recorded without a key: %q", code)
	}
	if st.budgetReads != 2 || st.usageReads != 0 { // at the start, then the keyless batch past the TTL
		t.Fatalf("%d budget reads, %d usage reads: a tenant without a budget reads no usage", st.budgetReads, st.usageReads)
	}
}

func TestCheckBudgets(t *testing.T) {
	t.Parallel()
	usage := []store.UsageRow{
		{Day: "2026-12-01", Model: "priced", InputTokens: 600_000, OutputTokens: 200_000, TotalTokens: 800_000},
		{Day: "2026-12-02", Model: "free", InputTokens: 100, OutputTokens: 100, TotalTokens: 200},
	}
	tests := []struct {
		name   string
		budget store.Budget
		want   string
	}{
		{"no budget", store.Budget{}, ""},
		{"tokens left", store.Budget{MonthlyTokens: 800_201}, ""},
		{"tokens spent", store.Budget{MonthlyTokens: 800_200}, CodeBudgetExceeded},
		{"usd left (free models cost nothing)", store.Budget{MonthlyUSD: 1.21}, ""},
		{"usd spent", store.Budget{MonthlyUSD: 1.2}, CodeBudgetExceeded},
		{"either spent", store.Budget{MonthlyTokens: 10_000_000, MonthlyUSD: 1}, CodeBudgetExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &fakeStore{budget: tt.budget, usage: usage, keys: map[string]apikey.Key{"k1": {ID: "k1"}}}
			g := &Checker{Store: st, Models: models(t), Now: func() time.Time { return time.Date(2026, 12, 9, 0, 0, 0, 0, time.UTC) }}
			code, why, err := g.Admit(context.Background(), bt, batch.Chunk{})
			if err != nil || code != tt.want {
				t.Fatalf("Admit = %q (%s), %v; want %q", code, why, err, tt.want)
			}
			if tt.budget.Limited() && (st.usageFrom != "2026-12-01" || st.usageTo != "2026-12-31") {
				t.Fatalf("usage read for %s..%s, want the month", st.usageFrom, st.usageTo)
			}
			_, err = g.Start(context.Background(), bt)
			var bad plan.Invalid
			if got := errors.As(err, &bad) && bad[0].Code == CodeBudgetExceeded; got != (tt.want != "") {
				t.Fatalf("Start: %v, want the batch failed: %v", err, tt.want != "")
			}
		})
	}
}

func TestStartAllowList(t *testing.T) {
	t.Parallel()
	st := &fakeStore{keys: map[string]apikey.Key{"k1": {ID: "k1", Models: []string{"priced"}}, "k2": {ID: "k2"}}}
	g := &Checker{Store: st, Now: time.Now}
	allowed, err := g.Start(context.Background(), bt)
	if err != nil || allowed == nil || !allowed("priced") || allowed("free") {
		t.Fatalf("k1 (priced only): allowed nil: %v, err %v", allowed == nil, err)
	}
	b2 := bt
	b2.KeyID = "k2"
	if allowed, err := g.Start(context.Background(), b2); err != nil || allowed != nil {
		t.Fatalf("k2 (all models): allowed non-nil or %v", err)
	}
}

func TestView(t *testing.T) {
	t.Parallel()
	if v := (Status{}).View(); v != nil {
		t.Fatalf("no budget: %+v", v)
	}
	v := Status{Budget: store.Budget{MonthlyTokens: 100}, Month: "2026-12", SpentTokens: 130, SpentUSD: 0.5}.View()
	if v.RemainingTokens == nil || *v.RemainingTokens != 0 || v.RemainingUSD != nil || v.MonthlyUSD != nil || v.UsedTokens != 130 {
		t.Fatalf("view %+v", v)
	}
	v = Status{Budget: store.Budget{MonthlyUSD: 2}, SpentUSD: 0.5}.View()
	if v.RemainingUSD == nil || *v.RemainingUSD != 1.5 || v.RemainingTokens != nil {
		t.Fatalf("view %+v", v)
	}
}

// Allowed is the batch's key's allow-list whatever the endpoint: a message
// batch's rows were checked at create against the key that created it, so
// Start lets them through, but a retry of it by another key of the tenant
// runs (and falls back) only on what that key may use.
func TestAllowedIsTheBatchKeys(t *testing.T) {
	t.Parallel()
	f := &fakeStore{keys: map[string]apikey.Key{
		"k1":  {ID: "k1", Tenant: "acme", Models: []string{"priced"}},
		"all": {ID: "all", Tenant: "acme"},
	}}
	g := &Checker{Store: f, Models: models(t), Now: time.Now}
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		b        batch.Batch
		wantFree bool
	}{
		{"a chat batch", batch.Batch{Tenant: "acme", KeyID: "k1", Endpoint: "/v1/chat/completions"}, false},
		{"a message batch's retry", batch.Batch{Tenant: "acme", KeyID: "k1", Endpoint: "/v1/messages"}, false},
		{"a key without a list", batch.Batch{Tenant: "acme", KeyID: "all", Endpoint: "/v1/messages"}, true},
		{"a batch without a key", batch.Batch{Tenant: "acme", Endpoint: "/v1/chat/completions"}, true},
	} {
		allowed, err := g.Allowed(ctx, tt.b)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		mayUse := func(m string) bool { return allowed == nil || allowed(m) }
		if !mayUse("priced") || mayUse("free") != tt.wantFree {
			t.Errorf("%s: priced %v, free %v; want true, %v", tt.name, mayUse("priced"), mayUse("free"), tt.wantFree)
		}
	}
}
