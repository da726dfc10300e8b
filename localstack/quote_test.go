package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/quote"
	"github.com/relaybatch/relay/internal/store"
)

// quoteModels is testModels' gpt-4o-mini with the settings a quote reads:
// the mock's word count as its tokenizer, a latency equal to the mock's
// (quoteLatency), 16 slots and a price.
const quoteModels = `
models:
  - {name: gpt-4o-mini, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 16, timeout: 5s,
     tokenizer: words, latency: 200ms, price: {input_per_mtok: 0.15, output_per_mtok: 0.6}}
`

const quoteLatency = 200 * time.Millisecond

// quoteRows are n chat rows of 3 to 40 words each, with max_tokens.
func quoteRows(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		text := strings.Repeat("lorem ipsum dolor ", i%13+1) + fmt.Sprint(i)
		line, _ := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("q%05d", i), "method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": "gpt-4o-mini", "max_tokens": 100, "messages": []any{map[string]any{"role": "user", "content": text}}}})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// postQuote asks for a quote of body (a create's, dry_run set here).
func postQuote(t *testing.T, rt *localrun.Runtime, key string, body map[string]any) (int, quote.Quote, []byte) {
	t.Helper()
	body["dry_run"] = true
	data, _ := json.Marshal(body)
	status, resp := rawDo(t, rt, key, "POST", "/v1/batches", bytes.NewReader(data))
	var q quote.Quote
	if status == 200 {
		if err := json.Unmarshal(resp, &q); err != nil {
			t.Fatalf("quote %s: %v", resp, err)
		}
	}
	return status, q, resp
}

// TestQuoteMatchesTheRun: a quote of a 1,000-row chat file runs nothing
// and records no batch; its input tokens are within 5% of what the mock
// counts when the batch runs, and its direct duration within 25% of the
// run's (docs/api.md "Quotes"). The model's tokenizer and latency are set
// for the mock (the settings under test); the chunk size is the shipped one.
//
// It runs alone (no t.Parallel: go test runs it before the package's
// parallel tests start): it compares a prediction with a run's wall time,
// which other tests on the same two cores would stretch.
func TestQuoteMatchesTheRun(t *testing.T) {
	rt := runtime(t, withModels(t, quoteModels), func(o *localrun.Options) {
		o.Env.ChunkRows = 0
		o.MockOptions.Latency = quoteLatency
	})
	c, key := client(t, rt, "quoter")
	f := upload(t, c, "quote.jsonl", quoteRows(1000))
	create := map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
	status, q, resp := postQuote(t, rt, key, create)
	if status != 200 || q.Object != "batch.quote" || q.Rows != 1000 || len(q.Models) != 1 || q.Execution != "direct" {
		t.Fatalf("quote: %d %s", status, resp)
	}
	m := q.Models[0]
	if m.Tokenizer != "words" || m.LatencySource != quote.LatencyConfigured || m.MaxOutputTokens != 100_000 || q.RowsWithoutMaxTokens != 0 ||
		q.Modes.Direct.CostUSD == nil || q.Modes.Direct.CostUSD.Max == nil || math.Abs(q.Modes.Native.CostUSD.Min*2-q.Modes.Direct.CostUSD.Min) > 2e-6 {
		t.Fatalf("quote: %s", resp)
	}
	page, err := c.Batches.List(context.Background(), openai.BatchListParams{})
	if err != nil || len(page.Data) != 0 {
		t.Fatalf("batches after a quote: %+v, %v; want none", page, err)
	}
	if n := rt.Mock.Stats().Requests; n != 0 {
		t.Fatalf("the mock got %d requests from a quote", n)
	}

	start := time.Now()
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	took := time.Since(start)
	if b.Status != "completed" || b.RequestCounts.Completed != 1000 {
		t.Fatalf("batch: %s %+v", b.Status, b.RequestCounts)
	}
	tokensOff := math.Abs(float64(q.InputTokens-b.Usage.InputTokens)) / float64(b.Usage.InputTokens)
	est := time.Duration(*q.Modes.Direct.DurationSeconds * float64(time.Second))
	timeOff := math.Abs(est.Seconds()-took.Seconds()) / took.Seconds()
	t.Logf("quote: %d input tokens, the mock counted %d (%.1f%% off); duration %v, the run took %v (%.1f%% off)",
		q.InputTokens, b.Usage.InputTokens, 100*tokensOff, est, took.Round(10*time.Millisecond), 100*timeOff)
	if tokensOff > 0.05 {
		t.Errorf("input tokens %d, the mock counted %d: more than 5%% off", q.InputTokens, b.Usage.InputTokens)
	}
	if timeOff > 0.25 {
		t.Errorf("duration %v, the run took %v: more than 25%% off", est, took)
	}
}

