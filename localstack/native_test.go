package localstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/respjson"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/native"
)

// nativeModels adds batch: native models to testModels: the same upstream
// model as gpt-4o-mini and claude-haiku-4-5, so their answers are the
// direct batches' answers.
const nativeModels = `
  - {name: gpt-native, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, upstream_model: gpt-4o-mini, fallback: gpt-4o-mini-backup, max_concurrency: 8, timeout: 5s, batch: native}
  - {name: claude-native, provider: anthropic, base_url: http://MOCK, api_key_env: RELAY_TEST_KEY, upstream_model: claude-haiku-4-5, max_concurrency: 8, batch: native}
`

// nativeRuntime is a runtime with the native models, quick polls, provider
// batches that end after delay, and tune's changes to the native service.
func nativeRuntime(t *testing.T, delay time.Duration, tune func(*native.Service), more ...func(*localrun.Options)) *localrun.Runtime {
	t.Helper()
	opts := append([]func(*localrun.Options){func(o *localrun.Options) {
		ms, err := config.ParseModels([]byte(replaceMock(testModels+nativeModels, o.MockAddr)))
		if err != nil {
			t.Fatal(err)
		}
		o.Models = ms
		o.Env.ChunkRows = 50
		o.Wire = func(a *app.App) {
			a.Native.PollMin, a.Native.PollMax = 300*time.Millisecond, time.Second
			if tune != nil {
				tune(a.Native)
			}
		}
	}}, more...)
	rt := runtime(t, opts...)
	rt.Mock.SetOptions(mockup.Options{BatchDelay: delay})
	return rt
}

func modelRows(rows []row, model string) []row {
	out := make([]row, len(rows))
	for i, r := range rows {
		r.model = model
		out[i] = r
	}
	return out
}

// sameLine strips what differs between runs of one row (its line id and
// the request id) and returns the rest as JSON.
func sameLine(l resultLine) string {
	l.ID = ""
	if l.Response != nil {
		r := *l.Response
		r.RequestID = ""
		l.Response = &r
	}
	b, _ := json.Marshal(l)
	return string(b)
}

func batchExecution(t *testing.T, rt *localrun.Runtime, key, id string) string {
	t.Helper()
	var b struct {
		Execution string `json:"execution"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+id), &b)
	return b.Execution
}

func fmtCost(c *float64) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("$%.4f", *c)
}

// TestNativeStartsDirectForCompleteBy: a native model whose provider
// batches take a minute (its batch_turnaround, as the mock's delay) cannot
// meet a complete_by 20 s away: its quote says native takes that minute,
// and the batch's rows start directly, with no provider batch, and end by
// then (docs/api.md "Extensions").
func TestNativeStartsDirectForCompleteBy(t *testing.T) {
	t.Parallel()
	rt := nativeRuntime(t, time.Minute, nil, withModels(t, testModels+strings.Replace(nativeModels, "batch: native}", "batch: native, batch_turnaround: 1m}", 1)))
	c, key := client(t, rt, "deadline")
	rows := modelRows(nRows(40, "soon"), "gpt-native")
	f := upload(t, c, "soon.jsonl", jsonlRows(rows))
	by := time.Now().Add(20 * time.Second).Unix()
	status, q, resp := postQuote(t, rt, key, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h", "complete_by": by})
	if status != 200 || q.Modes.Native.DurationSeconds == nil || *q.Modes.Native.DurationSeconds != 60 {
		t.Fatalf("quote: %d %s, want native's duration_seconds 60", status, resp)
	}
	b := waitBatch(t, c, createBatch(t, c, f.ID, option.WithJSONSet("complete_by", by)).ID)
	if out, errs := checkInvariant(t, c, b, idsOf(rows)); b.Status != "completed" || len(out) != 40 || len(errs) != 0 {
		t.Fatalf("batch: %s, %d rows done, %d failed", b.Status, len(out), len(errs))
	}
	if b.CompletedAt > by {
		t.Fatalf("completed at %d, %d s after its complete_by %d", b.CompletedAt, b.CompletedAt-by, by)
	}
	if st := rt.Mock.Stats(); st.BatchesCreated != 0 || st.Requests != 40 {
		t.Fatalf("mock: %d provider batches, %d direct requests; want none and the 40 rows", st.BatchesCreated, st.Requests)
	}
	if got := batchExecution(t, rt, key, b.ID); got != "direct" {
		t.Fatalf("execution %q, want direct", got)
	}
}

// batchCost is batch id's cost and modes extensions (docs/api.md
// "Extensions").
func batchCost(t *testing.T, rt *localrun.Runtime, key, id string) (*float64, *batch.Modes) {
	t.Helper()
	var b struct {
		Cost  *float64     `json:"cost"`
		Modes *batch.Modes `json:"modes"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+id), &b)
	return b.Cost, b.Modes
}

