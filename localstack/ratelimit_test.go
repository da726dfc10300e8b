package localstack

import (
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/mockup"
)

// Provider limits (docs/design.md "Rate budgets"): the mock enforces an
// RPM and a TPM per API key, as OpenAI and Anthropic do.

// pacedRuntime is a runtime at the shipped defaults (chunk size, tick) on
// the models of yaml.
func pacedRuntime(t *testing.T, yaml string, mock mockup.Options) *localrun.Runtime {
	t.Helper()
	return runtime(t, func(o *localrun.Options) {
		o.Env.ChunkRows = 0       // the shipped default
		o.TickEvery = time.Minute // as deployed
		o.MockOptions = mock
	}, withModels(t, yaml))
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
func TestRateLimitedBatchIsPaced(t *testing.T) {
	t.Parallel()
	const rows, rpm = 2000, 3000 // 50 requests a second
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
	start := time.Now()
	b := waitLong(t, c, createBatch(t, c, f.ID).ID, 5*time.Minute)
	wall := time.Since(start)
	st := rt.Mock.Stats()
	ideal := time.Duration(float64(rows) / (rpm / 60.0) * float64(time.Second))
	limited := st.ByStatus[429]
	share := float64(limited) / float64(st.Requests)
	t.Logf("%d rows at %d RPM: %s %+v; %d upstream requests, %d answered 429 (%.1f%%); wall %.1fs, %.2f× the paced ideal %.0fs",
		rows, rpm, b.Status, b.RequestCounts, st.Requests, limited, 100*share, wall.Seconds(), wall.Seconds()/ideal.Seconds(), ideal.Seconds())
	if b.Status != "completed" || b.RequestCounts.Completed != rows {
		t.Errorf("batch %s %+v: want every row completed", b.Status, b.RequestCounts)
	}
	if share > 0.01 {
		t.Errorf("%d of %d upstream requests were answered 429: want at most 1%%", limited, st.Requests)
	}
	if wall > ideal*115/100 {
		t.Errorf("wall %s: want at most 1.15 × %s", wall, ideal)
	}
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
