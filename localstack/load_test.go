//go:build loadtest

package localstack

// `make loadtest`: many tenants submit and poll at once against one local
// runtime over loopback, with the official OpenAI client; the run is
// bounded in rows and time and prints requests/s of the API, latencies of
// create and get, rows/s end to end and AWS requests per 1,000 rows, and
// fails if any batch breaks the accounting invariant.
//
// Knobs (environment): LOADTEST_TENANTS (8), LOADTEST_BATCHES per tenant
// (5), LOADTEST_ROWS per batch (50), LOADTEST_POLL_MS between gets of one
// batch (2000), LOADTEST_CHUNK_ROWS (25).

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// loadModels is one model on the mock, with room for every executor.
const loadModels = `
models:
  - {name: gpt-4o-mini, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 64, timeout: 10s}
`

// loadBudget bounds the submit-and-poll phase; `make loadtest` must end
// within 3 minutes, checks and start-up included.
const loadBudget = 150 * time.Second

func TestLoad(t *testing.T) {
	var (
		nTenants  = envInt(t, "LOADTEST_TENANTS", 8, 1)
		perTenant = envInt(t, "LOADTEST_BATCHES", 5, 1)
		nRows     = envInt(t, "LOADTEST_ROWS", 50, 1)
		pollEvery = time.Duration(envInt(t, "LOADTEST_POLL_MS", 2000, 1)) * time.Millisecond
		chunkRows = envInt(t, "LOADTEST_CHUNK_ROWS", 25, 1)
	)
	ctx := context.Background()
	cfg, awsReqs := countAWS(emutest.Config(t))
	mockAddr := freeAddr(t)
	models, err := config.ParseModels([]byte(replaceMock(loadModels, mockAddr)))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("load%d", time.Now().UnixNano())
	rt, err := localrun.Start(ctx, localrun.Options{
		Env:    config.Env{Prefix: prefix, Table: prefix, Bucket: prefix + "-data", ChunkRows: chunkRows, S3PathStyle: true},
		Models: models, AWS: cfg, Addr: "127.0.0.1:0", MockAddr: mockAddr, TickEvery: 30 * time.Second, ExecutorConcurrency: 8,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()

	api, lat := newAPICounter(), newLatencies()
	tenants := newTenants(t, ctx, rt, "load-tenant", nTenants, perTenant, api)

	// Every batch of every tenant at once: submit, then poll to the end.
	runCtx, cancel := context.WithTimeout(ctx, loadBudget)
	defer cancel()
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		failures   []string
		getErrors  atomic.Int64
		turnaround []time.Duration
	)
	aws0, start := awsReqs.snapshot(), time.Now()
	for _, tr := range tenants {
		for j := range perTenant {
			rows := make([]chatRow, nRows)
			for k := range rows {
				rows[k] = chatRow{id: fmt.Sprintf("%s-b%d-r%04d", tr.name, j, k), content: fmt.Sprintf("load %s %d %d", tr.name, j, k)}
			}
			tr.ids[j] = make([]string, nRows)
			for k, r := range rows {
				tr.ids[j][k] = r.id
			}
			wg.Go(func() {
				fail := func(err error) {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s batch %d: %v", tr.name, j, err))
					mu.Unlock()
				}
				t0 := time.Now()
				b, f, err := submit(runCtx, tr.client, lat, rows, "gpt-4o-mini", j%2 == 1)
				if err != nil {
					fail(fmt.Errorf("create: %w", err))
					return
				}
				if f != nil {
					tr.inputs[j] = f.ID
				}
				b, err = pollTerminal(runCtx, tr.client, lat, b.ID, pollEvery, &getErrors)
				if err != nil {
					fail(err)
					return
				}
				tr.batches[j] = b
				mu.Lock()
				turnaround = append(turnaround, time.Since(t0))
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	apiRequests, apiStatuses := api.requests.Load(), api.statuses()
	awsDuring := awsReqs.snapshot().since(aws0)
	for _, f := range failures {
		t.Error(f)
	}

	// The invariant, usage and parts of every batch (those that ended,
	// if some did not: the report still says how far the run got).
	var acc accounting
	statuses := map[string]int{}
	for _, tr := range tenants {
		for _, b := range tr.batches {
			if b == nil {
				statuses["unfinished"]++
			} else {
				statuses[string(b.Status)]++
			}
		}
		if slices.Contains(tr.batches, nil) {
			continue
		}
		a := checkTenant(t, rt, tr)
		acc.rows += a.rows
		acc.completed += a.completed
		acc.failed += a.failed
		acc.lost += a.lost
		acc.duplicated += a.duplicated
		acc.strayParts += a.strayParts
	}
	submittedRows := int64(nTenants * perTenant * nRows)
	if statuses["completed"] != nTenants*perTenant {
		t.Errorf("batch statuses %v: want all %d completed", statuses, nTenants*perTenant)
	}
	stats := rt.Mock.Stats()
	secs := elapsed.Seconds()

	w := os.Stdout
	fmt.Fprintf(w, "\nLOAD TEST  %d tenants × %d batches × %d rows = %d rows (uploaded files and inline rows by turns), chunk %d rows, executor concurrency 8, poll every %v\n",
		nTenants, perTenant, nRows, submittedRows, chunkRows, pollEvery)
	rows := [][]string{{"measure", "value"}}
	rows = append(rows,
		[]string{"wall time, first create → last batch terminal", fmt.Sprintf("%.1f s", secs)},
		[]string{"API requests (SDK, all routes)", fmt.Sprintf("%d  (%s)", apiRequests, apiStatuses)},
		[]string{"API requests/s", fmt.Sprintf("%.1f", float64(apiRequests)/secs)},
		[]string{"rows/s end to end", fmt.Sprintf("%.1f", float64(submittedRows)/secs)},
		[]string{"batch turnaround p50 / p99", ms(quantile(turnaround, .5)) + " / " + ms(quantile(turnaround, .99))},
		[]string{"upstream requests (mock)", fmt.Sprintf("%d, peak in flight %d", stats.Requests, stats.PeakInFlight["gpt-4o-mini"])},
		[]string{"failed gets retried", fmt.Sprint(getErrors.Load())},
	)
	table(w, rows)
	fmt.Fprintln(w, "\n  latency           n      p50        p99        max")
	lrows := [][]string{}
	for _, op := range []string{"upload file", "create (file)", "create (inline)", "get batch"} {
		ds := lat.by[op]
		lrows = append(lrows, []string{op, fmt.Sprint(len(ds)), ms(quantile(ds, .5)), ms(quantile(ds, .99)), ms(quantile(ds, 1))})
	}
	table(w, lrows)
	total := awsDuring.total()
	engineOnly := awsDuring.attributed() // the api function's requests carry no Lambda context
	fmt.Fprintf(w, "\n  AWS requests during the run: %d = %.0f per 1,000 rows (%.0f/s); without the API's: %.0f per 1,000 rows\n",
		total, float64(total)*1000/float64(submittedRows), float64(total)/secs, float64(engineOnly)*1000/float64(submittedRows))
	var arows [][]string
	for _, fn := range slices.Sorted(maps.Keys(awsDuring)) {
		n := awsDuring.of(fn)
		arows = append(arows, []string{"by " + fn, fmt.Sprint(n), fmt.Sprintf("%.0f per 1,000 rows", float64(n)*1000/float64(submittedRows))})
	}
	byOp := awsDuring.byOp()
	ops := slices.Collect(maps.Keys(byOp))
	slices.SortFunc(ops, func(a, b string) int { return int(byOp[b] - byOp[a]) })
	for _, op := range ops[:min(len(ops), 8)] {
		arows = append(arows, []string{"  " + op, fmt.Sprint(byOp[op]), ""})
	}
	table(w, arows)
	fmt.Fprintf(w, "\n  invariant: %d batches %v, rows %d = completed %d + failed %d, lost %d, duplicated %d, stray parts %d\n\n",
		nTenants*perTenant, statuses, acc.rows, acc.completed, acc.failed, acc.lost, acc.duplicated, acc.strayParts)
}