func TestNativeOpenAIBatchMatchesDirect(t *testing.T) {
	t.Parallel()
	rt := nativeRuntime(t, time.Second, func(s *native.Service) {
		// Three provider batches, to split the way the providers' limits do.
		s.Limits = map[config.Provider]native.Limit{config.OpenAI: {Rows: 400, Bytes: 1 << 30}}
	})
	c, key := client(t, rt, "acme")
	rows := nRows(1000, "native")

	direct := waitBatch(t, c, createBatch(t, c, upload(t, c, "direct.jsonl", jsonlRows(rows)).ID).ID)
	directOut, _ := checkInvariant(t, c, direct, idsOf(rows))
	rt.Mock.Reset()

	b := createBatch(t, c, upload(t, c, "native.jsonl", jsonlRows(modelRows(rows, "gpt-native"))).ID)
	b = waitBatch(t, c, b.ID)
	if b.Status != "completed" {
		t.Fatalf("native batch: status %s, counts %+v", b.Status, b.RequestCounts)
	}
	out, errs := checkInvariant(t, c, b, idsOf(rows))
	if len(errs) != 0 {
		t.Fatalf("native batch: %d error lines", len(errs))
	}
	for id, l := range out {
		if got, want := sameLine(l), sameLine(directOut[id]); got != want {
			t.Fatalf("row %s: native line %s, direct line %s", id, got, want)
		}
	}
	if !reflect.DeepEqual(b.Usage, direct.Usage) && b.Usage.TotalTokens != direct.Usage.TotalTokens {
		t.Fatalf("usage: native %+v, direct %+v", b.Usage, direct.Usage)
	}
	st := rt.Mock.Stats()
	if st.Requests != 0 || st.BatchRows["gpt-4o-mini"] != 1000 || st.BatchesCreated != 3 || st.BatchCancels != 0 {
		t.Fatalf("mock: %d direct requests, %v rows in %d provider batches, %d cancels; want 0, 1000 in 3, 0",
			st.Requests, st.BatchRows, st.BatchesCreated, st.BatchCancels)
	}
	if got := batchExecution(t, rt, key, b.ID); got != "native" {
		t.Fatalf("execution: got %q, want native", got)
	}
	if got := batchExecution(t, rt, key, direct.ID); got != "direct" {
		t.Fatalf("direct batch's execution: got %q", got)
	}
}

func TestNativeExpiredRowsRunDirectly(t *testing.T) {
	t.Parallel()
	rt := nativeRuntime(t, time.Second, nil)
	c, key := client(t, rt, "acme")
	rows := modelRows(nRows(200, "half"), "gpt-native")
	for i := range rows {
		if i%2 == 0 {
			rows[i].content += " [[mock:batch_expire]]"
		}
	}
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s, counts %+v", b.Status, b.RequestCounts)
	}
	if _, errs := checkInvariant(t, c, b, idsOf(rows)); len(errs) != 0 {
		t.Fatalf("%d error lines", len(errs))
	}
	st := rt.Mock.Stats()
	// Every row ran once: half in the provider batch, the expired half directly.
	if st.BatchRows["gpt-4o-mini"] != 100 || st.ByModel["gpt-4o-mini"] != 100 || st.Requests != 100 {
		t.Fatalf("mock: %v rows in the provider batch, %v direct; want 100 and 100", st.BatchRows, st.ByModel)
	}
	if got := batchExecution(t, rt, key, b.ID); got != "hybrid" {
		t.Fatalf("execution: got %q, want hybrid", got)
	}
}