// TestQuoteRefusesAsACreateWould: a quote checks what a create checks, and
// the rows the plan would refuse, with the same codes.
func TestQuoteRefusesAsACreateWould(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "quoter2")
	bad := upload(t, c, "bad.jsonl", []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"nope","messages":[]}}`+"\n"))
	tests := []struct {
		name string
		body map[string]any
		code string
	}{
		{"endpoint", map[string]any{"input_file_id": bad.ID, "endpoint": "/v1/nope"}, "invalid_endpoint"},
		{"window", map[string]any{"input_file_id": bad.ID, "endpoint": "/v1/chat/completions", "completion_window": "2d"}, "invalid_value"},
		{"no file", map[string]any{"input_file_id": "file-nope", "endpoint": "/v1/chat/completions"}, "invalid_value"},
		{"row model", map[string]any{"input_file_id": bad.ID, "endpoint": "/v1/chat/completions"}, "model_not_found"},
	}
	for _, tt := range tests {
		status, _, resp := postQuote(t, rt, key, tt.body)
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(resp, &e)
		if status != 400 || e.Error.Code != tt.code {
			t.Errorf("%s: %d %s, want 400 %s", tt.name, status, resp, tt.code)
		}
	}
	// Inline requests are quoted as they are.
	status, q, resp := postQuote(t, rt, key, map[string]any{"model": "gpt-4o-mini", "requests": []any{
		map[string]any{"prompt": "one two three"}, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "four"}}}}})
	if status != 200 || q.Rows != 2 || q.Models[0].RowsWithoutMaxTokens != 2 || q.Modes.Direct.CostUSD != nil {
		t.Fatalf("inline quote: %d %s", status, resp)
	}
	if n := rt.Mock.Stats().Requests; n != 0 {
		t.Fatalf("the mock got %d requests from quotes", n)
	}
}

// TestConcurrentBatchesReserveTheBudget: a tenant whose budget fits one of
// two batches creates both at once: one is created, the other refused at
// once with budget_exceeded and its quote, neither having run a row then;
// once the first has ended (its reservation released, its spend counted),
// the same batch fits (docs/api.md "Budgets, revocation and allow-lists").
func TestConcurrentBatchesReserveTheBudget(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "reserver")
	ctx := context.Background()
	var data bytes.Buffer
	for i := range 20 {
		line, _ := json.Marshal(map[string]any{"custom_id": fmt.Sprint(i), "method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": "gpt-4o-mini", "max_tokens": 20, "messages": []any{map[string]any{"role": "user", "content": fmt.Sprint("hello ", i)}}}})
		data.Write(line)
		data.WriteByte('\n')
	}
	f := upload(t, c, "reserve.jsonl", data.Bytes())
	create := map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions"}
	_, q, resp := postQuote(t, rt, key, create)
	est := q.InputTokens + q.MaxOutputTokens
	if q.Rows != 20 || q.MaxOutputTokens != 400 {
		t.Fatalf("quote: %s", resp)
	}
	// One batch's estimate fits, two do not.
	if err := rt.App.Store.PutBudget(ctx, "reserver", store.Budget{MonthlyTokens: est + est/2}); err != nil {
		t.Fatal(err)
	}

	delete(create, "dry_run")
	body, _ := json.Marshal(create)
	type answer struct {
		status int
		body   []byte
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest("POST", rt.URL+"/v1/batches", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{0, []byte(err.Error())}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers <- answer{resp.StatusCode, b}
		}()
	}
	var created string
	var refused []byte
	for range 2 {
		a := <-answers
		switch a.status {
		case 200:
			var b struct{ ID string }
			json.Unmarshal(a.body, &b)
			created = b.ID
		case 422:
			refused = a.body
		default:
			t.Fatalf("create: %d %s", a.status, a.body)
		}
	}
	var e struct {
		Error struct {
			Code  string      `json:"code"`
			Quote quote.Quote `json:"quote"`
		} `json:"error"`
	}
	if created == "" || refused == nil || json.Unmarshal(refused, &e) != nil || e.Error.Code != "budget_exceeded" || e.Error.Quote.Rows != 20 {
		t.Fatalf("creates: created %q, refused %s; want one of each, the refusal budget_exceeded with the quote", created, refused)
	}
	page, err := c.Batches.List(ctx, openai.BatchListParams{})
	if err != nil || len(page.Data) != 1 {
		t.Fatalf("batches: %d (%v), want the one created", len(page.Data), err)
	}

	b := waitBatch(t, c, created)
	if b.Status != "completed" || b.RequestCounts.Completed != 20 || b.Usage.TotalTokens+est > est+est/2 {
		t.Fatalf("first batch: %s %+v, %d tokens (the next estimate %d must fit %d)", b.Status, b.RequestCounts, b.Usage.TotalTokens, est, est+est/2)
	}
	if status, resp := rawDo(t, rt, key, "POST", "/v1/batches", bytes.NewReader(body)); status != 200 {
		t.Fatalf("create after the first ended: %d %s", status, resp)
	}
}

// etaModels: one model with the slots for a large batch (the setting under
// test is the mock's fixed latency, etaLatency).
const etaModels = `
models:
  - {name: gpt-4o-mini, provider: openai, tokenizer: words, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 64, timeout: 5s}
