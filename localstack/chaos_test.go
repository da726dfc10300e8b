//go:build chaos

package localstack

// `make chaos`: while batches of several tenants run, executors are killed
// mid-chunk and after writing their parts, SQS messages are dropped and
// duplicated, the provider answers 429s, 500s and timeouts in bursts, and
// the whole local runtime is restarted once on the same emulator. Then
// every batch must be terminal with every row in exactly one file, counts
// and usage matching the rows, no part file left behind, and no tenant
// seeing another's batches or files. The randomness is seeded (CHAOS_SEED,
// printed); goroutine scheduling still varies, so a seed reproduces the
// fault rates and the burst plan, not the exact interleaving.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/awsfault"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/engine"
	"github.com/relaybatch/relay/internal/esm"
	"github.com/relaybatch/relay/internal/localrun"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/resources"
)

// chaosModels: a short per-request timeout so a latency burst turns into
// timeouts, and a fallback for rows whose retries run out.
const chaosModels = `
models:
  - {name: gpt-4o-mini, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, fallback: gpt-4o-mini-backup, max_concurrency: 24, timeout: 2s}
  - {name: gpt-4o-mini-backup, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, upstream_model: backup-upstream, max_concurrency: 8, timeout: 2s}
`

// Fault probabilities per invocation (or per commit, for crashBeforeCommit).
const (
	pKillMidChunk      = 0.07
	pCrashBeforeCommit = 0.10
	pDropWork          = 0.07
	pDuplicateWork     = 0.12
	pDropDispatch      = 0.10
	pDuplicateDispatch = 0.10
	pDropFinalize      = 0.25
	pDuplicateFinalize = 0.30
)

// Fault kinds, in the order the summary prints them.
const (
	faultKill         = "executor killed mid-chunk"
	faultBeforeCommit = "executor crashed after writing parts"
	faultDropWork     = "work message dropped"
	faultDropDispatch = "dispatch batch dropped (≤10 messages)"
	faultDropFinalize = "finalize message dropped"
	faultDupRun       = "work message delivered twice at once"
	faultDupWork      = "work message duplicated on the queue"
	faultDupDispatch  = "dispatch message duplicated"
	faultDupFinalize  = "finalize delivered twice at once"
	faultRedeliverDup = "failed duplicate redelivered"
	fault429Burst     = "provider 429 burst"
	fault500Burst     = "provider 500 burst"
	faultTimeoutBurst = "provider timeout burst"
	faultRestart      = "runtime restarted"
)

// The executor's timeout and the work queue's visibility: long enough for
// a chunk to ride out a provider burst, short enough that a lost message
// comes back within the run.
const (
	chaosExecTimeout    = 10 * time.Second
	chaosWorkVisibility = 12 * time.Second
)

var faultOrder = []string{faultKill, faultBeforeCommit, faultDropWork, faultDropDispatch, faultDropFinalize,
	faultDupRun, faultDupWork, faultDupDispatch, faultDupFinalize, faultRedeliverDup,
	fault429Burst, fault500Burst, faultTimeoutBurst, faultRestart}

// chaos is the fault injector shared by both runtimes of the run.
type chaos struct {
	rt      atomic.Pointer[localrun.Runtime] // the runtime running now
	quiet   atomic.Bool                      // no more faults: the run is settling
	spawned sync.WaitGroup                   // duplicate runs in flight

	mu     sync.Mutex
	rng    *rand.Rand
	faults map[string]int
	// budget counts the crash-like faults injected per chunk: at most
	// WorkMaxReceiveCount-1, so injected faults alone never send a chunk
	// to the DLQ (natural ones, a run cut by its deadline, still may).
	budget map[string]int
	// deadLettering is the chunks the deadletter function is closing: a
	// crash there would wait out the DLQ's 2-minute visibility.
	deadLettering map[string]bool
}

func (c *chaos) roll(p float64) bool {
	if c.quiet.Load() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.Float64() < p
}

func (c *chaos) intn(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.IntN(n)
}

func (c *chaos) count(kind string) {
	c.mu.Lock()
	c.faults[kind]++
	c.mu.Unlock()
}