func TestNativeCancelCancelsProviderBatch(t *testing.T) {
	t.Parallel()
	rt := nativeRuntime(t, time.Hour, nil)
	c, _ := client(t, rt, "acme")
	rows := modelRows(nRows(100, "cancel"), "gpt-native")
	b := createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID)
	waitFor(t, "provider batch created", func() bool { return rt.Mock.Stats().BatchesCreated == 1 })
	if _, err := c.Batches.Cancel(context.Background(), b.ID); err != nil {
		t.Fatal(err)
	}
	b = waitBatch(t, c, b.ID)
	if b.Status != "cancelled" {
		t.Fatalf("status %s", b.Status)
	}
	_, errs := checkInvariant(t, c, b, idsOf(rows))
	for id, l := range errs {
		if l.Error == nil || l.Error.Code != "batch_cancelled" {
			t.Fatalf("row %s: got %+v, want batch_cancelled", id, l)
		}
	}
	waitFor(t, "provider cancel", func() bool { return rt.Mock.Stats().BatchCancels == 1 })
	if st := rt.Mock.Stats(); st.Requests != 0 || len(st.BatchRows) != 0 {
		t.Fatalf("mock ran rows: %d direct, %v in batches", st.Requests, st.BatchRows)
	}
}

// A submit that dies between creating the provider batch and recording
// it: its retry finds the orphan by its metadata and cancels it, and the
// results come from the one batch it records.
func TestNativeOrphanAfterCrashIsCancelled(t *testing.T) {
	t.Parallel()
	var crashes atomic.Int32
	rt := nativeRuntime(t, 30*time.Second, func(s *native.Service) {
		s.AfterCreate = func(g batch.Group, id string) error {
			if crashes.Add(1) == 1 {
				return errors.New("crash after creating " + id)
			}
			return nil
		}
	}, func(o *localrun.Options) { queueTimes(o, "work", 10*time.Second, 10*time.Second) })
	c, _ := client(t, rt, "acme")
	rows := modelRows(nRows(300, "orphan"), "gpt-native")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s, counts %+v", b.Status, b.RequestCounts)
	}
	if _, errs := checkInvariant(t, c, b, idsOf(rows)); len(errs) != 0 {
		t.Fatalf("%d error lines", len(errs))
	}
	st := rt.Mock.Stats()
	// The recorded batch answered all 300 rows; the orphan, those it had
	// finished before its cancel, which the import never reads.
	if st.BatchesCreated != 2 || st.BatchCancels != 1 || st.BatchRows["gpt-4o-mini"] < 300 || st.Requests != 0 {
		t.Fatalf("mock: %d provider batches, %d cancels, %v rows, %d direct; want 2, 1, 300 from one and the orphan's, 0",
			st.BatchesCreated, st.BatchCancels, st.BatchRows, st.Requests)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after a minute", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var (
	_ = maps.Keys[map[string]int]
	_ = fmt.Sprint
	_ = openai.BatchStatus("")
)

func TestNativeMessageBatchMatchesDirect(t *testing.T) {
	t.Parallel()
	rt := nativeRuntime(t, time.Second, nil)
	c, key := anthropicClient(t, rt, "acme")
	const n = 1000
	ids := make([]string, n)
	direct, nat := make([]anthropic.MessageBatchNewParamsRequest, n), make([]anthropic.MessageBatchNewParamsRequest, n)
	for i := range n {
		ids[i] = fmt.Sprintf("q%04d", i)
		direct[i] = msgRequest(ids[i], "claude-haiku-4-5", fmt.Sprintf("hello %d", i))
		nat[i] = msgRequest(ids[i], "claude-native", fmt.Sprintf("hello %d", i))
	}
	db := waitEnded(t, c, newMessageBatch(t, c, direct...).ID)
	want := messageResults(t, c, db, ids)
	rt.Mock.Reset()

	nb := waitEnded(t, c, newMessageBatch(t, c, nat...).ID)
	got := messageResults(t, c, nb, ids)
	if nb.RequestCounts.Succeeded != n {
		t.Fatalf("native message batch: counts %s", nb.RequestCounts.RawJSON())
	}
	for _, id := range ids {
		if g, w := got[id].RawJSON(), want[id].RawJSON(); g != w {
			t.Fatalf("request %s: native result %s, direct %s", id, g, w)
		}
	}
	st := rt.Mock.Stats()
	if st.Requests != 0 || st.BatchRows["claude-haiku-4-5"] != n || st.BatchesCreated != 1 {
		t.Fatalf("mock: %d direct requests, %v rows in %d provider batches; want 0, %d in 1", st.Requests, st.BatchRows, st.BatchesCreated, n)
	}
	if got := batchExecution(t, rt, key, nb.ID); got != "native" {
		t.Fatalf("execution: got %q, want native", got)
	}
}

