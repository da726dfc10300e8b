package localstack

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/localrun"
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
	rt := runtime(t, func(o *localrun.Options) {
		models, err := config.ParseModels([]byte(replaceMock(fallbackModels, o.MockAddr)))
		if err != nil {
			t.Fatal(err)
		}
		o.Models = models
	})
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