`

const etaLatency = 250 * time.Millisecond

// TestETAHoldsFromAFifthOn: a 10,000-row batch at a fixed upstream
// latency carries estimated_completion_at while it runs; from 20% of its
// rows settled on, the estimate is within 20% of the run's length of its
// real end (completed_at). The estimate at each 10% is logged.
// It runs alone, as TestQuoteMatchesTheRun does.
func TestETAHoldsFromAFifthOn(t *testing.T) {
	rt := runtime(t, withModels(t, etaModels), func(o *localrun.Options) {
		o.Env.ChunkRows = 0
		o.MockOptions.Latency = etaLatency
	})
	c, _ := client(t, rt, "eta")
	const n = 10_000
	f := upload(t, c, "eta.jsonl", jsonlRows(nRows(n, "eta")))
	b := createBatch(t, c, f.ID)
	if b.JSON.ExtraFields["estimated_completion_at"].Raw() != "null" {
		t.Fatalf("a new batch's estimated_completion_at: %s, want null", b.JSON.ExtraFields["estimated_completion_at"].Raw())
	}
	type sample struct {
		tenth int
		at    time.Time
		eta   int64
	}
	var samples []sample
	deadline := time.Now().Add(5 * time.Minute)
	for next := 1; ; {
		got, err := c.Batches.Get(context.Background(), b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if terminal[got.Status] {
			b = got
			break
		}
		done := got.RequestCounts.Completed + got.RequestCounts.Failed
		var eta int64
		json.Unmarshal([]byte(got.JSON.ExtraFields["estimated_completion_at"].Raw()), &eta)
		if got.Status == "in_progress" && done > 0 && eta == 0 {
			t.Fatalf("in progress with %d rows settled: no estimated_completion_at", done)
		}
		for next < 10 && done*10 >= int64(next)*n {
			samples = append(samples, sample{next, time.Now(), eta})
			next++
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch still %s after 5 minutes", got.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if b.Status != "completed" || b.RequestCounts.Completed != n {
		t.Fatalf("batch: %s %+v", b.Status, b.RequestCounts)
	}
	run := float64(b.CompletedAt - b.InProgressAt)
	for _, s := range samples {
		off := math.Abs(float64(s.eta-b.CompletedAt)) / run
		t.Logf("%3d%%: estimated_completion_at %+ds from the real end (%.1f%% of the %.0fs run)", s.tenth*10, s.eta-b.CompletedAt, 100*off, run)
		if s.tenth >= 2 && off > 0.2 {
			t.Errorf("at %d%%: estimate %d, real end %d: more than 20%% of the run off", s.tenth*10, s.eta, b.CompletedAt)
		}
	}
	if len(samples) < 8 {
		t.Errorf("%d samples, want one at each 10%% from 20%%", len(samples))
	}
}

// costModels: gpt-4o-mini at a dollar a token, so a row "hello N" with
// max_tokens 3 costs at most $6 (3 words in, 3 out at the mock), and one
// model without a price.
const costModels = `
models:
  - {name: gpt-4o-mini, provider: openai, tokenizer: words, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 8, timeout: 5s,
     price: {input_per_mtok: 1000000, output_per_mtok: 1000000}}
  - {name: unpriced, provider: openai, tokenizer: words, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 8, timeout: 5s}