// The same crash for a message batch, which has no metadata: the orphan
// is found on the listing and cancelled, and some of its requests expire
// in the recorded one and run directly.
func TestNativeMessageBatchOrphanAndExpiry(t *testing.T) {
	t.Parallel()
	var crashes atomic.Int32
	rt := nativeRuntime(t, 30*time.Second, func(s *native.Service) {
		s.AfterCreate = func(g batch.Group, id string) error {
			if crashes.Add(1) == 1 {
				return errors.New("crash after creating " + id)
			}
			return nil
		}
	}, func(o *localrun.Options) { queueTimes(o, "work", 10*time.Second, 10*time.Second) })
	c, _ := anthropicClient(t, rt, "acme")
	const n = 100
	ids := make([]string, n)
	reqs := make([]anthropic.MessageBatchNewParamsRequest, n)
	for i := range n {
		ids[i] = fmt.Sprintf("q%04d", i)
		text := fmt.Sprintf("hello %d", i)
		if i%4 == 0 {
			text += " [[mock:batch_expire]]"
		}
		reqs[i] = msgRequest(ids[i], "claude-native", text)
	}
	b := waitEnded(t, c, newMessageBatch(t, c, reqs...).ID)
	messageResults(t, c, b, ids)
	if b.RequestCounts.Succeeded != n {
		t.Fatalf("counts %s", b.RequestCounts.RawJSON())
	}
	st := rt.Mock.Stats()
	// The recorded batch answered the 75 rows that do not expire; the
	// orphan, those it had finished before its cancel.
	if st.BatchesCreated != 2 || st.BatchCancels != 1 || st.BatchRows["claude-haiku-4-5"] < 3*n/4 || st.Requests != n/4 {
		t.Fatalf("mock: %d provider batches, %d cancels, %v rows in them, %d direct; want 2, 1, at least %d, %d",
			st.BatchesCreated, st.BatchCancels, st.BatchRows, st.Requests, 3*n/4, n/4)
	}
}

