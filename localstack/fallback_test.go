package localstack

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
)

// fallbackModels: every request to fb-primary-broken fails (500), and its
// fallback fb-two takes two at a time.
const fallbackModels = `
models:
  - {name: fb-primary-broken, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, fallback: fb-two, max_concurrency: 8, timeout: 30s}
  - {name: fb-two, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 2, timeout: 30s}
`

// TestFallbackRowsHoldTheFallbacksCapacity: rows that fail on their model
// fall back to a model whose own batch runs at its cap of 2, and the
// fallback never has more than 2 requests in flight, while every row of
// both batches completes, the fallen back ones marked so (docs/design.md
// "Scheduling", fallback rows). Before, the fallbacks ran on the failing
// model's 8 slots, beside the fallback's own 2.
func TestFallbackRowsHoldTheFallbacksCapacity(t *testing.T) {
	t.Parallel()
	rt := runtime(t, withModels(t, fallbackModels))
	c, _ := client(t, rt, "fallback")
	own := slowRows("own", "fb-two", 60, 300*time.Millisecond)
	failing := make([]row, 16)
	for i := range failing {
		failing[i] = row{id: fmt.Sprintf("fails-%02d", i), model: "fb-primary-broken", content: fmt.Sprintf("row %d", i)}
	}
	ownID := createBatch(t, c, upload(t, c, "own.jsonl", jsonlRows(own)).ID).ID
	time.Sleep(time.Second) // fb-two's own batch runs at its cap
	failID := createBatch(t, c, upload(t, c, "fails.jsonl", jsonlRows(failing)).ID).ID

	for _, id := range []string{ownID, failID} {
		if b := waitBatch(t, c, id); b.Status != "completed" || b.RequestCounts.Failed != 0 {
			t.Fatalf("batch %s: %s %+v", id, b.Status, b.RequestCounts)
		}
	}
	if peak := rt.Mock.Stats().PeakInFlight["fb-two"]; peak > 2 {
		t.Fatalf("fb-two peaked at %d requests in flight, over its max_concurrency of 2", peak)
	}
	out, _ := checkInvariant(t, c, fetchBatch(t, c, failID), idsOf(failing))
	for _, r := range failing {
		l := out[r.id]
		var body struct{ Model string }
		if l.Response != nil {
			_ = json.Unmarshal(l.Response.Body, &body)
		}
		if !l.Fallback || body.Model != "fb-two" {
			t.Errorf("row %s: fallback %v, model %q; want served by fb-two as a fallback", r.id, l.Fallback, body.Model)
		}
	}
}

// A batch's rows as generations (docs/api.md "Rows"): GET
// /v1/batches/{id}/rows says of each committed row which model served it,
// whether a fallback did, how many upstream attempts it took, the last
// status and its tokens, under the key that submitted it; custom_id and
// status=failed select.
func TestRowsShowTheirGenerations(t *testing.T) {
	t.Parallel()
	rt := runtime(t, withModels(t, fallbackModels))
	c, key := client(t, rt, "gens")
	rows := []row{
		{id: "fell-back", model: "fb-primary-broken", content: "the primary fails"},
		{id: "refused", model: "fb-two", content: "[[mock:400]] refused upstream"},
		{id: "plain", model: "fb-two", content: "hello"},
	}
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "gens.jsonl", jsonlRows(rows)).ID).ID)
	checkInvariant(t, c, b, idsOf(rows))
	type gen struct {
		CustomID   string `json:"custom_id"`
		KeyID      string `json:"key_id"`
		Status     string `json:"status"`
		Model      string `json:"model"`
		Fallback   bool   `json:"fallback"`
		Attempts   int    `json:"attempts"`
		LastStatus *int   `json:"last_status"`
		Error      *struct {
			Code string `json:"code"`
		} `json:"error"`
		TotalTokens int64 `json:"total_tokens"`
	}
	list := func(query string) []gen {
		var page struct {
			Data    []gen `json:"data"`
			HasMore bool  `json:"has_more"`
		}
		if err := json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+b.ID+"/rows"+query), &page); err != nil || page.HasMore {
			t.Fatalf("rows%s: %v, has_more %v", query, err, page.HasMore)
		}
		return page.Data
	}
	got := map[string]gen{}
	for _, g := range list("") {
		got[g.CustomID] = g
	}
	keyID := apikey.Hash(key)[:12]
	// A row that falls back runs in a chunk of its fallback's: its
	// attempts are its primary's 4 and the fallback's one (docs/api.md
	// "Rows").
	if g := got["fell-back"]; g.Status != "completed" || g.Model != "fb-two" || !g.Fallback || g.Attempts != 5 || g.KeyID != keyID || g.TotalTokens == 0 {
		t.Errorf("the row that fell back: %+v, want completed on fb-two, fallback, 4 attempts on its primary and one there", g)
	}
	if g := got["refused"]; g.Status != "failed" || g.LastStatus == nil || *g.LastStatus != 400 || g.Error == nil || g.Model != "fb-two" {
		t.Errorf("the refused row: %+v, want failed with last status 400", g)
	}
	if g := got["plain"]; len(got) != 3 || g.Status != "completed" || g.Fallback || g.Attempts != 1 || g.LastStatus == nil || *g.LastStatus != 200 {
		t.Errorf("the plain row: %+v (of %d rows)", g, len(got))
	}
	if one := list("?custom_id=plain"); len(one) != 1 || one[0].CustomID != "plain" {
		t.Errorf("custom_id=plain: %+v", one)
	}
	if failed := list("?status=failed"); len(failed) != 1 || failed[0].CustomID != "refused" {
		t.Errorf("status=failed: %+v", failed)
	}
}