// crash decides a crash-like fault of a chunk with probability p, within
// the chunk's budget.
func (c *chaos) crash(batchID string, chunk int, p float64, kind string) bool {
	if !c.roll(p) {
		return false
	}
	key := batchID + "/" + strconv.Itoa(chunk)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budget[key] >= resources.WorkMaxReceiveCount-1 || c.deadLettering[key] {
		return false
	}
	c.budget[key]++
	c.faults[kind]++
	return true
}

// onInvoke runs before every invocation of a queue-fed function.
func (c *chaos) onInvoke(fn string, ev events.SQSEvent) error {
	m := chunkOf(ev)
	rt := c.rt.Load()
	switch fn {
	case "executor":
		switch {
		case c.crash(m.Batch, m.Chunk, pKillMidChunk, faultKill):
			// The worker runs part of the chunk (upstream calls made,
			// maybe parts written) and dies; the message comes back.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+c.intn(1500))*time.Millisecond)
			defer cancel()
			_, _ = rt.App.Engine.Execute(ctx, workEvent(m))
			return esm.ErrCrash
		case c.crash(m.Batch, m.Chunk, pDropWork, faultDropWork):
			return esm.ErrCrash
		case c.roll(pDuplicateWork):
			if c.intn(2) == 0 {
				c.count(faultDupRun)
				c.duplicateRun(rt, m)
			} else {
				c.count(faultDupWork)
				_ = rt.App.Queue.Send(context.Background(), resources.Work, m, 0)
			}
		}
	case "deadletter":
		c.mu.Lock()
		c.deadLettering[m.Batch+"/"+strconv.Itoa(m.Chunk)] = true
		c.mu.Unlock()
	case "dispatcher":
		switch {
		case c.roll(pDropDispatch):
			c.count(faultDropDispatch)
			return esm.ErrCrash
		case c.roll(pDuplicateDispatch):
			c.count(faultDupDispatch)
			_ = rt.App.Queue.Send(context.Background(), resources.Dispatch, m, 0)
		}
	case "finalizer":
		switch {
		case c.roll(pDropFinalize):
			c.count(faultDropFinalize)
			return esm.ErrCrash
		case c.roll(pDuplicateFinalize):
			c.count(faultDupFinalize)
			c.spawned.Go(func() { _ = rt.App.Engine.FinalizeBatch(context.Background(), m.Tenant, m.Batch) })
		}
	}
	return nil
}

// duplicateRun runs the chunk a second time beside the real delivery, as a
// duplicate SQS delivery would; if that run fails, its message comes back,
// as it would from SQS.
func (c *chaos) duplicateRun(rt *localrun.Runtime, m engine.Message) {
	c.spawned.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), chaosExecTimeout)
		defer cancel()
		if resp, _ := rt.App.Engine.Execute(ctx, workEvent(m)); len(resp.BatchItemFailures) > 0 {
			c.count(faultRedeliverDup)
			_ = c.rt.Load().App.Queue.Send(context.Background(), resources.Work, m, 0)
		}
	})
}

// workEvent is an invocation event carrying the work message m alone.
func workEvent(m engine.Message) events.SQSEvent {
	body, _ := json.Marshal(m)
	return events.SQSEvent{Records: []events.SQSMessage{{MessageId: "chaos-" + m.Run, Body: string(body),
		Attributes: map[string]string{"ApproximateReceiveCount": "1"}}}}
}

// beforeCommit crashes an executor after it wrote the chunk's parts.
func (c *chaos) beforeCommit(ch batch.Chunk) error {
	if c.crash(ch.Batch, ch.Index, pCrashBeforeCommit, faultBeforeCommit) {
		return errors.New("chaos: executor crashed after writing its parts")
	}
	return nil
}

