package localstack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/metrics"
)

// The metric lines the functions log for a batch (internal/metrics, read by
// CloudWatch from the logs) add up to its counts: rows completed and failed
// per model, fallbacks, upstream 4xx, a latency per row sent, and the
// tenant's rows; and a chunk duration per chunk the executor committed,
// under its function and model.
func TestMetricLinesSumToTheBatch(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	rt := runtime(t, func(o *localrun.Options) {
		o.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	c, _ := client(t, rt, "acme")
	rows := nRows(12, "fine")
	for i := range 3 {
		rows = append(rows, row{id: fmt.Sprintf("bad%d", i), content: fmt.Sprintf("refused %d [[mock:400]]", i)})
	}
	for i := range 5 {
		rows = append(rows, row{id: fmt.Sprintf("fb%d", i), content: fmt.Sprintf("falls back %d", i), model: "flaky-broken"})
	}
	start := time.Now()
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "m.jsonl", jsonlRows(rows)).ID).ID)
	if b.RequestCounts.Completed != 17 || b.RequestCounts.Failed != 3 {
		t.Fatalf("batch %s counts %+v, want 17 completed, 3 failed", b.Status, b.RequestCounts)
	}
	sum := map[string]float64{}
	var latencies int
	durations := map[string]int{} // per model
	for _, l := range strings.Split(logs.String(), "\n") {
		var f map[string]any
		if json.Unmarshal([]byte(l), &f) != nil || f["_aws"] == nil || f["batch_id"] != b.ID {
			continue
		}
		if d, ok := f[metrics.ChunkDuration].(float64); ok {
			if f[metrics.Function] != "executor" || d < 0 || d > float64(time.Since(start).Milliseconds()) {
				t.Errorf("chunk duration line %v: want the executor's, within the batch's time", f)
			}
			durations[f[metrics.Model].(string)]++
			t.Logf("chunk duration %s: %v ms", f[metrics.Model], d)
		}
		for _, name := range append(metrics.ModelNames, metrics.TenantRows) {
			switch v := f[name].(type) {
			case float64:
				sum[name] += v
			case []any:
				latencies += len(v)
			}
		}
	}
	want := map[string]float64{metrics.RowsCompleted: 17, metrics.RowsFailed: 3, metrics.Fallbacks: 5, metrics.Upstream4xx: 3, metrics.TenantRows: 20}
	for name, w := range want {
		if sum[name] != w {
			t.Errorf("%s: lines add up to %v, want %v", name, sum[name], w)
		}
	}
	if latencies != len(rows) {
		t.Errorf("%d latencies, want one per row sent (%d)", latencies, len(rows))
	}
	chunks, err := rt.App.Store.Chunks(context.Background(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string]int{}
	for _, ch := range chunks {
		committed[ch.Model]++
	}
	if fmt.Sprint(durations) != fmt.Sprint(committed) {
		t.Errorf("chunk durations per model %v, want one per committed chunk %v", durations, committed)
	}
}