// TestBatchModesCountFallbacks: a batch's modes (docs/api.md
// "Extensions") count the rows a fallback model answered apart, at the
// fallback's price, and the rows their own model answered as direct.
func TestBatchModesCountFallbacks(t *testing.T) {
	t.Parallel()
	primary, fallback := config.Price{InputPerMTok: 100_000, OutputPerMTok: 300_000}, config.Price{InputPerMTok: 200_000, OutputPerMTok: 600_000}
	priced := strings.Replace(fallbackModels, "fallback: fb-two,", fmt.Sprintf("fallback: fb-two, price: {input_per_mtok: %g, output_per_mtok: %g},", primary.InputPerMTok, primary.OutputPerMTok), 1)
	priced = strings.Replace(priced, "max_concurrency: 2,", fmt.Sprintf("max_concurrency: 2, price: {input_per_mtok: %g, output_per_mtok: %g},", fallback.InputPerMTok, fallback.OutputPerMTok), 1)
	rt := runtime(t, withModels(t, priced))
	c, key := client(t, rt, "modes")
	rows := append(modelRows(nRows(6, "broken"), "fb-primary-broken"), modelRows(nRows(4, "plain"), "fb-two")...)
	for i := range rows {
		rows[i].id = fmt.Sprintf("r%d", i)
	}
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "modes.jsonl", jsonlRows(rows)).ID).ID)
	checkInvariant(t, c, b, idsOf(rows))
	cost, modes := batchCost(t, rt, key, b.ID)
	// Each "hello N" row is 3 input and 3 output tokens at the mock.
	want := batch.Modes{Direct: batch.ModeUse{Rows: 4, Cost: 4 * fallback.USD(3, 3)}, Fallback: batch.ModeUse{Rows: 6, Cost: 6 * fallback.USD(3, 3)}}
	if modes == nil || modes.Native != want.Native || modes.Direct.Rows != want.Direct.Rows || modes.Fallback.Rows != want.Fallback.Rows ||
		math.Abs(modes.Direct.Cost-want.Direct.Cost) > 1e-6 || math.Abs(modes.Fallback.Cost-want.Fallback.Cost) > 1e-6 {
		t.Fatalf("modes %+v, want %+v", modes, want)
	}
	if cost == nil || math.Abs(*cost-modes.Direct.Cost-modes.Fallback.Cost) > 1e-6 {
		t.Fatalf("cost %s, want the modes' sum", fmtCost(cost))
	}
}

// deadlineModels: a small model of one slot with a fast fallback of 16,
// both at the mock's 500 ms a request (the rows' sleep marker), which
// their latency says to the estimate.
const deadlineModels = `
models:
  - {name: dl-small, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, fallback: dl-fast, max_concurrency: 1, latency: 500ms, timeout: 30s, price: {input_per_mtok: 100000, output_per_mtok: 300000}}
  - {name: dl-fast, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 16, latency: 500ms, timeout: 30s, price: {input_per_mtok: 200000, output_per_mtok: 600000}}
`

// TestCompleteByMovesRowsToFallback: 30 rows on a model of one slot take
// 15 s there, and the batch's complete_by is 10 s away: a chunk whose
// rows' direct run on their model would miss it runs them on the model's
// fallback instead, which has free slots and runs them in time (docs/api.md
// "Extensions", complete_by). Those rows' generations name the fallback,
// the batch's modes count them, and the batch ends by its complete_by.
func TestCompleteByMovesRowsToFallback(t *testing.T) {
	t.Parallel()
	rt := runtime(t, withModels(t, deadlineModels))
	c, key := client(t, rt, "deadline")
	rows := slowRows("dl", "dl-small", 30, 500*time.Millisecond)
	by := time.Now().Add(10 * time.Second).Unix()
	b := createBatch(t, c, upload(t, c, "dl.jsonl", jsonlRows(rows)).ID, option.WithJSONSet("complete_by", by))
	b = waitBatch(t, c, b.ID)
	out, errs := checkInvariant(t, c, b, idsOf(rows))
	if b.Status != "completed" || len(out) != 30 || len(errs) != 0 {
		t.Fatalf("batch: %s, %d rows done, %d failed", b.Status, len(out), len(errs))
	}
	var moved int64
	for _, l := range out {
		var body struct{ Model string }
		_ = json.Unmarshal(l.Response.Body, &body)
		if l.Fallback != (body.Model == "dl-fast") {
			t.Fatalf("row %s: fallback %v, served by %q", l.CustomID, l.Fallback, body.Model)
		}
		if l.Fallback {
			moved++
		}
	}
	var page struct {
		Data []struct {
			CustomID string `json:"custom_id"`
			Model    string `json:"model"`
			Fallback bool   `json:"fallback"`
			Attempts int    `json:"attempts"`
		} `json:"data"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+b.ID+"/rows?limit=100"), &page)
	for _, g := range page.Data {
		if g.Fallback != out[g.CustomID].Fallback || g.Fallback != (g.Model == "dl-fast") || g.Attempts != 1 {
			t.Fatalf("row %s's generation: %+v; its line says fallback %v", g.CustomID, g, out[g.CustomID].Fallback)
		}
	}
	_, modes := batchCost(t, rt, key, b.ID)
	if moved == 0 || modes == nil || modes.Fallback.Rows != moved || modes.Direct.Rows != 30-moved || len(page.Data) != 30 {
		t.Fatalf("%d rows moved to the fallback, modes %+v, %d generations", moved, modes, len(page.Data))
	}
	if b.CompletedAt > by {
		t.Fatalf("completed at %d, %d s after its complete_by %d", b.CompletedAt, b.CompletedAt-by, by)
	}
	t.Logf("completed %d s before its complete_by; %d rows on the fallback, %d on their model", by-b.CompletedAt, moved, 30-moved)
}
