package localstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/govern"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/store"
)

// codesOf counts the error lines' codes.
func codesOf(errs map[string]resultLine) map[string]int {
	n := map[string]int{}
	for _, l := range errs {
		if l.Error != nil {
			n[l.Error.Code]++
		}
	}
	return n
}

// A tenant with a small token budget: its first batch completes, its second
// starts under the budget and stops part-way (rows not yet run end
// budget_exceeded, the batch completes with the rest, the invariant holds),
// a third fails at its start, and GET /v1/usage shows nothing left.
func TestBudgetStopsABatchPartWay(t *testing.T) {
	t.Parallel()
	rt := runtime(t) // chunks of 10 rows; gpt-4o-mini's 8 slots run one chunk at a time
	c, key := client(t, rt, "thrifty")
	ctx := context.Background()
	// Every row "hello N" costs 6 tokens at the mock (3 in, 3 out): 60 a
	// chunk. A batch reserves its rows' input, 3 tokens a row, at create
	// (they set no max_tokens). 180 leaves room for the first batch (120)
	// and the second's estimate (60), which spends it in one chunk.
	if err := rt.App.Store.PutBudget(ctx, "thrifty", store.Budget{MonthlyTokens: 180}); err != nil {
		t.Fatal(err)
	}
	first := nRows(20, "hello")
	b1 := waitBatch(t, c, createBatch(t, c, upload(t, c, "first.jsonl", jsonlRows(first)).ID).ID)
	checkInvariant(t, c, b1, idsOf(first))
	if b1.Status != "completed" || b1.RequestCounts.Completed != 20 || b1.Usage.TotalTokens != 120 {
		t.Fatalf("first batch: %s, %+v, %d tokens; want all 20 rows completed for 120 tokens", b1.Status, b1.RequestCounts, b1.Usage.TotalTokens)
	}

	second := nRows(20, "hello")
	b2 := waitBatch(t, c, createBatch(t, c, upload(t, c, "second.jsonl", jsonlRows(second)).ID).ID)
	out, errs := checkInvariant(t, c, b2, idsOf(second))
	codes := codesOf(errs)
	if b2.Status != "completed" || len(out) != 10 || codes[govern.CodeBudgetExceeded] != 10 {
		t.Fatalf("second batch: %s, %d rows done, error codes %v; want one chunk done and 10 rows budget_exceeded", b2.Status, len(out), codes)
	}
	for id, l := range errs {
		if id < "r0010" {
			t.Errorf("row %s of the first chunk got %+v", id, l.Error)
		}
	}
	if n := rt.Mock.Stats().Requests; n != 30 {
		t.Fatalf("the mock got %d requests, want 30: budget_exceeded rows never reach it", n)
	}

	// The budget is spent: a batch is refused at create.
	third := upload(t, c, "third.jsonl", jsonlRows(nRows(5, "hello")))
	_, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: third.ID, Endpoint: "/v1/chat/completions", CompletionWindow: "24h"})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 422 || apiErr.Code != govern.CodeBudgetExceeded {
		t.Fatalf("third batch: %v; want 422 budget_exceeded", err)
	}

	status, body := rawDo(t, rt, key, "GET", "/v1/usage", nil)
	var usage struct {
		Budget *govern.View `json:"budget"`
	}
	if err := json.Unmarshal(body, &usage); status != 200 || err != nil || usage.Budget == nil {
		t.Fatalf("GET /v1/usage: %d %s", status, body)
	}
	if v := usage.Budget; *v.MonthlyTokens != 180 || v.UsedTokens != 180 || *v.RemainingTokens != 0 || v.MonthlyUSD != nil {
		t.Fatalf("usage budget %s, want 180 of 180 tokens used, none left", body)
	}
}

// A key disabled while its batch runs: chunks claimed once the disable is
// visible (the checker's cached key read is older than 30 s on its clock)
// end credential_revoked and never reach the mock; the tenant's other key
// still reads the batch.
func TestRevokedKeyStopsItsBatch(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	rt := runtime(t, func(o *localrun.Options) {
		o.Wire = func(a *app.App) { a.Govern.Now = func() time.Time { return time.Unix(0, clock.Load()) } }
	})
	ctx := context.Background()
	submitter, _ := client(t, rt, "acme")
	reader, _ := client(t, rt, "acme")
	rows := nRows(60, "[[mock:sleep=300ms]] slow")
	b := createBatch(t, submitter, upload(t, submitter, "slow.jsonl", jsonlRows(rows)).ID)
	waitCompleted(t, reader, b.ID, 10)
	if err := rt.App.Store.DisableKey(ctx, submitterKeyID(t, rt, b.ID)); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(31 * time.Second))
	checkStoppedPartWay(t, rt, reader, b.ID, rows, govern.CodeCredentialRevoked)
}