// bursts makes the provider fail in bursts until ctx ends: a calm spell,
// then 429s, 500s or answers slower than the model's timeout.
func (c *chaos) bursts(ctx context.Context, mock *mockup.Server, seed int64) {
	calm := mockup.Options{Seed: seed}
	for {
		select {
		case <-ctx.Done():
			mock.SetOptions(calm)
			return
		case <-time.After(time.Duration(2000+c.intn(2000)) * time.Millisecond):
		}
		o := calm
		switch c.intn(3) {
		case 0:
			o.RateLimitRate, o.RetryAfter = 0.6, 200*time.Millisecond
			c.count(fault429Burst)
		case 1:
			o.ErrorRate = 0.5
			c.count(fault500Burst)
		case 2:
			o.Latency = 2500 * time.Millisecond // past the 2 s model timeout
			c.count(faultTimeoutBurst)
		}
		mock.SetOptions(o)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(1000+c.intn(1500)) * time.Millisecond):
		}
		mock.SetOptions(calm)
	}
}

func TestChaos(t *testing.T) {
	const (
		nTenants  = 4
		perTenant = 3
		nRows     = 60
		budget    = 200 * time.Second // submit to all terminal
	)
	seed := time.Now().UnixNano()
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED: %q is not a number", v)
		}
	}
	logPath := fmt.Sprintf("%s/relay-chaos-%d.log", os.TempDir(), seed)
	fmt.Printf("\nCHAOS  seed %d (CHAOS_SEED=%d reproduces the fault plan); runtime log, kept if the run fails: %s\n", seed, seed, logPath)
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	ch := &chaos{rng: rand.New(rand.NewPCG(uint64(seed), 0x6368616f73)), faults: map[string]int{}, budget: map[string]int{}, deadLettering: map[string]bool{}}
	ctx := context.Background()

	// The provider lives outside the runtime, as a real one would, so it
	// keeps answering across the restart.
	if os.Getenv("RELAY_TEST_KEY") == "" {
		t.Setenv("RELAY_TEST_KEY", "sk-relay-chaos")
	}
	mock := mockup.New(mockup.Options{Seed: seed})
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	msrv := &http.Server{Handler: mock}
	go msrv.Serve(ml)
	defer msrv.Close()
	models, err := config.ParseModels([]byte(replaceMock(chaosModels, ml.Addr().String())))
	if err != nil {
		t.Fatal(err)
	}

	// Both runtimes: the same names, emulator, API address and hooks.
	prefix := fmt.Sprintf("chaos%d", time.Now().UnixNano())
	opts := localrun.Options{
		Env:    config.Env{Prefix: prefix, Table: prefix, Bucket: prefix + "-data", ChunkRows: 10, S3PathStyle: true},
		Models: models, AWS: awsCfg, Addr: freeAddr(t), TickEvery: time.Second, Log: logger,
		OnInvoke: ch.onInvoke,
		Wire: func(a *app.App) {
			a.Engine.BeforeCommit = ch.beforeCommit
			a.Engine.Lease = 3 * time.Second // a killed run's chunk moves on in seconds
		},
	}
	// A lost work message comes back in seconds, not minutes.
	queueTimes(&opts, resources.Work, chaosWorkVisibility, chaosExecTimeout)
	sdk := sdkFaults(uint64(seed))
	withAPIOption(sdk.APIOption)(&opts)
	rt, err := localrun.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	ch.rt.Store(rt)
	defer func() { ch.rt.Load().Close() }()

	api, lat := newAPICounter(), newLatencies()
	tenants := newTenants(t, ctx, rt, "chaos-tenant", nTenants, perTenant, api)
	totalRows := nTenants * perTenant * nRows

	burstCtx, stopBursts := context.WithCancel(ctx)
	defer stopBursts()
	go ch.bursts(burstCtx, mock, seed)

	// Submit (staggered, so batches start before and after the restart)
	// and poll every batch.
	runCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		failures  []string
		getErrors atomic.Int64
		progress  = make([]atomic.Int64, nTenants*perTenant) // rows done per batch, as last polled
		submitted atomic.Int64
	)
	start := time.Now()
	for ti, tr := range tenants {
		for j := range perTenant {
			rows := make([]chatRow, nRows)
			tr.ids[j] = make([]string, nRows)
			for k := range rows {
				id := fmt.Sprintf("t%d-b%d-r%03d", ti, j, k)
				rows[k] = chatRow{id: id, content: fmt.Sprintf("[[mock:sleep=%dms]] chaos %s", 10+ch.intn(50), id)}
				tr.ids[j][k] = id
			}
			wg.Go(func() {
				fail := func(err error) {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s batch %d: %v", tr.name, j, err))
					mu.Unlock()
				}
				time.Sleep(time.Duration(j*4000+ti*300) * time.Millisecond)
				var b *openai.Batch
				var f *openai.FileObject
				var err error
				for try := 0; try < 5; try++ { // the API may be restarting
					if b, f, err = submit(runCtx, tr.client, lat, rows, "gpt-4o-mini", (ti+j)%2 == 1); statusOf(err) != -1 {
						break
					}
					time.Sleep(time.Second)
				}
				if err != nil {
					fail(fmt.Errorf("create: %w", err))
					return
				}
				submitted.Add(1)
				if f != nil {
					tr.inputs[j] = f.ID
				}
				for {
					got, err := timed(lat, "get batch", func() (*openai.Batch, error) { return tr.client.Batches.Get(runCtx, b.ID) })
					if err == nil {
						progress[ti*perTenant+j].Store(got.RequestCounts.Completed + got.RequestCounts.Failed)
						if terminal[got.Status] {
							tr.batches[j] = got
							return
						}
					} else {
						getErrors.Add(1)
					}
					select {
					case <-runCtx.Done():
						fail(fmt.Errorf("batch %s not terminal: %w", b.ID, runCtx.Err()))
						return
					case <-time.After(500 * time.Millisecond):
					}
				}
			})
		}
	}

	// Restart the whole runtime once, mid-run: when every batch is in and
	// about a third of the rows are done (or after a minute).
	var restartAt time.Duration
	var rowsAtRestart int64
	var openAtRestart int
	for restartAt == 0 {
		done, open := int64(0), 0
		for i := range progress {
			n := progress[i].Load()
			done += n
			if n < nRows {
				open++
			}
		}
		if (submitted.Load() == int64(nTenants*perTenant) && done >= int64(totalRows)/3) || time.Since(start) > time.Minute {
			old := ch.rt.Load()
			old.Close() // running invocations finish, as Lambdas would; the queues keep the rest
			nrt, err := localrun.Start(ctx, opts)
			if err != nil {
				t.Fatalf("restart: %v", err)
			}
			ch.rt.Store(nrt)
			ch.count(faultRestart)
			restartAt, rowsAtRestart, openAtRestart = time.Since(start), done, open
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, f := range failures {
		t.Error(f)
	}

	// Settle: no more faults; the duplicates and redeliveries still in
	// flight finish, so what is checked is what stays.
	ch.quiet.Store(true)
	sdk.Clear()
	stopBursts()
	ch.spawned.Wait()
	rt = ch.rt.Load()
	// A deadletter invocation that failed comes back after the DLQ's
	// two-minute visibility timeout.
	drained := drainWork(t, rt, 150*time.Second)
	if t.Failed() {
		t.FailNow()
	}

	// Accounting, per tenant.
	var acc accounting
	acc.errorCodes = map[string]int64{}
	statuses := map[string]int{}
	for _, tr := range tenants {
		a := checkTenant(t, rt, tr)
		acc.rows += a.rows
		acc.completed += a.completed
		acc.failed += a.failed
		acc.answered += a.answered
		acc.lost += a.lost
		acc.duplicated += a.duplicated
		acc.deadLetters += a.deadLetters
		acc.strayParts += a.strayParts
		for k, v := range a.errorCodes {
			acc.errorCodes[k] += v
		}
		for _, b := range tr.batches {
			statuses[string(b.Status)]++
		}
	}
	if acc.rows != int64(totalRows) || acc.lost != 0 || acc.duplicated != 0 {
		t.Errorf("rows: %d of %d accounted, %d lost, %d duplicated", acc.rows, totalRows, acc.lost, acc.duplicated)
	}
	probes := checkIsolation(t, rt, tenants)

	w := os.Stdout
	fmt.Fprintf(w, "\nCHAOS  seed %d: %d tenants × %d batches × %d rows = %d rows, chunks of 10, work visibility %v, executor timeout %v\n",
		seed, nTenants, perTenant, nRows, totalRows, chaosWorkVisibility, chaosExecTimeout)
	fmt.Fprintf(w, "  all terminal after %.1f s; restart at %.1f s with %d rows done and %d of %d batches unfinished; work queue drained: %v\n\n",
		elapsed.Seconds(), restartAt.Seconds(), rowsAtRestart, openAtRestart, nTenants*perTenant, drained)
	frows := [][]string{{"fault injected", "count"}}
	total := 0
	for _, k := range faultOrder {
		frows = append(frows, []string{k, strconv.Itoa(ch.faults[k])})
		total += ch.faults[k]
	}
	injected := sdk.Injected()
	for _, k := range slices.Sorted(maps.Keys(injected)) {
		frows = append(frows, []string{"AWS " + k, strconv.Itoa(injected[k])})
		total += injected[k]
	}
	frows = append(frows, []string{"total", strconv.Itoa(total)})
	table(w, frows)
	endState(t, w, rt)
	stats := mock.Stats()
	fmt.Fprintf(w, "\n  provider: %d upstream requests for %d rows, answers by status %v\n", stats.Requests, totalRows, stats.ByStatus)
	fmt.Fprintf(w, "  API: %d requests (%s), %d failed gets retried (restart)\n", api.requests.Load(), api.statuses(), getErrors.Load())
	var codes []string
	for _, k := range slices.Sorted(maps.Keys(acc.errorCodes)) {
		codes = append(codes, fmt.Sprintf("%s×%d", k, acc.errorCodes[k]))
	}
	fmt.Fprintf(w, "  batches %v\n", statuses)
	fmt.Fprintf(w, "  rows %d = completed %d + failed %d (%v); answered upstream %d; dead-lettered %d\n",
		acc.rows, acc.completed, acc.failed, codes, acc.answered, acc.deadLetters)
	fmt.Fprintf(w, "  ROWS LOST %d, rows duplicated %d, stray part files %d, cross-tenant probes %d (all 404, lists own only)\n\n",
		acc.lost, acc.duplicated, acc.strayParts, probes)
	if !t.Failed() {
		os.Remove(logPath) // kept only when there is something to read in it
	}
}

// sdkFaults fails AWS calls of the functions' invocations (not the API's,
// whose errors the client would see, nor the pollers'): conflicts on
// transactions, writes that take effect and fail all the same, throttles,
// lost sends and functions that die between two calls.
func sdkFaults(seed uint64) *awsfault.Injector {
	inInvocation := func(ctx context.Context, _ any) bool {
		lc, ok := lambdacontext.FromContext(ctx)
		return ok && lc.AwsRequestID != ""
	}
	in := awsfault.New(seed)
	for _, r := range []awsfault.Rule{
		{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.Conflict, Prob: 0.20},
		{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.After, Prob: 0.08},
		{Service: "DynamoDB", Operation: "UpdateItem", Kind: awsfault.After, Prob: 0.05},
		{Service: "DynamoDB", Operation: "PutItem", Kind: awsfault.After, Prob: 0.05},
		{Service: "DynamoDB", Kind: awsfault.Throttle, Prob: 0.02},
		{Service: "SQS", Operation: "SendMessageBatch", Kind: awsfault.After, Prob: 0.06},
		{Service: "SQS", Operation: "SendMessageBatch", Kind: awsfault.Before, Prob: 0.04},
		{Service: "S3", Operation: "PutObject", Kind: awsfault.After, Prob: 0.06},
		{Service: "S3", Kind: awsfault.Throttle, Prob: 0.02},
		{Kind: awsfault.Die, Prob: 0.005},
	} {
		r.Match = inInvocation
		in.Add(r)
	}
	return in
}

// endState checks what the run must leave behind beside the rows: no
// capacity taken, no chunk holding a lease.
func endState(t *testing.T, w io.Writer, rt *localrun.Runtime) {
	ctx := context.Background()
	rows := [][]string{{"end state", "value", "want"}}
	for _, m := range rt.App.Models.Names() {
		n, err := rt.App.Store.InFlight(ctx, m)
		if err != nil || n != 0 {
			t.Errorf("model %s: %d slots in flight (%v), want 0", m, n, err)
		}
		rows = append(rows, []string{"in flight, " + m, strconv.Itoa(n), "0"})
	}
	held, err := rt.App.Store.ExpiredLeases(ctx, time.Now().Add(100*365*24*time.Hour), 1000)
	if err != nil || len(held) != 0 {
		t.Errorf("chunks holding a lease after the run: %d (%v)", len(held), err)
	}
	rows = append(rows, []string{"chunks holding a lease", strconv.Itoa(len(held)), "0"})
	fmt.Fprintln(w)
	table(w, rows)
}

// drainWork waits until the work queue and its DLQ hold nothing, visible
// or in flight: the redeliveries of dropped and duplicated messages are
// done.
func drainWork(t *testing.T, rt *localrun.Runtime, limit time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	var urls []string
	for _, name := range []string{resources.Work, resources.Work + "-dlq"} {
		u, err := rt.App.Queue.URL(ctx, name)
		if err != nil {
			t.Fatalf("queue %s: %v", name, err)
		}
		urls = append(urls, u)
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		left := 0
		for _, u := range urls {
			out, err := rt.App.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(u), AttributeNames: []sqstypes.QueueAttributeName{
				sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
			if err != nil {
				t.Fatalf("queue attributes: %v", err)
			}
			for _, v := range out.Attributes {
				n, _ := strconv.Atoi(v)
				left += n
			}
		}
		if left == 0 {
			// An invocation may have received the last message and still be running.
			time.Sleep(2 * time.Second)
			return true
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("the work queue still holds messages after %v", limit)
	return false
}

// checkIsolation asserts that no tenant sees another's batches or files:
// 404 for each of them by id, and lists of its own objects only. It
// returns how many cross-tenant probes it made.
func checkIsolation(t *testing.T, rt *localrun.Runtime, tenants []*tenantRun) int {
	t.Helper()
	ctx := context.Background()
	probes := 0
	for _, a := range tenants {
		own := map[string]bool{}
		for i, b := range a.batches {
			own[b.ID] = true
			for _, id := range []string{a.inputs[i], b.InputFileID, b.OutputFileID, b.ErrorFileID} {
				if id != "" {
					own[id] = true
				}
			}
		}
		page, err := a.client.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(100)})
		if err != nil {
			t.Fatalf("%s: list batches: %v", a.name, err)
		}
		if len(page.Data) != len(a.batches) {
			t.Errorf("%s lists %d batches, has %d", a.name, len(page.Data), len(a.batches))
		}
		for _, b := range page.Data {
			if !own[b.ID] {
				t.Errorf("%s lists batch %s, which is not its own", a.name, b.ID)
			}
		}
		files, err := a.client.Files.List(ctx, openai.FileListParams{})
		if err != nil {
			t.Fatalf("%s: list files: %v", a.name, err)
		}
		for _, f := range files.Data {
			if !own[f.ID] {
				t.Errorf("%s lists file %s, which is not its own", a.name, f.ID)
			}
		}
		for _, b := range tenants {
			if b == a {
				continue
			}
			for i, other := range b.batches {
				probe := func(what string, err error) {
					probes++
					if s := statusOf(err); s != http.StatusNotFound {
						t.Errorf("%s gets %d for %s of %s, want 404", a.name, s, what, b.name)
					}
				}
				_, err := a.client.Batches.Get(ctx, other.ID)
				probe("batch "+other.ID, err)
				_, err = a.client.Batches.Cancel(ctx, other.ID)
				probe("cancel of batch "+other.ID, err)
				status, _ := rawDo(t, rt, a.key, http.MethodGet, "/v1/batches/"+other.ID+"/results", nil)
				probe("results of "+other.ID, httpStatusErr(status))
				for _, id := range []string{b.inputs[i], other.InputFileID, other.OutputFileID, other.ErrorFileID} {
					if id == "" {
						continue
					}
					_, err := a.client.Files.Get(ctx, id)
					probe("file "+id, err)
					resp, err := a.client.Files.Content(ctx, id)
					if err == nil {
						resp.Body.Close()
					}
					probe("content of file "+id, err)
				}
			}
		}
	}
	return probes
}

// httpStatusErr turns a raw status into what statusOf reads.
func httpStatusErr(status int) error {
	if status == http.StatusOK {
		return nil
	}
	return &openai.Error{StatusCode: status}
}