// A group whose submit fails on every receive goes to the work DLQ: its
// rows are dead-lettered like a chunk's out of attempts, and the provider
// batches its attempts left behind are cancelled.
func TestNativeSubmitOutOfAttemptsIsDeadLettered(t *testing.T) {
	t.Parallel()
	rt := nativeRuntime(t, time.Minute, func(s *native.Service) {
		s.AfterCreate = func(g batch.Group, id string) error { return errors.New("crash after creating " + id) }
	}, func(o *localrun.Options) { queueTimes(o, "work", 3*time.Second, 3*time.Second) })
	c, key := client(t, rt, "acme")
	rows := modelRows(nRows(30, "dead"), "gpt-native")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	_, errs := checkInvariant(t, c, b, idsOf(rows))
	for id, l := range errs {
		if l.Error == nil || l.Error.Code != "dead_letter" {
			t.Fatalf("row %s: got %+v, want dead_letter", id, l)
		}
	}
	var dl struct {
		Data []json.RawMessage `json:"data"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+b.ID+"/dead_letters"), &dl)
	if len(dl.Data) != len(rows) {
		t.Fatalf("dead letters: got %d, want %d", len(dl.Data), len(rows))
	}
	waitFor(t, "every provider batch cancelled", func() bool {
		st := rt.Mock.Stats()
		return st.BatchesCreated == 3 && st.BatchCancels == 3
	})
}

// A native message batch with a request refused at create (a model that
// is not configured) and one naming a model of the other shape: those two
// end errored without an upstream call or a provider batch row, in a chunk
// of their own that no provider batch takes, and the others run natively.
func TestNativeMessageBatchWithRefusedRows(t *testing.T) {
	t.Parallel()
	rt := nativeRuntime(t, time.Second, nil)
	c, _ := anthropicClient(t, rt, "acme")
	b := waitEnded(t, c, newMessageBatch(t, c,
		msgRequest("ok-1", "claude-native", "hello one"),
		msgRequest("unknown-1", "no-such-model", "hello"),
		msgRequest("cross-1", "gpt-native", "an openai model"),
		msgRequest("ok-2", "claude-native", "hello two"),
	).ID)
	if rc := b.RequestCounts; rc.Succeeded != 2 || rc.Errored != 2 {
		t.Fatalf("request_counts %s, want 2 succeeded and 2 errored", rc.RawJSON())
	}
	got := messageResults(t, c, b, []string{"ok-1", "unknown-1", "cross-1", "ok-2"})
	for _, id := range []string{"unknown-1", "cross-1"} {
		if got[id].Result.Type != "errored" {
			t.Errorf("%s: %s, want errored", id, got[id].RawJSON())
		}
	}
	if st := rt.Mock.Stats(); st.Requests != 0 || st.BatchRows["claude-haiku-4-5"] != 2 || st.BatchRows["gpt-4o-mini"] != 0 {
		t.Fatalf("mock: %d direct requests, provider batch rows %v; want 0 and 2 of claude", st.Requests, st.BatchRows)
	}
}

// TestNativeMessageBatchModes: a message batch carries the Batch object's
// cost and modes extensions (docs/api.md "Anthropic Message Batches"), on
// its get and in its list: here every request answered by the provider's
// batch API at the native price.
func TestNativeMessageBatchModes(t *testing.T) {
	t.Parallel()
	priced := strings.Replace(nativeModels, "claude-haiku-4-5, max_concurrency: 8, batch: native}",
		"claude-haiku-4-5, max_concurrency: 8, batch: native, price: {input_per_mtok: 100000, output_per_mtok: 300000}}", 1)
	rt := nativeRuntime(t, time.Second, nil, withModels(t, testModels+priced))
	c, _ := anthropicClient(t, rt, "acme")
	const n = 10
	reqs := make([]anthropic.MessageBatchNewParamsRequest, n)
	for i := range reqs {
		reqs[i] = msgRequest(fmt.Sprintf("m%d", i), "claude-native", fmt.Sprintf("hello %d", i))
	}
	b := waitEnded(t, c, newMessageBatch(t, c, reqs...).ID)
	page, err := c.Messages.Batches.List(context.Background(), anthropic.MessageBatchListParams{})
	if err != nil || len(page.Data) != 1 {
		t.Fatalf("list: %v, %d message batches", err, len(page.Data))
	}
	for what, extra := range map[string]map[string]respjson.Field{"get": b.JSON.ExtraFields, "list": page.Data[0].JSON.ExtraFields} {
		var cost float64
		var modes batch.Modes
		if err := json.Unmarshal([]byte(extra["cost"].Raw()), &cost); err != nil {
			t.Fatalf("%s: cost %q: %v", what, extra["cost"].Raw(), err)
		}
		if err := json.Unmarshal([]byte(extra["modes"].Raw()), &modes); err != nil {
			t.Fatalf("%s: modes %q: %v", what, extra["modes"].Raw(), err)
		}
		if cost <= 0 || modes.Native.Rows != n || modes.Direct != (batch.ModeUse{}) || modes.Fallback != (batch.ModeUse{}) || math.Abs(modes.Native.Cost-cost) > 1e-6 {
			t.Fatalf("%s: cost $%g, modes %+v; want %d native rows costing it all", what, cost, modes, n)
		}
	}
}

// TestNativeMeetsCompleteBy: a batch on a native model whose provider
// batch would end a minute later (the mock's batch delay) than its
// complete_by, 20 s away, ends by then: the provider batch is cancelled
// once the rows' direct run (their quote's duration, 40 rows on 8 slots at
// the default 2 s) would no longer fit before it, the rows it had finished
// are kept at the native price, and only the others run directly
// (docs/api.md "Extensions"): the batch costs less than the same rows run
// directly, within its max_cost, and says so by mode.
func TestNativeMeetsCompleteBy(t *testing.T) {
	t.Parallel()
	price := config.Price{InputPerMTok: 100_000, OutputPerMTok: 300_000}
	rt := nativeRuntime(t, time.Minute, nil, withModels(t, testModels+strings.Replace(nativeModels, "batch: native}",
		fmt.Sprintf("batch: native, price: {input_per_mtok: %g, output_per_mtok: %g}}", price.InputPerMTok, price.OutputPerMTok), 1)))
	c, key := client(t, rt, "deadline")
	rows := modelRows(nRows(40, "deadline"), "gpt-native")
	by := time.Now().Add(20 * time.Second).Unix()
	// The ceiling is the rows' all-direct cost (40 rows of 3 input and 3
	// output tokens at the mock): moving rows to direct never passes it.
	ceiling := 40 * price.USD(3, 3)
	b := createBatch(t, c, upload(t, c, "deadline.jsonl", jsonlRows(rows)).ID, option.WithJSONSet("complete_by", by), option.WithJSONSet("max_cost", ceiling))
	b = waitBatch(t, c, b.ID)
	out, errs := checkInvariant(t, c, b, idsOf(rows))
	if b.Status != "completed" || len(out) != 40 || len(errs) != 0 {
		t.Fatalf("batch: %s, %d rows done, %d failed", b.Status, len(out), len(errs))
	}
	if b.CompletedAt > by {
		t.Fatalf("completed at %d, %d s after its complete_by %d", b.CompletedAt, b.CompletedAt-by, by)
	}
	st := rt.Mock.Stats()
	native := st.BatchRows["gpt-4o-mini"]
	if st.BatchesCreated != 1 || st.BatchCancels != 1 || native == 0 || native+st.Requests != 40 {
		t.Fatalf("mock: %d provider batches, %d cancels, %d rows answered there, %d direct requests; want 1, 1 and the 40 rows between them",
			st.BatchesCreated, st.BatchCancels, native, st.Requests)
	}
	if got := batchExecution(t, rt, key, b.ID); got != "hybrid" {
		t.Fatalf("execution %q, want hybrid", got)
	}
	allDirect := price.USD(b.Usage.InputTokens, b.Usage.OutputTokens)
	cost, modes := batchCost(t, rt, key, b.ID)
	if cost == nil || *cost >= allDirect || *cost > ceiling {
		t.Fatalf("cost %s, want less than the rows' all-direct cost $%.4f", fmtCost(cost), allDirect)
	}
	// The batch says which mode ran how many rows and what they cost.
	if modes == nil || modes.Native.Rows != native || modes.Direct.Rows != st.Requests || modes.Fallback.Rows != 0 ||
		math.Abs(modes.Native.Cost+modes.Direct.Cost-*cost) > 1e-6 || modes.Native.Cost >= modes.Direct.Cost {
		t.Fatalf("modes %+v, want %d native and %d direct rows adding up to the cost $%.4f", modes, native, st.Requests, *cost)
	}
	t.Logf("completed %d s before its complete_by; %d rows native, %d direct; cost $%.4f, all-direct $%.4f", by-b.CompletedAt, native, st.Requests, *cost, allDirect)

	// complete_by is a time to come, within the window.
	for _, at := range []int64{time.Now().Add(-time.Minute).Unix(), time.Now().Add(25 * time.Hour).Unix()} {
		body := fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","complete_by":%d}`, b.InputFileID, at)
		if status, resp := rawDo(t, rt, key, "POST", "/v1/batches", strings.NewReader(body)); status != 400 || !strings.Contains(string(resp), "complete_by") {
			t.Errorf("complete_by %d: %d %s, want 400 naming complete_by", at, status, resp)
		}
	}
}