// checkStoppedPartWay waits for batch id, whose key stopped while it ran,
// and checks it completed with some of rows done and the rest code, none
// of which reached the mock.
func checkStoppedPartWay(t *testing.T, rt *localrun.Runtime, reader openai.Client, id string, rows []row, code string) {
	t.Helper()
	b := waitBatch(t, reader, id)
	out, errs := checkInvariant(t, reader, b, idsOf(rows))
	codes := codesOf(errs)
	if b.Status != "completed" || len(out) < 10 || codes[code] == 0 || len(out)+codes[code] != len(rows) {
		t.Fatalf("batch %s: %d rows done, error codes %v; want some done, the rest %s", b.Status, len(out), codes, code)
	}
	if n := rt.Mock.Stats().Requests; n != int64(len(out)) {
		t.Fatalf("the mock got %d requests for %d rows done: rows refused with %s reached it", n, len(out), code)
	}
}

// waitCompleted waits until batch id has at least n rows completed.
func waitCompleted(t *testing.T, c openai.Client, id string, n int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d rows of %s completed", n, id), 3*time.Minute, func() bool {
		got, err := c.Batches.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return got.RequestCounts.Completed >= n
	})
}

// submitterKeyID is the key id the batch recorded.
func submitterKeyID(t *testing.T, rt *localrun.Runtime, id string) string {
	t.Helper()
	b, err := rt.App.Store.GetBatch(context.Background(), "acme", id)
	if err != nil || b.KeyID == "" {
		t.Fatalf("batch %s records no key: %v", id, err)
	}
	return b.KeyID
}

// A key limited to one model: a file naming another fails validation on
// that line with model_not_allowed, and no row runs.
func TestKeyModelAllowList(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	raw, _, err := auth.Create(context.Background(), rt.App.Store, auth.NewKey{Tenant: "acme", Models: []string{"gpt-4o-mini"}})
	if err != nil {
		t.Fatal(err)
	}
	c := clientWithKey(rt, raw)
	rows := []row{{id: "a", content: "x"}, {id: "b", content: "x", model: "gpt-4o-mini-backup"}, {id: "c", content: "x"}}
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "mixed.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "failed" || len(b.Errors.Data) != 1 {
		t.Fatalf("batch %s, errors %+v; want failed on one line", b.Status, b.Errors.Data)
	}
	if e := b.Errors.Data[0]; e.Code != "model_not_allowed" || e.Line != 2 || e.Param != "body.model" {
		t.Fatalf("error %+v, want model_not_allowed on line 2", e)
	}
	if n := rt.Mock.Stats().Requests; n != 0 {
		t.Fatalf("the mock got %d requests", n)
	}
}

// Usage by key and batch (docs/api.md "Usage"): two keys of a tenant, a
// batch each; group_by=key_id,batch_id gives one row per batch, under the
// key that submitted it (the batch's submitted_by), whose sums are the
// batch's usage, and their cost at the model's price; the daily rows say
// the same in all. A batch's cost (docs/api.md "Extensions") is that
// row's; a batch with a row on a model without a price has none.
func TestUsageByKeyAndBatch(t *testing.T) {
	t.Parallel()
	// gpt-4o-mini gets a price: a "hello N" row is 3 input and 3 output
	// tokens at the mock, $1.20 at this price.
	rt := runtime(t, withModels(t, strings.Replace(testModels, "fallback: gpt-4o-mini-backup,",
		"fallback: gpt-4o-mini-backup, price: {input_per_mtok: 100000, output_per_mtok: 300000},", 1)))
	type usageRow struct {
		Day      string   `json:"date"`
		Model    string   `json:"model"`
		KeyID    string   `json:"key_id"`
		BatchID  string   `json:"batch_id"`
		Requests int64    `json:"requests"`
		Total    int64    `json:"total_tokens"`
		CostUSD  *float64 `json:"cost_usd"`
	}
	usage := func(key, query string) []usageRow {
		var u struct{ Data []usageRow }
		if err := json.Unmarshal(rawGet(t, rt, key, "/v1/usage"+query), &u); err != nil {
			t.Fatal(err)
		}
		return u.Data
	}
	want := map[string]usageRow{} // by batch
	var key string
	for i, n := range []int{3, 5} {
		c, k := client(t, rt, "acme")
		key = k
		rows := nRows(n, "hello")
		b := waitBatch(t, c, createBatch(t, c, upload(t, c, fmt.Sprintf("u%d.jsonl", i), jsonlRows(rows)).ID).ID)
		checkInvariant(t, c, b, idsOf(rows))
		var view struct {
			SubmittedBy string   `json:"submitted_by"`
			Cost        *float64 `json:"cost"`
		}
		json.Unmarshal(rawGet(t, rt, k, "/v1/batches/"+b.ID), &view)
		if view.SubmittedBy != apikey.Hash(k)[:12] {
			t.Fatalf("batch %s submitted_by %q, want the key's id", b.ID, view.SubmittedBy)
		}
		cost := 1.2 * float64(n)
		if view.Cost == nil || math.Abs(*view.Cost-cost) > 1e-6 {
			t.Fatalf("batch %s cost %v, want %v", b.ID, view.Cost, cost)
		}
		want[b.ID] = usageRow{KeyID: view.SubmittedBy, BatchID: b.ID, Requests: int64(n), Total: b.Usage.TotalTokens, CostUSD: &cost}
	}
	got := usage(key, "?group_by=key_id,batch_id")
	if len(got) != 2 {
		t.Fatalf("group_by=key_id,batch_id: %+v, want a row per batch", got)
	}
	for _, r := range got {
		w := want[r.BatchID]
		if r.KeyID != w.KeyID || r.Requests != w.Requests || r.Total != w.Total || r.Day != "" || r.Model != "" ||
			r.CostUSD == nil || math.Abs(*r.CostUSD-*w.CostUSD) > 1e-6 {
			t.Fatalf("row %+v (cost %v), want %+v (cost %v)", r, r.CostUSD, w, *w.CostUSD)
		}
	}
	daily := usage(key, "")
	if len(daily) != 1 || daily[0].Model != "gpt-4o-mini" || daily[0].Requests != 8 || daily[0].CostUSD == nil || math.Abs(*daily[0].CostUSD-9.6) > 1e-6 {
		t.Fatalf("daily usage %+v, want one row of 8 requests costing 9.6", daily)
	}
	// The list shows the same costs.
	var list struct {
		Data []struct {
			ID   string   `json:"id"`
			Cost *float64 `json:"cost"`
		}
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches"), &list)
	for _, b := range list.Data {
		if w, ok := want[b.ID]; ok && (b.Cost == nil || math.Abs(*b.Cost-*w.CostUSD) > 1e-6) {
			t.Fatalf("listed batch %s cost %v, want %v", b.ID, b.Cost, *w.CostUSD)
		}
	}
	// A row on a model without a price: no cost, not a partial one.
	c, k := client(t, rt, "acme")
	mixed := append(nRows(2, "hello"), row{id: "unpriced", content: "hello", model: "gpt-4o-mini-backup"})
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "mixed.jsonl", jsonlRows(mixed)).ID).ID)
	var view map[string]any
	json.Unmarshal(rawGet(t, rt, k, "/v1/batches/"+b.ID), &view)
	if cost, ok := view["cost"]; ok {
		t.Fatalf("batch with an unpriced model: cost %v, want none", cost)
	}
	if status, body := rawDo(t, rt, key, "GET", "/v1/usage?group_by=tenant", nil); status != 400 || errorCode(body) == "" {
		t.Fatalf("group_by=tenant: %d %s, want 400", status, body)
	}
}