`

// TestMaxCostStopsAtTheCeiling: a batch of 20 rows that costs $120 run in
// full, with max_cost 70, runs its first chunk of 10 rows ($60) and not the
// second, whose rows could pass the ceiling: they end cost_limit_reached,
// in the dead-letter list, and the batch's cost stays under 70.
func TestMaxCostStopsAtTheCeiling(t *testing.T) {
	t.Parallel()
	rt := runtime(t, withModels(t, costModels))
	c, key := client(t, rt, "ceiling")
	data, ids := costRows(20, "gpt-4o-mini", "")
	f := upload(t, c, "ceiling.jsonl", data.Bytes())
	_, q, resp := postQuote(t, rt, key, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions"})
	if q.Modes.Direct.CostUSD == nil || q.Modes.Direct.CostUSD.Max == nil || *q.Modes.Direct.CostUSD.Max != 120 {
		t.Fatalf("quote: %s; want at most $120", resp)
	}
	b := waitBatch(t, c, createBatch(t, c, f.ID, option.WithJSONSet("max_cost", 70)).ID)
	out, errs := checkInvariant(t, c, b, ids)
	codes := codesOf(errs)
	if b.Status != "completed" || len(out) != 10 || codes["cost_limit_reached"] != 10 {
		t.Fatalf("batch: %s, %d rows done, error codes %v; want 10 done and 10 cost_limit_reached", b.Status, len(out), codes)
	}
	var cost float64
	json.Unmarshal([]byte(b.JSON.ExtraFields["cost"].Raw()), &cost)
	if cost != 60 || b.JSON.ExtraFields["max_cost"].Raw() != "70" {
		t.Fatalf("cost %v (max_cost %s), want $60 of at most $70", cost, b.JSON.ExtraFields["max_cost"].Raw())
	}
	dls := deadLetters(t, rt, key, b.ID, 100)
	if len(dls) != 10 || dls[0].Reason != "cost_limit_reached" || dls[0].Row != 10 {
		t.Fatalf("dead letters %+v, want rows 10 to 19, cost_limit_reached", dls)
	}

	// A max_cost needs a price for every model of the batch.
	unpriced := upload(t, c, "unpriced.jsonl", jsonlRows([]row{{id: "a", content: "hi", model: "unpriced"}}))
	status, resp := rawDo(t, rt, key, "POST", "/v1/batches", strings.NewReader(fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","max_cost":1}`, unpriced.ID)))
	if status != 400 || !strings.Contains(string(resp), "max_cost") {
		t.Fatalf("max_cost on an unpriced model: %d %s, want 400 naming max_cost", status, resp)
	}
}