// TestNativeGroupAdmissionCountsEveryChunk: 150 rows of a native model in
// one provider batch of three chunks, each row at most $1.2 direct and
// $0.6 native, with max_cost $75: the group is admitted at the native most
// of all its rows ($90), does not fit, and its rows end cost_limit_reached
// (rows that run directly instead are admitted chunk by chunk). Before, the group was admitted on its first chunk's
// rows alone and the provider batch ran all 150: $90.
func TestNativeGroupAdmissionCountsEveryChunk(t *testing.T) {
	t.Parallel()
	rt := nativeRuntime(t, time.Second, nil, withModels(t, testModels+strings.Replace(nativeModels, "batch: native}",
		"batch: native, tokenizer: words, price: {input_per_mtok: 100000, output_per_mtok: 300000}}", 1)))
	c, key := client(t, rt, "nativeceiling")
	data, ids := costRows(150, "gpt-native", "")
	const ceiling = 75.0
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "nativeceiling.jsonl", data.Bytes()).ID, option.WithJSONSet("max_cost", ceiling)).ID)
	out, errs := checkInvariant(t, c, b, ids)
	cost, _ := batchCost(t, rt, key, b.ID)
	refused := codesOf(errs)["cost_limit_reached"]
	if refused == 0 || len(out)+refused != 150 || (cost != nil && *cost > ceiling) {
		t.Fatalf("cost %s of max_cost $%v: %d rows done, error codes %v; want within it, the rest cost_limit_reached", fmtCost(cost), ceiling, len(out), codesOf(errs))
	}
	t.Logf("cost %s of max_cost $%v: %d rows done, %d cost_limit_reached", fmtCost(cost), ceiling, len(out), refused)
}
