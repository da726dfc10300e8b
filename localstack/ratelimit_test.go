package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/ops"
)

// Provider limits (docs/design.md "Rate budgets"): the mock enforces an
// RPM and a TPM per API key, as OpenAI and Anthropic do.

// pacedRuntime is a runtime at the shipped defaults (chunk size, tick) on
// the models of yaml.
func pacedRuntime(t *testing.T, yaml string, mock mockup.Options, tune ...func(*localrun.Options)) *localrun.Runtime {
	t.Helper()
	return runtime(t, append([]func(*localrun.Options){func(o *localrun.Options) {
		o.Env.ChunkRows = 0       // the shipped default
		o.TickEvery = time.Minute // as deployed
		o.MockOptions = mock
	}, withModels(t, yaml)}, tune...)...)
}

// waitLong waits for batch id to end, polling every 100 ms, for up to d.
func waitLong(t *testing.T, c openai.Client, id string, d time.Duration) *openai.Batch {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b := fetchBatch(t, c, id)
		if terminal[b.Status] {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s still %s (%+v) after %s", id, b.Status, b.RequestCounts, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRateLimitedBatchIsPaced runs a batch whose model could send 32 rows
// at once against a key the provider limits to 50 requests a second: every
// row completes, at most 1% of the upstream requests are answered 429, and
// the batch takes at most 1.15 times the paced ideal (rows ÷ limit).
//
// RELAY_PACED_ROWS runs another number of rows (10,000 as the issue has
// it takes 200 s at this limit).
func TestRateLimitedBatchIsPaced(t *testing.T) {
	t.Parallel()
	const rpm = 3000 // 50 requests a second
	rows := 2000
	if n, err := strconv.Atoi(os.Getenv("RELAY_PACED_ROWS")); err == nil && n > 0 {
		rows = n
	}
	rt := pacedRuntime(t, `
models:
  - {name: paced, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 32, timeout: 30s, rpm: 3000}
`, mockup.Options{RPM: rpm, RateWindow: 10 * time.Second, Latency: 20 * time.Millisecond, Record: true})
	c, _ := client(t, rt, "acme")
	in := nRows(rows, "paced")
	for i := range in {
		in[i].model = "paced"
	}
	f := upload(t, c, "in.jsonl", jsonlRows(in))
	ideal := time.Duration(float64(rows) / (rpm / 60.0) * float64(time.Second))
	start := time.Now()
	b := waitLong(t, c, createBatch(t, c, f.ID).ID, 5*time.Minute+2*ideal)
	wall := time.Since(start)
	st := rt.Mock.Stats()

	limited := st.ByStatus[429]
	share := float64(limited) / float64(st.Requests)
	t.Logf("%d rows at %d RPM: %s %+v; %d upstream requests, %d answered 429 (%.1f%%); wall %.1fs, %.2f× the paced ideal %.0fs",
		rows, rpm, b.Status, b.RequestCounts, st.Requests, limited, 100*share, wall.Seconds(), wall.Seconds()/ideal.Seconds(), ideal.Seconds())
	if b.Status != "completed" || b.RequestCounts.Completed != int64(rows) {
		t.Errorf("batch %s %+v: want every row completed", b.Status, b.RequestCounts)
	}
	if share > 0.01 {
		t.Errorf("%d of %d upstream requests were answered 429: want at most 1%%", limited, st.Requests)
	}
	// The wall time against the paced ideal is a figure (logged above; the
	// issue's closing note keeps it), not a check: a timing assertion fails
	// on a loaded machine for the load, not the pace.
	var first, last time.Time
	for _, r := range rt.Mock.Requests() {
		if first.IsZero() || r.Start.Before(first) {
			first = r.Start
		}
		if r.End.After(last) {
			last = r.End
		}
	}
	t.Logf("first request %s after create, last answer %s before the end", first.Sub(start), start.Add(wall).Sub(last))
}

// waitMock waits until the mock's stats satisfy cond, for up to a minute.
func waitMock(t *testing.T, rt *localrun.Runtime, what string, cond func(mockup.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond(rt.Mock.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("the mock never saw %s: %+v", what, rt.Mock.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRevokedKeyIsDroppedFromItsPool revokes one of a model's two keys
// mid-batch: the key is dropped after its first 401s, its rows move to the
// other key, and every row completes.
func TestRevokedKeyIsDroppedFromItsPool(t *testing.T) {
	t.Parallel()
	const rows = 600
	rt := pacedRuntime(t, `
models:
  - {name: pooled, provider: openai, base_url: http://MOCK/v1, api_key_envs: [RELAY_POOL_A, RELAY_POOL_B], max_concurrency: 16, timeout: 30s, rpm: 3000}
`, mockup.Options{RPM: 3000, RateWindow: 10 * time.Second, Latency: 20 * time.Millisecond})
	const keyA, keyB = "sk-relay-local-mock-RELAY_POOL_A", "sk-relay-local-mock-RELAY_POOL_B"
	c, _ := client(t, rt, "acme")
	in := nRows(rows, "pooled")
	for i := range in {
		in[i].model = "pooled"
	}
	id := createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(in)).ID).ID
	waitMock(t, rt, "both keys in use", func(s mockup.Stats) bool { return s.ByKey[keyA] >= 50 && s.ByKey[keyB] >= 50 })
	o := mockup.Options{RPM: 3000, RateWindow: 10 * time.Second, Latency: 20 * time.Millisecond, RevokedKeys: []string{keyA}}
	rt.Mock.SetOptions(o)
	revokedAt := rt.Mock.Stats().ByKey[keyA]
	b := waitLong(t, c, id, 3*time.Minute)
	st := rt.Mock.Stats()
	after := st.ByKey[keyA] - revokedAt
	t.Logf("key A: %d requests before the revocation, %d after (%d answered 401); key B: %d; batch %s %+v",
		revokedAt, after, st.ByStatus[401], st.ByKey[keyB], b.Status, b.RequestCounts)
	if b.Status != "completed" || b.RequestCounts.Completed != rows {
		t.Errorf("batch %s %+v: want every row completed on the other key", b.Status, b.RequestCounts)
	}
	// The requests in flight when it was revoked, and no more.
	if after > 16 {
		t.Errorf("%d requests on the revoked key after its revocation: want it dropped at its first 401", after)
	}
	// relay admin models reads the drop from the table.
	dropped, err := rt.App.Store.DroppedKeys(context.Background(), "pooled")
	if err != nil || len(dropped) != 1 || dropped["RELAY_POOL_A"].Status != 401 {
		t.Errorf("dropped keys in the table: %+v, %v; want RELAY_POOL_A (401)", dropped, err)
	}
}

// TestFailingUpstreamOpensItsCircuit fails every request to a model for
// 30 s mid-batch: its circuit opens after a few failures, so the upstream
// sees at most 20 requests in that time, and closes once it answers again;
// the batch completes.
func TestFailingUpstreamOpensItsCircuit(t *testing.T) {
	t.Parallel()
	const rows = 600
	ok := mockup.Options{RPM: 3000, RateWindow: 10 * time.Second, Latency: 20 * time.Millisecond}
	logs := &logBuffer{}
	rt := pacedRuntime(t, `
models:
  - {name: outage, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 16, timeout: 30s, rpm: 3000}
`, ok, func(o *localrun.Options) {
		o.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	c, _ := client(t, rt, "acme")
	in := nRows(rows, "outage")
	for i := range in {
		in[i].model = "outage"
	}
	id := createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(in)).ID).ID
	waitMock(t, rt, "the batch under way", func(s mockup.Stats) bool { return s.Requests >= 100 })
	down := ok
	down.ErrorRate = 1
	rt.Mock.SetOptions(down)
	before := rt.Mock.Stats().Requests
	time.Sleep(30 * time.Second) // the outage: its length is the scenario
	during := rt.Mock.Stats().Requests - before
	rt.Mock.SetOptions(ok)
	b := waitLong(t, c, id, 3*time.Minute)
	t.Logf("%d requests during the 30 s outage; batch %s %+v", during, b.Status, b.RequestCounts)
	if during > 20 {
		t.Errorf("%d requests to the failing upstream in 30 s: want at most 20 (an open circuit)", during)
	}
	// Its opening is a metric line, what the UpstreamCircuitOpen alarm sums.
	if !strings.Contains(logs.String(), `"CircuitsOpened":1`) || !strings.Contains(logs.String(), `"Model":"outage"`) {
		t.Error("no CircuitsOpened metric line for the model outage")
	}
	// Its probes are rows' attempts: a row can spend all of them on one.
	if b.Status != "completed" || b.RequestCounts.Completed < rows-5 {
		t.Errorf("batch %s %+v: want it completed once the upstream is back", b.Status, b.RequestCounts)
	}
}

// TestHalvedLimitIsFollowed halves the provider's limit mid-batch: the
// key's pace follows it down within seconds, so the batch completes with
// few 429s, in about the time the lower limit allows.
func TestHalvedLimitIsFollowed(t *testing.T) {
	t.Parallel()
	const rows = 1200
	full := mockup.Options{RPM: 3000, RateWindow: 10 * time.Second, Latency: 20 * time.Millisecond}
	rt := pacedRuntime(t, `
models:
  - {name: halved, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 32, timeout: 30s, rpm: 3000}
`, full)
	c, _ := client(t, rt, "acme")
	in := nRows(rows, "halved")
	for i := range in {
		in[i].model = "halved"
	}
	start := time.Now()
	id := createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(in)).ID).ID
	waitMock(t, rt, "300 rows at the full limit", func(s mockup.Stats) bool { return s.Requests >= 300 })
	half := full
	half.RPM = 1500
	rt.Mock.SetOptions(half)
	cut := time.Since(start)
	b := waitLong(t, c, id, 3*time.Minute)
	wall := time.Since(start)
	st := rt.Mock.Stats()
	share := float64(st.ByStatus[429]) / float64(st.Requests)
	// The rest at 25 a second.
	ideal := cut + time.Duration(float64(rows-300)/25*float64(time.Second))
	t.Logf("halved at %.1fs; %d requests, %d answered 429 (%.1f%%); wall %.1fs, %.2f× the paced ideal %.1fs; batch %s %+v",
		cut.Seconds(), st.Requests, st.ByStatus[429], 100*share, wall.Seconds(), wall.Seconds()/ideal.Seconds(), ideal.Seconds(), b.Status, b.RequestCounts)
	if b.Status != "completed" || b.RequestCounts.Completed != rows {
		t.Errorf("batch %s %+v: want every row completed", b.Status, b.RequestCounts)
	}
	if share > 0.02 {
		t.Errorf("%.1f%% of the requests answered 429 after the limit was halved: want the pace to follow it (at most 2%%)", 100*share)
	}
}

// TestTokenBudgetIsPaced runs rows against a key the provider limits by
// tokens only: their estimated cost paces them, their usage corrects it,
// and the batch completes with at most 1% of requests answered 429.
func TestTokenBudgetIsPaced(t *testing.T) {
	t.Parallel()
	const rows, tpm = 600, 60000 // 1,000 tokens a second; a row costs 20 at the mock
	rt := pacedRuntime(t, `
models:
  - {name: tokens, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 32, timeout: 30s, tpm: 60000}
`, mockup.Options{TPM: tpm, RateWindow: 10 * time.Second, Latency: 20 * time.Millisecond})
	c, _ := client(t, rt, "acme")
	var in bytes.Buffer
	for i := range rows {
		// Three words and one for the message, and max_tokens 16.
		fmt.Fprintf(&in, `{"custom_id":"r%04d","method":"POST","url":"/v1/chat/completions","body":{"model":"tokens","max_tokens":16,"messages":[{"role":"user","content":"tokens row %d"}]}}`+"\n", i, i)
	}
	start := time.Now()
	b := waitLong(t, c, createBatch(t, c, upload(t, c, "in.jsonl", in.Bytes()).ID).ID, 3*time.Minute)
	wall := time.Since(start)
	st := rt.Mock.Stats()
	share := float64(st.ByStatus[429]) / float64(st.Requests)
	ideal := time.Duration(float64(rows*20) / (tpm / 60.0) * float64(time.Second))
	t.Logf("%d rows at %d TPM: %d requests, %d answered 429 (%.1f%%); wall %.1fs, %.2f× the paced ideal %.0fs; batch %s %+v",
		rows, tpm, st.Requests, st.ByStatus[429], 100*share, wall.Seconds(), wall.Seconds()/ideal.Seconds(), ideal.Seconds(), b.Status, b.RequestCounts)
	if b.Status != "completed" || b.RequestCounts.Completed != rows {
		t.Errorf("batch %s %+v: want every row completed", b.Status, b.RequestCounts)
	}
	if share > 0.01 {
		t.Errorf("%.1f%% answered 429: want at most 1%%", 100*share)
	}
	// The first rows go at their estimate (body bytes / 4 + max_tokens,
	// about twice the mock's count here) until their usage corrects it; the
	// wall time against the ideal is a figure (logged above), not a check.
}

// TestLimiterStateIsShown runs a batch on a model of two keys that the
// provider limits below its configured rpm, and mid-batch revokes one key
// and halves its limit (429s while its window drains: the pace follows a
// stated limit, so a steady one draws none): the Operations API (what relay admin models and the panel
// read, internal/ops) shows the revoked key dropped with its 401, the
// other live, the 429s the keys answered in the last minute, the live
// key's adaptive concurrency limit, its pace below the configured rpm and
// its rpm in use: the executors publish their limiters' state to the table
// (docs/design.md "Rate budgets").
func TestLimiterStateIsShown(t *testing.T) {
	t.Parallel()
	const rows = 600
	limited := mockup.Options{RPM: 900, RateWindow: 10 * time.Second, Latency: 20 * time.Millisecond}
	rt := pacedRuntime(t, `
models:
  - {name: shown, provider: openai, base_url: http://MOCK/v1, api_key_envs: [RELAY_SHOWN_A, RELAY_SHOWN_B], max_concurrency: 16, timeout: 30s, rpm: 3000}
`, limited)
	const keyA = "sk-relay-local-mock-RELAY_SHOWN_A"
	c, _ := client(t, rt, "acme")
	admin, err := rt.Key(context.Background(), "acme", "admin")
	if err != nil {
		t.Fatal(err)
	}
	in := nRows(rows, "shown")
	for i := range in {
		in[i].model = "shown"
	}
	id := createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(in)).ID).ID
	waitMock(t, rt, "key A in use", func(s mockup.Stats) bool { return s.ByKey[keyA] >= 30 })
	revoked := limited
	revoked.RevokedKeys, revoked.RPM = []string{keyA}, limited.RPM/2
	rt.Mock.SetOptions(revoked)

	var keys map[string]ops.KeyReport
	deadline := time.Now().Add(time.Minute)
	for {
		status, body := rawDo(t, rt, admin, "GET", "/v1/admin/operations", nil)
		var o ops.Overview
		if status != 200 || json.Unmarshal(body, &o) != nil {
			t.Fatalf("GET /v1/admin/operations: %d %s", status, body)
		}
		keys = map[string]ops.KeyReport{}
		for _, m := range o.Models {
			if m.Model == "shown" {
				for _, k := range m.Keys {
					keys[k.Env] = k
				}
			}
		}
		a, b := keys["RELAY_SHOWN_A"], keys["RELAY_SHOWN_B"]
		if a.State == "dropped" && a.Status == 401 && b.State == "live" && b.Executors == 1 && a.Limited+b.Limited > 0 &&
			b.Concurrency >= 1 && b.Concurrency <= 16 && b.PaceRPM > 0 && b.PaceRPM < 3000 && b.RPM == 3000 && b.RPMInUse > 0 && b.Circuit == "closed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys of shown: %+v; want A dropped (401), B live, the keys' 429s in the last minute, B's concurrency limit, its pace below 3000 and its rpm in use", keys)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("keys of shown: %+v", keys)
	b := waitLong(t, c, id, 3*time.Minute)
	if b.Status != "completed" || b.RequestCounts.Completed != rows {
		t.Errorf("batch %s %+v: want every row completed on the live key", b.Status, b.RequestCounts)
	}
}
