package localstack

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// countingTransport counts the AWS requests the service makes.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// BenchmarkBatch runs batches of 1,000 rows end to end through the local
// runtime (emulator, real handlers, mock provider) and reports rows/s and
// the AWS requests made per 1,000 rows: per-row storage would show up here.
func BenchmarkBatch(b *testing.B) {
	const rows = 1000
	ctx := context.Background()
	mockAddr := freeAddr(b)
	models, err := config.ParseModels([]byte(replaceMock(testModels, mockAddr)))
	if err != nil {
		b.Fatal(err)
	}
	ct := &countingTransport{next: http.DefaultTransport}
	cfg := emutest.Config(b)
	cfg.HTTPClient = &http.Client{Transport: ct}
	prefix := fmt.Sprintf("bench%d", time.Now().UnixNano())
	rt, err := localrun.Start(ctx, localrun.Options{
		Env:    config.Env{Prefix: prefix, Table: prefix, Bucket: prefix + "-data", ChunkRows: 100, S3PathStyle: true},
		Models: models, AWS: cfg, Addr: "127.0.0.1:0", MockAddr: mockAddr, TickEvery: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	c, _ := client(b, rt, "bench")
	data := jsonlRows(nRows(rows, "bench"))
	b.ResetTimer()
	var awsReqs int64
	start := time.Now()
	for range b.N {
		f := upload(b, c, "bench.jsonl", data)
		before := ct.n.Load()
		bt := waitBatch(b, c, createBatch(b, c, f.ID).ID)
		awsReqs += ct.n.Load() - before
		if bt.Status != "completed" || bt.RequestCounts.Completed != rows {
			b.Fatalf("batch %s: %s %+v", bt.ID, bt.Status, bt.RequestCounts)
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(rows*b.N)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(awsReqs)/float64(b.N), "aws-requests/1k-rows")
}
