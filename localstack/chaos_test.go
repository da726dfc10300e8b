//go:build chaos

package localstack

// `make chaos`: while batches of several tenants run (some cancelled, one
// fired by a template, one of workflow records, all with webhooks),
// executors are killed mid-chunk and after writing their parts, SQS
// messages are dropped and duplicated, the provider answers 429s, 500s and
// timeouts in bursts, the whole local runtime is restarted once on the same
// emulator, and the functions' AWS calls fail (sdkFaults). Then every batch
// must be terminal with every row in exactly one file, counts and usage
// matching the rows, no part file left behind, no capacity or lease held,
// every webhook delivered or recorded failed, and no tenant seeing
// another's batches or files. While it runs, rows of three models of
// different capacities are mixed in every batch, work is delivered to two
// executor invocations at once, each engine invocation runs on a clock
// skewed by up to ±2 s, lease renewals are throttled and a few rows outlast
// an invocation; the mock records every request, and the run must keep
// each model within its max_concurrency, send no row by two runs at once
// and start none after its run's lease (chaos_invariants_test.go).
// The randomness is seeded (CHAOS_SEED,
// printed); goroutine scheduling still varies, so a seed reproduces the
// fault rates and the burst plan, not the exact interleaving.
// Chunks hold 10 rows, so every batch makes many chunks to fault;
// CHAOS_CHUNK_ROWS=n (0 or unset: 10) runs it at RELAY_CHUNK_ROWS=n, 768
// the shipped default (a chunk still holds at most 24 rounds of its
// model's slots, plan.Limits.RowsFor: 288, 144 and 72 rows here, so a
// 100-row batch makes one chunk per model; the fault bars, set for chunks
// of 10, are then printed, not enforced).

import (
	"bytes"
	"cmp"
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
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
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
	"github.com/openai/openai-go/v3/option"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/awsfault"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/esm"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/webhook/delivery"
)