// TestMaxCostWithChunksAtOnce: two chunks of 10 rows on a model of 20
// slots, each row answered after a second, so both chunks are claimed
// before either commits, with max_cost three quarters of the quote's most
// (one chunk fits, two do not): the second
// chunk's admission counts the first's rows at their most, and the batch's
// cost stays within max_cost.
func TestMaxCostWithChunksAtOnce(t *testing.T) {
	t.Parallel()
	rt := runtime(t, withModels(t, strings.Replace(costModels, "max_concurrency: 8", "max_concurrency: 20", 1)))
	c, key := client(t, rt, "ceiling")
	data, ids := costRows(20, "gpt-4o-mini", " [[mock:sleep=1s]]")
	f := upload(t, c, "ceiling.jsonl", data.Bytes())
	_, q, resp := postQuote(t, rt, key, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions"})
	if q.Modes.Direct.CostUSD == nil || q.Modes.Direct.CostUSD.Max == nil {
		t.Fatalf("quote: %s; want a most", resp)
	}
	ceiling := *q.Modes.Direct.CostUSD.Max * 3 / 4
	b := waitBatch(t, c, createBatch(t, c, f.ID, option.WithJSONSet("max_cost", ceiling)).ID)
	out, errs := checkInvariant(t, c, b, ids)
	var cost float64
	json.Unmarshal([]byte(b.JSON.ExtraFields["cost"].Raw()), &cost)
	refused := codesOf(errs)["cost_limit_reached"]
	if cost > ceiling || len(out) > 10 || len(out)+refused != 20 {
		t.Fatalf("cost $%v of max_cost $%v: %d rows done, error codes %v; want at most 10 done, the rest cost_limit_reached", cost, ceiling, len(out), codesOf(errs))
	}
	// Both chunks admitted at the same moment each count the other: both
	// may be refused (docs/api.md "Extensions").
	t.Logf("cost $%v of max_cost $%v: %d rows done, %d cost_limit_reached", cost, ceiling, len(out), refused)
}

// TestMessageBatchQuote: POST /v1/messages/batches with the dry_run
// extension, through the Anthropic SDK, answers the quote of its requests
// as a dry-run create of /v1/batches does, and records and runs nothing
// (docs/api.md "Quotes"); a malformed request is refused as a create is.
func TestMessageBatchQuote(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := anthropicClient(t, rt, "msgquote")
	ctx := context.Background()
	reqs := []anthropic.MessageBatchNewParamsRequest{msgRequest("a", "claude-haiku-4-5", "hello 1"), msgRequest("b", "claude-haiku-4-5", "hello 2")}
	mb, err := c.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: reqs}, aoption.WithJSONSet("dry_run", true))
	if err != nil {
		t.Fatal(err)
	}
	var q quote.Quote
	if err := json.Unmarshal([]byte(mb.RawJSON()), &q); err != nil {
		t.Fatal(err)
	}
	// The mock's words tokenizer: two words and one for the message, each.
	if q.Object != "batch.quote" || q.Endpoint != "/v1/messages" || q.Rows != 2 || q.InputTokens != 6 || q.MaxOutputTokens != 128 ||
		len(q.Models) != 1 || q.Models[0].Model != "claude-haiku-4-5" || q.Modes.Direct.DurationSeconds == nil {
		t.Fatalf("quote %s", mb.RawJSON())
	}
	page, err := c.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{})
	if err != nil || len(page.Data) != 0 || rt.Mock.Stats().Requests != 0 {
		t.Fatalf("after a quote: %d message batches (%v), %d upstream requests; want none", len(page.Data), err, rt.Mock.Stats().Requests)
	}
	bad := []anthropic.MessageBatchNewParamsRequest{msgRequest("a", "claude-haiku-4-5", "x"), msgRequest("a", "claude-haiku-4-5", "y")}
	if _, err := c.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: bad}, aoption.WithJSONSet("dry_run", true)); sdkStatus(t, err) != 400 {
		t.Fatalf("quote of a duplicate custom_id: %v, want 400", err)
	}
}