// relay tenants budget set changes only the limits it is given: a USD
// limit set first stays when the token limit is set alone, and the CLI
// prints a limit as GET /v1/usage shows it (null when not set, never 0).
func TestBudgetSetKeepsWhatItWasNotGiven(t *testing.T) {
	t.Parallel()
	bin := relayBinary(t)
	rt := runtime(t)
	_, key := client(t, rt, "frugal")
	// The models file the CLI checks a USD limit against: no price.
	models := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(models, []byte(replaceMock(testModels, "127.0.0.1:1")), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	relay := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"tenants", "budget"}, args...)...)
		cmd.Env = []string{"AWS_ENDPOINT_URL=" + emutest.Endpoint(t), "RELAY_TABLE=" + rt.App.Env.Table, "HOME=" + t.TempDir(), "RELAY_CONFIG=" + models}
		stderr.Reset()
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("relay tenants budget %s: %v\n%s", strings.Join(args, " "), err, &stderr)
		}
		return strings.TrimSpace(string(out))
	}
	if got, want := relay("set", "--tenant", "frugal", "--monthly-tokens", "1000"), `{"monthly_tokens":1000,"monthly_usd":null}`; got != want || stderr.Len() > 0 {
		t.Fatalf("set tokens printed %s (stderr %q), want %s", got, &stderr, want)
	}
	relay("set", "--tenant", "frugal", "--monthly-usd", "20")
	if !strings.Contains(stderr.String(), "warning: no model in "+models+" has a price") {
		t.Errorf("a USD limit with no priced model: stderr %q, want a warning", &stderr)
	}
	if got, want := relay("set", "--tenant", "frugal", "--monthly-tokens", "5000"), `{"monthly_tokens":5000,"monthly_usd":20}`; got != want {
		t.Fatalf("set tokens alone printed %s, want %s: the USD limit kept", got, want)
	}
	if got, want := relay("show", "--tenant", "frugal"), `{"monthly_tokens":5000,"monthly_usd":20}`; got != want {
		t.Fatalf("show printed %s, want %s", got, want)
	}
	status, body := rawDo(t, rt, key, "GET", "/v1/usage", nil)
	var usage struct {
		Budget *govern.View `json:"budget"`
	}
	if err := json.Unmarshal(body, &usage); status != 200 || err != nil || usage.Budget == nil {
		t.Fatalf("GET /v1/usage: %d %s", status, body)
	}
	if v := usage.Budget; v.MonthlyTokens == nil || *v.MonthlyTokens != 5000 || v.MonthlyUSD == nil || *v.MonthlyUSD != 20 {
		t.Fatalf("GET /v1/usage budget %s, want 5000 tokens and $20", body)
	}
}