// chaosModels: three models of different capacities that the batches mix
// (chaosMix), a short per-request timeout so a latency burst turns into
// timeouts, and a fallback for rows whose retries run out. chaos-medium's
// timeout is longer than an executor invocation (chaosExecTimeout), so
// its slow rows (slowRow) outlast the invocation that runs them.
const chaosModels = `
models:
  - {name: gpt-4o-mini, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, fallback: gpt-4o-mini-backup, max_concurrency: 12, timeout: 2s}
  - {name: chaos-medium, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, upstream_model: medium-upstream, fallback: gpt-4o-mini-backup, max_concurrency: 6, timeout: 15s}
  - {name: chaos-small, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, upstream_model: small-upstream, max_concurrency: 3, timeout: 2s}
  - {name: gpt-4o-mini-backup, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, upstream_model: backup-upstream, max_concurrency: 4, timeout: 2s}
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
	pDuplicateInvoke   = 0.08 // a batch of work messages to two executor invocations at once
	pThrottleRenewal   = 0.30 // of the lease renewals
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
	faultDupInvoke    = "work batch to two invocations at once"
	faultRenewal      = "lease renewal throttled"
)

// The queues' visibility timeouts and their functions' timeouts: long
// enough for a chunk to ride out a provider burst, short enough that a
// lost message comes back within the run (deployed: minutes).
var chaosQueues = []struct {
	key                 string
	visibility, timeout time.Duration
}{
	{resources.Work, 12 * time.Second, 10 * time.Second},
	{resources.Work + "-dlq", 15 * time.Second, 10 * time.Second},
	{resources.Dispatch, 15 * time.Second, 10 * time.Second},
	{resources.Finalize, 20 * time.Second, 15 * time.Second},
	{resources.Webhook, 10 * time.Second, 5 * time.Second},
}

// chaosExecTimeout is the executor's timeout, the bound of a duplicate run;
// short (10 s, deployed 15 minutes) so that slow rows outlast invocations.
var chaosExecTimeout = chaosQueues[0].timeout

var faultOrder = []string{faultKill, faultBeforeCommit, faultDropWork, faultDropDispatch, faultDropFinalize,
	faultDupRun, faultDupWork, faultDupDispatch, faultDupFinalize, faultRedeliverDup,
	fault429Burst, fault500Burst, faultTimeoutBurst, faultRestart, faultDupInvoke, faultRenewal}

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
	// skews counts the invocations given a skewed clock, and maxSkewSeen
	// is the largest skew given.
	skews       int
	maxSkewSeen time.Duration
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
			_, _ = rt.App.Engine.Execute(ctx, workDelivery(m))
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
func (c *chaos) duplicateRun(rt *localrun.Runtime, m msg.Message) {
	c.spawned.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), chaosExecTimeout)
		defer cancel()
		e := *rt.App.Engine
		e.Now = c.skewedClock("executor")
		if failed, _ := e.Execute(ctx, workDelivery(m)); len(failed) > 0 {
			c.count(faultRedeliverDup)
			_ = c.rt.Load().App.Queue.Send(context.Background(), resources.Work, m, 0)
		}
	})
}

// workDelivery is an invocation's deliveries: the work message m alone,
// received for the first time.
func workDelivery(m msg.Message) []msg.Delivery {
	body, _ := json.Marshal(m)
	return []msg.Delivery{{ID: "chaos-" + m.Run, Body: string(body), ReceiveCount: 1}}
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
	calm := mockup.Options{Seed: seed, Record: true}
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

// chaosChunkRows is the run's RELAY_CHUNK_ROWS: CHAOS_CHUNK_ROWS, 0 or
// unset 10 (see the header).
func chaosChunkRows(t *testing.T) int {
	n, err := strconv.Atoi(cmp.Or(os.Getenv("CHAOS_CHUNK_ROWS"), "0"))
	if err != nil || n < 0 {
		t.Fatalf("CHAOS_CHUNK_ROWS: %q is not a row count", os.Getenv("CHAOS_CHUNK_ROWS"))
	}
	return cmp.Or(n, 10)
}

func TestChaos(t *testing.T) {
	const (
		nTenants  = 4
		perTenant = 3
		nRows     = 100
		budget    = 900 * time.Second // submit to all terminal: ~90 takeovers of a 10 s lease in a run
	)
	chunkRows := chaosChunkRows(t)
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

	// The provider, the webhook receiver and the workflow callback live
	// outside the runtime, as real ones would, so they keep answering
	// across the restart.
	if os.Getenv("RELAY_TEST_KEY") == "" {
		t.Setenv("RELAY_TEST_KEY", "sk-relay-chaos")
	}
	mock := mockup.New(mockup.Options{Seed: seed, Record: true})
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
	hooks := newChaosHooks(t, seed)
	callback := newWFCallback(t, func(ev wfEvent) (int, string) {
		if ev.Step == 0 {
			return 200, wfContinue(wfReq{id: "a", content: "[[mock:sleep=20ms]] step a"}, wfReq{id: "b", content: "[[mock:sleep=20ms]] step b"})
		}
		return 200, `{"state":"completed","output":{"ok":true}}`
	})
	// The template's schedule fires on this clock, moved once mid-run.
	// Half a minute past a minute, so that no firing time falls on the
	// restart (a restarted firer fires the times after its start).
	clock := &fakeClock{t: time.Now().Add(time.Hour).Truncate(time.Minute).Add(30 * time.Second)}

	// Both runtimes: the same names, emulator, API address and hooks.
	prefix := fmt.Sprintf("chaos%d", time.Now().UnixNano())
	opts := localrun.Options{
		Env:    config.Env{Prefix: prefix, Table: prefix, Bucket: prefix + "-data", ChunkRows: chunkRows, S3PathStyle: true},
		Models: models, AWS: emutest.Config(t), Addr: freeAddr(t), TickEvery: time.Second, Log: logger,
		OnInvoke: ch.onInvoke,
		// Work delivered to two invocations at once, and every engine
		// invocation on a clock of its own, off by up to ±2 s.
		DuplicateInvoke: func(fn string, ev events.SQSEvent) bool { return ch.duplicateInvoke(fn, ev) },
		InvocationClock: ch.skewedClock,
		SchedulerClock:  clock.Now, SchedulerRefresh: 500 * time.Millisecond,
		Wire: func(a *app.App) {
			a.Engine.BeforeCommit = ch.beforeCommit
			a.Engine.Lease = chaosLease // a killed run's chunk moves on in seconds
			a.Webhooks.Backoff = func(int) time.Duration { return chaosWebhookBackoff }
			a.Webhooks.RetryFor = chaosWebhookRetryFor
			a.Webhooks.CircuitCooldown = chaosWebhookCooldown
			a.Webhooks.Client.Timeout = 2 * time.Second
		},
	}
	// A lost message comes back in seconds, not minutes.
	for _, q := range chaosQueues {
		queueTimes(&opts, q.key, q.visibility, q.timeout)
	}
	sdk := sdkFaults(uint64(seed), ch.throttleRenewal)
	withAPIOption(sdk.APIOption)(&opts)
	rt, err := localrun.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	ch.rt.Store(rt)
	defer func() { ch.rt.Load().Close() }()

	api, lat := newAPICounter(), newLatencies()
	tenants := newTenants(t, ctx, rt, "chaos-tenant", nTenants, perTenant, api)
	extra := newTenants(t, ctx, rt, "chaos-extra", 1, 2, api)[0]
	extra.workflows = true
	totalRows := nTenants * perTenant * nRows

	burstCtx, stopBursts := context.WithCancel(ctx)
	defer stopBursts()
	go ch.bursts(burstCtx, mock, seed)

	// Submit (staggered, so batches start before and after the restart)
	// and poll every batch; cancel some of them while they run.
	runCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		failures  []string
		getErrors atomic.Int64
		progress  = make([]atomic.Int64, nTenants*perTenant) // rows done per batch, as last polled
		submitted atomic.Int64
		cancels   atomic.Int64
		slowRows  atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// The emulator's memory grows with many tiny chunks: stop the run
	// clearly before it takes the machine's.
	var rss rssWatch
	go rss.run(runCtx, emulatorPort(t), rssLimitMB(), func(mb int64) {
		fail("the emulator's RSS reached %d MB (CHAOS_MAX_EMULATOR_RSS_MB=%d): run stopped", mb, rssLimitMB())
		cancel()
	})
	// await polls a batch until it is terminal, keeping its rows done in prog.
	await := func(c openai.Client, id string, prog *atomic.Int64) (*openai.Batch, error) {
		for {
			got, err := timed(lat, "get batch", func() (*openai.Batch, error) { return c.Batches.Get(runCtx, id) })
			if err == nil {
				prog.Store(got.RequestCounts.Completed + got.RequestCounts.Failed)
				if terminal[got.Status] {
					return got, nil
				}
			} else {
				getErrors.Add(1)
			}
			select {
			case <-runCtx.Done():
				return nil, fmt.Errorf("batch %s not terminal: %w", id, runCtx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	var unwatched atomic.Int64 // progress of the extra batches, which the restart does not wait for
	start := time.Now()
	for ti, tr := range tenants {
		for j := range perTenant {
			rows := make([]chatRow, nRows)
			models := ch.mixedModels(nRows)
			tr.ids[j] = make([]string, nRows)
			for k := range rows {
				id := fmt.Sprintf("t%d-b%d-r%03d", ti, j, k)
				sleep := fmt.Sprintf("[[mock:sleep=%dms]]", 10+ch.intn(50))
				if j == 0 && ti%2 == 1 && k == nRows/2 { // two batches hold a row slower than an invocation
					sleep, models[k] = slowRow, "chaos-medium"
					slowRows.Add(1)
				}
				rows[k] = chatRow{id: id, content: fmt.Sprintf("%s chaos %s", sleep, id)}
				tr.ids[j][k] = id
			}
			cancelled := j == 1 && ti%2 == 0
			wg.Go(func() {
				time.Sleep(time.Duration(j*4000+ti*300) * time.Millisecond)
				var b *openai.Batch
				var f *openai.FileObject
				var err error
				for try := 0; try < 5; try++ { // the API may be restarting
					if b, f, err = submitMixed(runCtx, tr.client, lat, rows, models, (ti+j)%2 == 1, option.WithJSONSet("webhook_url", hooks.URL)); statusOf(err) != -1 {
						break
					}
					time.Sleep(time.Second)
				}
				if err != nil {
					fail("%s batch %d: create: %v", tr.name, j, err)
					return
				}
				submitted.Add(1)
				if f != nil {
					tr.inputs[j] = f.ID
				}
				if cancelled {
					go func() {
						time.Sleep(3 * time.Second)
						if cancelBatch(runCtx, tr.client, b.ID) {
							cancels.Add(1)
						}
					}()
				}
				got, err := await(tr.client, b.ID, &progress[ti*perTenant+j])
				if err != nil {
					fail("%s: %v", tr.name, err)
					return
				}
				tr.batches[j] = got
			})
		}
	}
	wg.Go(func() {
		id, err := workflowBatch(runCtx, extra, callback.URL, hooks.URL+"/down")
		if err != nil {
			fail("workflow batch: %v", err)
			return
		}
		if extra.batches[0], err = await(extra.client, id, &unwatched); err != nil {
			fail("workflow batch: %v", err)
		}
	})
	templateID, err := createTemplate(ctx, rt.URL, extra, hooks.URL)
	if err != nil {
		t.Fatalf("template: %v", err)
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
	// The template's minute passes on the restarted runtime: one run,
	// which then runs like any batch; the template is cancelled after.
	clock.Add(time.Minute)
	wg.Go(func() {
		run, err := templateRun(runCtx, rt.URL, extra, templateID)
		if err != nil {
			fail("template run: %v", err)
			return
		}
		if extra.batches[1], err = await(extra.client, run, &unwatched); err != nil {
			fail("template run: %v", err)
			return
		}
		if !cancelBatch(runCtx, extra.client, templateID) {
			fail("template %s: cancel failed", templateID)
		}
	})
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
	drained := drainWork(t, rt, 90*time.Second)
	w := os.Stdout
	fmt.Fprintf(w, "\nCHAOS  seed %d: %d tenants × %d batches × %d rows = %d rows, + %d workflow records and a template's run of %d rows; chunks of %d\n",
		seed, nTenants, perTenant, nRows, totalRows, len(extra.ids[0]), len(extra.ids[1]), chunkRows)
	var shortened []string
	for _, q := range chaosQueues {
		shortened = append(shortened, fmt.Sprintf("%s %v/%v", q.key, q.visibility, q.timeout))
	}
	fmt.Fprintf(w, "  shortened for the run: queue visibility/function timeout %s; lease %v, tick %v, webhook retries every %v for %v, circuits open %v\n",
		strings.Join(shortened, ", "), chaosLease, time.Second, chaosWebhookBackoff, chaosWebhookRetryFor, chaosWebhookCooldown)
	var rowsDone int64 // as last polled: below totalRows when the budget ran out
	for i := range progress {
		rowsDone += progress[i].Load()
	}
	fmt.Fprintf(w, "  all terminal after %.1f s (%d of %d rows done, as last polled); restart at %.1f s with %d rows done and %d of %d batches unfinished; %d cancels; work queue drained: %v\n\n",
		elapsed.Seconds(), rowsDone, totalRows, restartAt.Seconds(), rowsAtRestart, openAtRestart, nTenants*perTenant, cancels.Load(), drained)
	total := faultTable(t, w, ch.faults, sdk, chunkRows == 10)
	fmt.Fprintf(w, "\n  %d faults injected; besides, %d invocations ran on a skewed clock (up to %v off), %d rows slower than an invocation\n\n",
		total, ch.skews, ch.maxSkewSeen, slowRows.Load())
	inv := checkInvariants(mock, models)
	inv.emulatorPeakM = rss.peak()
	inv.report(t, w)
	fmt.Fprintf(w, "\n  README (seed | rows | faults | peak/cap %v | rows sent twice at once | sends after lease):\n  %s\n\n",
		modelNames(models), inv.readmeRow(seed, int64(totalRows+len(extra.ids[0])+len(extra.ids[1])), total))
	if t.Failed() {
		t.FailNow()
	}

	// Accounting, per tenant.
	var acc accounting
	acc.errorCodes = map[string]int64{}
	statuses := map[string]int{}
	for _, tr := range append(tenants, extra) {
		a := checkTenant(t, rt, tr)
		acc.rows += a.rows
		acc.completed += a.completed
		acc.failed += a.failed
		acc.answered += a.answered
		acc.lost += a.lost
		acc.duplicated += a.duplicated
		acc.deadLetters += a.deadLetters
		acc.deadLetterMismatches += a.deadLetterMismatches
		acc.countsOff += a.countsOff
		acc.usageOff += a.usageOff
		acc.strayParts += a.strayParts
		for k, v := range a.errorCodes {
			acc.errorCodes[k] += v
		}
		for _, b := range tr.batches {
			statuses[string(b.Status)]++
		}
	}
	wantRows := int64(totalRows + len(extra.ids[0]) + len(extra.ids[1]))
	if acc.rows != wantRows || acc.lost != 0 || acc.duplicated != 0 {
		t.Errorf("rows: %d of %d accounted, %d lost, %d duplicated", acc.rows, wantRows, acc.lost, acc.duplicated)
	}
	probes, leaks := checkIsolation(t, rt, tenants)
	hooked := map[string]string{templateID: extra.key} // batch id → its tenant's key
	for _, tr := range append(tenants, extra) {
		for _, b := range tr.batches {
			hooked[b.ID] = tr.key
		}
	}
	wh := checkWebhooks(t, rt, hooks, hooked, extra.batches[0].ID)

	terminalN := 0
	for _, n := range statuses {
		terminalN += n
	}
	endState(t, w, rt, [][]string{
		{"batches terminal", strconv.Itoa(terminalN), strconv.Itoa(len(hooked) - 1)},
		{"rows lost", strconv.FormatInt(acc.lost, 10), "0"},
		{"rows in both files", strconv.FormatInt(acc.duplicated, 10), "0"},
		{"batches whose counts disagree with their files", strconv.FormatInt(acc.countsOff, 10), "0"},
		{"tenants whose usage disagrees with their rows", strconv.FormatInt(acc.usageOff, 10), "0"},
		{"dead letters unlike the error file", strconv.FormatInt(acc.deadLetterMismatches, 10), "0"},
		{"stray part objects", strconv.Itoa(acc.strayParts), "0"},
		{"webhooks neither delivered nor recorded failed", strconv.Itoa(wh.unsettled), "0"},
		{"cross-tenant probes not answered 404", strconv.Itoa(leaks), "0"},
	})
	stats := mock.Stats()
	fmt.Fprintf(w, "\n  provider: %d upstream requests for %d rows, answers by status %v\n", stats.Requests, wantRows, stats.ByStatus)
	fmt.Fprintf(w, "  API: %d requests (%s), %d failed gets retried (restart)\n", api.requests.Load(), api.statuses(), getErrors.Load())
	var codes []string
	for _, k := range slices.Sorted(maps.Keys(acc.errorCodes)) {
		codes = append(codes, fmt.Sprintf("%s×%d", k, acc.errorCodes[k]))
	}
	fmt.Fprintf(w, "  batches %v; template %s fired once and cancelled\n", statuses, templateID)
	fmt.Fprintf(w, "  rows %d = completed %d + failed %d (%v); answered upstream %d; dead-lettered %d\n",
		acc.rows, acc.completed, acc.failed, codes, acc.answered, acc.deadLetters)
	fmt.Fprintf(w, "  webhooks: %d delivered (%d attempts answered 5xx on the way), %d recorded failed; %d cross-tenant probes\n\n",
		wh.delivered, hooks.refused(), wh.failed, probes)
	if !t.Failed() {
		os.Remove(logPath) // kept only when there is something to read in it
	}
}

// The lease and the webhook retries, shortened so that the run settles in
// minutes: a killed run's chunk moves on in seconds, and a webhook that
// keeps failing is recorded failed within the run.
const (
	// chaosLease is long enough that the executor's skew margin (5 s, at
	// most half a lease: docs/design.md "Scheduling", lease rule) covers
	// the 4 s two invocations' clocks may differ by (±2 s each).
	chaosLease           = 10 * time.Second
	chaosWebhookBackoff  = 500 * time.Millisecond
	chaosWebhookRetryFor = 15 * time.Second
	// chaosWebhookCooldown is a receiver circuit's: the run's receiver
	// refuses a third of the attempts, and /down all of them.
	chaosWebhookCooldown = 2 * time.Second
)

// The bars of a run in chunks of 10: faults in all, of them after-effect
// failures and transaction conflicts. Larger chunks (CHAOS_CHUNK_ROWS)
// make fewer chunks and AWS calls at the same fault rates (chunks of 768,
// seed 99: 5,349 calls, 864 faults, 291 after-effect): the bars are
// printed, not enforced, so the run goes on to its end-state checks.
const (
	minFaults    = 1000
	minAfter     = 300
	minConflicts = 100
)

// chaosHooks is the run's webhook receiver: it refuses about a third of
// the attempts with a 500 (seeded) and answers 204 to the rest; on /down it
// always refuses, so those webhooks end recorded failed.
type chaosHooks struct {
	*httptest.Server
	mu        sync.Mutex
	rng       *rand.Rand
	delivered map[string]string // batch id → the event type answered 2xx
	refusals  int
}

func newChaosHooks(t *testing.T, seed int64) *chaosHooks {
	h := &chaosHooks{rng: rand.New(rand.NewPCG(uint64(seed), 0x686f6f6b)), delivered: map[string]string{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Type string `json:"type"`
			Data struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &ev); err != nil || ev.Data.ID == "" {
			http.Error(w, "undecodable event", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if r.URL.Path == "/down" || h.rng.Float64() < 0.3 {
			h.refusals++
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		// The terminal event: a batch's lifecycle events before it
		// (docs/api.md "Webhooks") may be retried past it.
		if ev.Type != "batch.queued" && ev.Type != "batch.in_progress" {
			h.delivered[ev.Data.ID] = ev.Type
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *chaosHooks) deliveredFor(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.delivered[id]
}

func (h *chaosHooks) refused() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refusals
}

// cancelBatch cancels a batch, retrying while the API restarts; it
// reports whether a cancel was accepted.
func cancelBatch(ctx context.Context, c openai.Client, id string) bool {
	for try := 0; try < 10; try++ {
		_, err := c.Batches.Cancel(ctx, id)
		if err == nil {
			return true
		}
		if s := statusOf(err); s != -1 && s < 500 {
			return false // terminal already: nothing to cancel
		}
		time.Sleep(time.Second)
	}
	return false
}

// workflowBatch submits the extra tenant's first batch: four workflow
// records of two steps each against callback, with a webhook that is never
// delivered.
func workflowBatch(ctx context.Context, tr *tenantRun, callback, hook string) (string, error) {
	var lines []byte
	for i := range 4 {
		id := fmt.Sprintf("wf-%d", i)
		tr.ids[0] = append(tr.ids[0], id)
		lines = append(lines, wfLine(id, map[string]any{"url": callback})...)
	}
	f, err := tr.client.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(lines), "wf.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		return "", fmt.Errorf("upload: %w", err)
	}
	tr.inputs[0] = f.ID
	b, err := tr.client.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, option.WithJSONSet("webhook_url", hook))
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	return b.ID, nil
}

// createTemplate creates the extra tenant's template: 20 inline rows every
// minute, with a webhook; its run is the tenant's second batch.
func createTemplate(ctx context.Context, baseURL string, tr *tenantRun, hook string) (string, error) {
	var reqs []map[string]any
	for i := range 20 {
		r := chatRow{id: fmt.Sprintf("tpl-r%02d", i), content: fmt.Sprintf("[[mock:sleep=20ms]] row %d from the template", i)}
		tr.ids[1] = append(tr.ids[1], r.id)
		reqs = append(reqs, r.request("gpt-4o-mini"))
	}
	body, _ := json.Marshal(map[string]any{"endpoint": "/v1/chat/completions", "completion_window": "24h",
		"schedule": "* * * * *", "requests": reqs, "webhook_url": hook})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/batches", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tr.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var tpl apiBatch
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &tpl) != nil || tpl.Status != "scheduled" {
		return "", fmt.Errorf("create: %d %s", resp.StatusCode, data)
	}
	return tpl.ID, nil
}

// templateRun waits for the template's run and returns its id; a template
// that fired more than once for one minute is an error.
func templateRun(ctx context.Context, baseURL string, tr *tenantRun, templateID string) (string, error) {
	for {
		var page struct {
			Data []apiBatch `json:"data"`
		}
		err := getJSON(ctx, baseURL, tr.key, "/v1/batches?template_id="+templateID, &page)
		switch {
		case err == nil && len(page.Data) == 1:
			return page.Data[0].ID, nil
		case err == nil && len(page.Data) > 1:
			return "", fmt.Errorf("one minute passed and the template made %d runs", len(page.Data))
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no run of template %s: %w", templateID, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// webhookOutcome is what the webhook check found.
type webhookOutcome struct{ delivered, failed, unsettled int }

// checkWebhooks waits until the webhook of every batch in keys (id → its
// tenant's key) is delivered or recorded failed, then
// checks each delivered one reached the receiver with the batch's terminal
// status, and that down's webhook, whose receiver always refuses, failed.
func checkWebhooks(t *testing.T, rt *localrun.Runtime, hooks *chaosHooks, keys map[string]string, down string) webhookOutcome {
	t.Helper()
	ctx := context.Background()
	settled := map[string]apiBatch{}
	// A completion webhook whose in_progress was recorded but never queued
	// (a function killed between the two) waits delivery.OrderWait for it,
	// then retries for chaosWebhookRetryFor.
	deadline := time.Now().Add(delivery.OrderWait + chaosWebhookRetryFor + 30*time.Second)
	for len(settled) < len(keys) && time.Now().Before(deadline) {
		for id, key := range keys {
			if _, ok := settled[id]; ok {
				continue
			}
			var b apiBatch
			if err := getJSON(ctx, rt.URL, key, "/v1/batches/"+id, &b); err == nil && b.WebhookDeliveries != nil &&
				(b.WebhookDeliveries.Status == "delivered" || b.WebhookDeliveries.Status == "failed") {
				settled[id] = b
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	var o webhookOutcome
	for id := range keys {
		b, ok := settled[id]
		switch {
		case !ok:
			o.unsettled++
			t.Errorf("batch %s: webhook neither delivered nor recorded failed", id)
		case b.WebhookDeliveries.Status == "delivered":
			o.delivered++
			if got := hooks.deliveredFor(id); got != "batch."+b.Status {
				t.Errorf("batch %s (%s): webhook recorded delivered; the receiver accepted %q", id, b.Status, got)
			}
		default:
			o.failed++
			// One whose receiver's circuit stayed open to the end of its
			// retries was never attempted, and says so.
			if d := b.WebhookDeliveries; d.Attempts == 0 && (d.LastError == nil || !strings.Contains(*d.LastError, "circuit")) {
				t.Errorf("batch %s: webhook failed with no attempt recorded and no reason", id)
			}
		}
		if id == down && ok && b.WebhookDeliveries.Status != "failed" {
			t.Errorf("batch %s: webhook to a receiver that always refuses is %s, want failed", id, b.WebhookDeliveries.Status)
		}
	}
	return o
}

// faultTable prints the faults injected, those at the invocations, then
// those at the SDK per operation (with the calls they are a share of), and
// fails the run below the bars if enforce. It returns the total.
func faultTable(t *testing.T, w io.Writer, faults map[string]int, sdk *awsfault.Injector, enforce bool) int {
	total := 0
	rows := [][]string{{"fault at the invocation", "count"}}
	for _, k := range faultOrder {
		rows = append(rows, []string{k, strconv.Itoa(faults[k])})
		total += faults[k]
	}
	table(w, rows)
	fmt.Fprintln(w)
	kinds := []awsfault.Kind{awsfault.Before, awsfault.After, awsfault.Conflict, awsfault.Throttle, awsfault.Die}
	rows = [][]string{{"AWS call", "calls", "before", "after", "conflict", "throttle", "die"}}
	injected, calls := sdk.Injected(), sdk.Calls()
	byKind := map[awsfault.Kind]int{}
	for _, op := range slices.Sorted(maps.Keys(calls)) {
		row := []string{op, strconv.Itoa(calls[op])}
		for _, k := range kinds {
			n := injected[op+" "+k.String()]
			byKind[k] += n
			total += n
			row = append(row, strconv.Itoa(n))
		}
		rows = append(rows, row)
	}
	row := []string{"all", strconv.Itoa(sumValues(calls))}
	for _, k := range kinds {
		row = append(row, strconv.Itoa(byKind[k]))
	}
	table(w, append(rows, row))
	if total < minFaults || byKind[awsfault.After] < minAfter || byKind[awsfault.Conflict] < minConflicts {
		report := t.Errorf
		if !enforce {
			report = t.Logf
		}
		report("faults: %d in all (want ≥ %d), %d after-effect (want ≥ %d), %d conflicts (want ≥ %d)",
			total, minFaults, byKind[awsfault.After], minAfter, byKind[awsfault.Conflict], minConflicts)
	}
	return total
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// sdkFaults fails AWS calls of the functions' invocations (not the API's,
// whose errors the client would see, nor the pollers'): conflicts on
// transactions; writes that take effect and fail all the same (the
// ambiguous timeout); reads whose answer is lost on the way back;
// throttles as if the SDK's retries ran out; lost sends; and functions
// that die between two calls. Rules are tried in order, so a call gets at
// most one fault.
func sdkFaults(seed uint64, renewal func(expr string) bool) *awsfault.Injector {
	inInvocation := func(ctx context.Context, _ any) bool {
		lc, ok := lambdacontext.FromContext(ctx)
		return ok && lc.AwsRequestID != ""
	}
	in := awsfault.New(seed)
	// Throttled lease renewals, first, so that no other rule takes them
	// (renewal rolls its own dice and counts what it throttles).
	isRenewal := awsfault.UpdateExpression(renewal)
	in.Add(awsfault.Rule{Service: "DynamoDB", Operation: "UpdateItem", Kind: awsfault.Throttle, Match: func(ctx context.Context, input any) bool {
		return inInvocation(ctx, input) && isRenewal(ctx, input)
	}})
	for _, r := range []awsfault.Rule{
		{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.Conflict, Prob: 0.60},
		{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.After, Prob: 0.12},
		{Service: "DynamoDB", Operation: "UpdateItem", Kind: awsfault.After, Prob: 0.12},
		{Service: "DynamoDB", Operation: "PutItem", Kind: awsfault.After, Prob: 0.12},
		{Service: "DynamoDB", Operation: "DeleteItem", Kind: awsfault.After, Prob: 0.12},
		{Service: "DynamoDB", Operation: "BatchWriteItem", Kind: awsfault.After, Prob: 0.12},
		{Service: "DynamoDB", Operation: "GetItem", Kind: awsfault.After, Prob: 0.05},
		{Service: "DynamoDB", Operation: "Query", Kind: awsfault.After, Prob: 0.04},
		{Service: "DynamoDB", Kind: awsfault.Throttle, Prob: 0.04},
		{Service: "SQS", Operation: "SendMessageBatch", Kind: awsfault.After, Prob: 0.12},
		{Service: "SQS", Operation: "SendMessageBatch", Kind: awsfault.Before, Prob: 0.05},
		{Service: "SQS", Operation: "SendMessage", Kind: awsfault.After, Prob: 0.12},
		{Service: "S3", Operation: "PutObject", Kind: awsfault.After, Prob: 0.12},
		{Service: "S3", Operation: "DeleteObjects", Kind: awsfault.After, Prob: 0.12},
		{Service: "S3", Operation: "GetObject", Kind: awsfault.After, Prob: 0.03},
		{Service: "S3", Kind: awsfault.Throttle, Prob: 0.03},
		{Kind: awsfault.Die, Prob: 0.005},
	} {
		r.Match = inInvocation
		in.Add(r)
	}
	return in
}

// endState prints the end-state checks: rows, what the caller checked,
// then what the run must leave behind beside the rows: no capacity taken,
// no chunk holding a lease.
func endState(t *testing.T, w io.Writer, rt *localrun.Runtime, checked [][]string) {
	ctx := context.Background()
	rows := append([][]string{{"end state", "value", "want"}}, checked...)
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
// returns how many cross-tenant probes it made and how many were not 404.
func checkIsolation(t *testing.T, rt *localrun.Runtime, tenants []*tenantRun) (probes, leaks int) {
	t.Helper()
	ctx := context.Background()
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
						leaks++
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
	return probes, leaks
}

// httpStatusErr turns a raw status into what statusOf reads.
func httpStatusErr(status int) error {
	if status == http.StatusOK {
		return nil
	}
	return &openai.Error{StatusCode: status}
}