// costRows is a JSONL file of n chat rows of gpt-4o-mini with max_tokens 3,
// "hello <i>" and suffix each, and their custom ids.
func costRows(n int, model, suffix string) (*bytes.Buffer, []string) {
	var data bytes.Buffer
	var ids []string
	for i := range n {
		id := fmt.Sprintf("r%04d", i)
		ids = append(ids, id)
		line, _ := json.Marshal(map[string]any{"custom_id": id, "method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": model, "max_tokens": 3, "messages": []any{map[string]any{"role": "user", "content": fmt.Sprint("hello ", i) + suffix}}}})
		data.Write(line)
		data.WriteByte('\n')
	}
	return &data, ids
}

// TestMaxCostCountsThePricierFallback: 20 rows of a model that fails them
// all, each moving to a fallback at twice its price, in chunks of 10, with
// max_cost $40: $24 run in full at the model's price, $48 at the
// fallback's. A chunk is admitted at the most its rows may cost on the
// priciest model they may run on ($24 a chunk here), so the batch's cost
// stays within max_cost and the rows it cannot afford end
// cost_limit_reached. Before, a chunk counted its rows at the quote's
// average on their own model ($12) and both ran: $48.
func TestMaxCostCountsThePricierFallback(t *testing.T) {
	t.Parallel()
	models := strings.Replace(fallbackModels, "fallback: fb-two,", "fallback: fb-two, tokenizer: words, price: {input_per_mtok: 100000, output_per_mtok: 300000},", 1)
	models = strings.Replace(models, "max_concurrency: 2,", "max_concurrency: 2, tokenizer: words, price: {input_per_mtok: 200000, output_per_mtok: 600000},", 1)
	rt := runtime(t, withModels(t, models))
	c, key := client(t, rt, "fbceiling")
	data, ids := costRows(20, "fb-primary-broken", "")
	f := upload(t, c, "fbceiling.jsonl", data.Bytes())
	_, q, resp := postQuote(t, rt, key, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions"})
	if q.Modes.Direct.CostUSD == nil || q.Modes.Direct.CostUSD.Max == nil || *q.Modes.Direct.CostUSD.Max != 24 {
		t.Fatalf("quote: %s; want at most $24 on the model itself", resp)
	}
	const ceiling = 40.0
	b := waitBatch(t, c, createBatch(t, c, f.ID, option.WithJSONSet("max_cost", ceiling)).ID)
	out, errs := checkInvariant(t, c, b, ids)
	codes := codesOf(errs)
	cost, modes := batchCost(t, rt, key, b.ID)
	if cost == nil || *cost > ceiling || len(out) == 0 || codes["cost_limit_reached"] == 0 || len(out)+codes["cost_limit_reached"] != 20 {
		t.Fatalf("cost %s of max_cost $%v: %d rows done, error codes %v; want within it, the rest cost_limit_reached", fmtCost(cost), ceiling, len(out), codes)
	}
	if modes == nil || modes.Fallback.Rows != int64(len(out)) {
		t.Fatalf("modes %+v, want every answered row on the fallback", modes)
	}
	t.Logf("cost %s of max_cost $%v: %d rows done on the fallback, %d cost_limit_reached", fmtCost(cost), ceiling, len(out), codes["cost_limit_reached"])
}
