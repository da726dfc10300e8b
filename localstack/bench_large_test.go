//go:build bench

package localstack

// TestLargeBenchmark (`make bench`): the largest batches, the
// turnaround of small ones and what running them costs. Each scenario is a
// subtest that runs alone (`-run 'TestLargeBenchmark/turnaround'`) and
// writes its own section of BENCHMARKS.md, which TestEndToEndBenchmark keeps
// as it is (largeSections):
//
//   - large: 50,000 rows of 4,000 bytes (a 200 MB file, the input limit)
//     uploaded with the Uploads API in 4 MiB parts, at 100 ms and
//     max_concurrency 256, against the physical limit rows × latency ÷
//     capacity; the Go heap's peak while each function runs.
//   - turnaround: 200 batches of 10 rows, each created when the one before
//     has completed, at 0 ms: create → completed and create → first row.
//   - slow: 20,000 rows at 1 s and max_concurrency 512: what an executor
//     pays for rows that wait on their upstream.
//
// large and slow price their own counts per million rows (costLines).
// BENCH_LARGE_ROWS, BENCH_TURN_BATCHES and BENCH_SLOW_ROWS shrink them
// while working on them; the section then says it is not the full run.
// BENCH_HEAP_PROFILE=path writes a heap profile (go tool pprof) the first
// time the heap passes 400 MiB above its start (BENCH_HEAP_PROFILE_MIB
// another size): what holds it.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/files"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/resources"
)

// largeBenchCommand is the go test line the Makefile's bench target runs
// for these scenarios.
const largeBenchCommand = "go test -tags bench -run '^TestLargeBenchmark$' -count=1 -v -timeout 25m ./localstack"

const (
	largeRowsDefault = 50_000
	largeRowBytes    = 4_000 // 50,000 of them are 200,000,000 bytes, files.MaxBatchInput
	largeCap         = 256
	largeLatency     = 100 * time.Millisecond
	largePartBytes   = 4 << 20
	largeLimit       = 10 * time.Minute

	turnBatchesDefault = 200
	turnRows           = 10
	turnPoll           = 20 * time.Millisecond
	turnLimit          = time.Minute // one batch

	slowRowsDefault = 20_000
	slowCap         = 512
	slowLatency     = time.Second
	slowLimit       = 5 * time.Minute
)

// The bars of the largest batches, their turnaround and cost (BENCHMARKS.md).
const (
	barLargeRatio   = 1.15 // wall time ÷ rows × latency ÷ capacity
	barHeapShare    = 0.5  // a function's heap peak ÷ its configured memory
	barTurnP50      = time.Second
	barTurnP90      = 2 * time.Second
	barGBs100ms     = 1.0 // executor GB-seconds per 1,000 rows at 100 ms
	barGBs1s        = 5.0 // and at 1 s
	barCostPerMRows = 0.10
)

// The sections TestLargeBenchmark writes, by title.
const (
	largeTitle = "Largest batch"
	turnTitle  = "Small batches: turnaround"
	slowTitle  = "Slow upstream: 1 s a call"
)

func largeSections() []string { return []string{largeTitle, turnTitle, slowTitle} }

func TestLargeBenchmark(t *testing.T) {
	t.Run("large", func(t *testing.T) {
		rows := envInt(t, "BENCH_LARGE_ROWS", largeRowsDefault, 1)
		writeSection(t, largeTitle, runLarge(t, rows).markdown())
	})
	t.Run("turnaround", func(t *testing.T) {
		n := envInt(t, "BENCH_TURN_BATCHES", turnBatchesDefault, 1)
		writeSection(t, turnTitle, runTurnaround(t, n).markdown())
	})
	t.Run("slow", func(t *testing.T) {
		rows := envInt(t, "BENCH_SLOW_ROWS", slowRowsDefault, 1)
		writeSection(t, slowTitle, runSlow(t, rows).markdown())
	})
}

// writeSection replaces the section of BENCHMARKS.md titled title (to the
// next "## ") with md, or adds it before "## Executor memory", then fails
// the test once for every bar md's figures miss (failures).
func writeSection(t *testing.T, title string, s section) {
	t.Helper()
	path := filepath.Join(repoRoot(t), "BENCHMARKS.md")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := s.md
	fmt.Println(md)
	doc := string(old)
	if i := strings.Index(doc, "\n## "+title); i >= 0 {
		end := len(doc)
		if j := strings.Index(doc[i+1:], "\n## "); j >= 0 {
			end = i + 1 + j
		}
		doc = doc[:i] + "\n" + md + doc[end:]
	} else if i := strings.Index(doc, "\n## Executor memory"); i >= 0 {
		doc = doc[:i] + "\n" + md + doc[i:]
	} else {
		doc += "\n" + md
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range s.figures {
		if !f.pass {
			t.Errorf("%s: %s, bar %s", f.name, f.value, f.bar)
		}
	}
}

// section is one scenario's part of BENCHMARKS.md and its figures.
type section struct {
	md      string
	figures []figure
}

// tableOf writes figures as the results table.
func tableOf(w func(string, ...any), fs []figure) {
	w("| Figure | Value | Bar | Result |")
	w("| --- | --- | --- | --- |")
	for _, f := range fs {
		result := "pass"
		if f.bar == "" {
			result = ""
		} else if !f.pass {
			result = "**FAIL**"
		}
		w("| %s | %s | %s | %s |", f.name, f.value, f.bar, result)
	}
}

// runHeader is the lines every section starts with: when, where, with what.
func runHeader(w func(string, ...any), load string) {
	w("- Date: %s; commit %s; load average at the start %s (%d cores, shared with other sessions)",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit(), load, goruntime.NumCPU())
	w("- Command: `%s` (this section alone: `-run 'TestLargeBenchmark/<name>'`), on the emulator at %s", largeBenchCommand, os.Getenv("AWS_ENDPOINT_URL"))
	if one, err := strconv.ParseFloat(strings.Fields(load + " x")[0], 64); err == nil && one > 2*float64(goruntime.NumCPU()) {
		w("- **Load was high** (more than twice the cores: other sessions' work shared the machine): times are longer than on an idle " +
			"machine, counts (requests, invocations, units) are not")
	}
}

// meteredRuntime is a counted runtime (startBench) with the Go heap sampled
// per function and DynamoDB capacity units and S3 bytes counted.
type meteredRuntime struct {
	*benchRuntime
	heap  *heapByFunction
	units *awsUnits
	api   *apiCalls
}

func startMetered(t *testing.T, model string, capacity int, latency time.Duration) *meteredRuntime {
	t.Helper()
	m := &meteredRuntime{heap: newHeapByFunction(), units: &awsUnits{}, api: &apiCalls{}}
	yaml := fmt.Sprintf("models:\n  - {name: %s, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: %d}\n", model, capacity)
	m.benchRuntime = startBench(t, "", yaml, m.heap.tune, m.units.tune)
	m.Mock.SetOptions(mockup.Options{Latency: latency})
	return m
}

// client is an official client of tenant whose calls count as the api
// function's (API Gateway requests, the api's time and heap).
func (m *meteredRuntime) client(t *testing.T, tenant string) openai.Client {
	t.Helper()
	key, err := m.Key(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	m.api.next, m.api.heap = http.DefaultTransport, m.heap
	return openai.NewClient(option.WithBaseURL(m.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: m.api}))
}

// counts is what a measured run cost, for its figures and its price.
type counts struct {
	aws       fnCounts
	ran       map[string]time.Duration // by function, queue-fed invocations
	invoked   map[string]int
	apiCalls  int64
	apiTime   time.Duration
	rru, wru  float64
	wruByOp   map[string]float64
	s3Bytes   int64
	heapPeak  map[string]uint64
	heapAlone map[string]uint64 // while no other function ran
	heapBase  uint64
	longest   map[string]time.Duration
	mockPeak  int64
	mockCalls int64
	memory    map[string]int // MiB, resources.Define
}

// mark starts counting: what the runtime did before is left out.
func (m *meteredRuntime) mark() func(model string) counts {
	m.Mock.Reset()
	m.aws.markBefore()
	aws0 := m.aws.snapshot()
	ran0, n0 := m.inv.all()
	calls0, time0 := m.api.totals()
	rru0, wru0, s30 := m.units.totals()
	byOp0 := m.units.writesByOp()
	m.heap.start()
	return func(model string) counts {
		c := counts{aws: m.aws.snapshot().since(aws0), ran: map[string]time.Duration{}, invoked: map[string]int{}, memory: map[string]int{}}
		ran, n := m.inv.all()
		for fn := range ran {
			c.ran[fn], c.invoked[fn] = ran[fn]-ran0[fn], n[fn]-n0[fn]
		}
		calls, tm := m.api.totals()
		c.apiCalls, c.apiTime = calls-calls0, tm-time0
		rru, wru, s3 := m.units.totals()
		c.rru, c.wru, c.s3Bytes = rru-rru0, wru-wru0, s3-s30
		c.wruByOp = m.units.writesByOp()
		for op, n := range byOp0 {
			c.wruByOp[op] -= n
		}
		c.heapBase, c.heapPeak, c.heapAlone, c.longest = m.heap.stop()
		stats := m.Mock.Stats()
		c.mockPeak, c.mockCalls = stats.PeakInFlight[model], stats.Requests
		for _, f := range resources.Define(m.prefix).Functions {
			c.memory[f.Name] = f.Memory
		}
		return c
	}
}

// gbSeconds is fn's invocations' run time × its memory.
func (c counts) gbSeconds(fn string) float64 {
	if fn == "api" {
		return c.apiTime.Seconds() * float64(c.memory["api"]) / 1024
	}
	return c.ran[fn].Seconds() * float64(c.memory[fn]) / 1024
}

func (v *invocations) all() (map[string]time.Duration, map[string]int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ran, n := map[string]time.Duration{}, map[string]int{}
	for fn, d := range v.ran {
		ran[fn], n[fn] = d, v.n[fn]
	}
	return ran, n
}

// heapByFunction samples the process's Go heap (runtime/metrics
// /memory/classes/heap/objects:bytes: live objects and those not yet
// collected) every millisecond and keeps, per function, the highest
// sample above the heap at start taken while an invocation of it ran, and
// the highest taken while it was the only function running, divided by
// its invocations running then (each is a sandbox of its own deployed). The
// functions share the process, so a function's figure is the whole
// process's heap while it ran: an upper bound of its own.
type heapByFunction struct {
	mu       sync.Mutex
	active   map[string]int
	peak     map[string]uint64
	alone    map[string]uint64
	longest  map[string]time.Duration
	base     uint64
	profiled bool
	quit     chan struct{}
	done     chan struct{}
}

func newHeapByFunction() *heapByFunction {
	return &heapByFunction{active: map[string]int{}}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

func heapNow() uint64 {
	s := slices.Clone(heapSample)
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// tune adds the invocation hooks to a runtime's options.
func (h *heapByFunction) tune(o *localrun.Options) {
	on, after := o.OnInvoke, o.AfterInvoke
	o.OnInvoke = func(fn string, ev events.SQSEvent) error {
		h.enter(fn)
		var err error
		if on != nil {
			err = on(fn, ev)
		}
		if err != nil {
			h.leave(fn, 0)
		}
		return err
	}
	o.AfterInvoke = func(fn string, d time.Duration) {
		h.leave(fn, d)
		if after != nil {
			after(fn, d)
		}
	}
}

func (h *heapByFunction) enter(fn string) {
	h.mu.Lock()
	h.active[fn]++
	h.mu.Unlock()
}

func (h *heapByFunction) leave(fn string, d time.Duration) {
	h.mu.Lock()
	h.active[fn]--
	if h.longest != nil && d > h.longest[fn] {
		h.longest[fn] = d
	}
	h.mu.Unlock()
}

func (h *heapByFunction) start() {
	goruntime.GC()
	h.mu.Lock()
	h.base, h.peak, h.alone, h.longest = heapNow(), map[string]uint64{}, map[string]uint64{}, map[string]time.Duration{}
	h.quit, h.done = make(chan struct{}), make(chan struct{})
	h.mu.Unlock()
	go func() {
		defer close(h.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			v := heapNow()
			h.sample(v)
			select {
			case <-h.quit:
				return
			case <-tick.C:
			}
		}
	}()
}

// sample keeps v as a peak of the functions running now.
func (h *heapByFunction) sample(v uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v < h.base {
		return
	}
	v -= h.base
	var running []string
	for fn, n := range h.active {
		if n > 0 {
			running = append(running, fn)
			h.peak[fn] = max(h.peak[fn], v)
		}
	}
	if len(running) == 1 {
		fn := running[0]
		h.alone[fn] = max(h.alone[fn], v/uint64(h.active[fn]))
	}
	if p := os.Getenv("BENCH_HEAP_PROFILE"); p != "" && v > profileAt() && !h.profiled {
		h.profiled = true
		if f, err := os.Create(p); err == nil {
			pprof.WriteHeapProfile(f)
			f.Close()
			fmt.Fprintf(os.Stderr, "heap profile at %d MiB, running %v\n", v>>20, running)
		}
	}
}

// profileAt is the heap above its start at which BENCH_HEAP_PROFILE is
// written: BENCH_HEAP_PROFILE_MIB, 400 MiB unless set.
func profileAt() uint64 {
	if n, err := strconv.Atoi(os.Getenv("BENCH_HEAP_PROFILE_MIB")); err == nil && n > 0 {
		return uint64(n) << 20
	}
	return 400 << 20
}

func (h *heapByFunction) stop() (uint64, map[string]uint64, map[string]uint64, map[string]time.Duration) {
	close(h.quit)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.base, h.peak, h.alone, h.longest
}

// apiCalls is the client's transport: each call is an API Gateway request
// and an api invocation, which is running while the call is (for the heap's
// figures while heap is set).
type apiCalls struct {
	next  http.RoundTripper
	heap  *heapByFunction
	n     atomic.Int64
	nanos atomic.Int64
}

func (a *apiCalls) RoundTrip(r *http.Request) (*http.Response, error) {
	h := a.heap // nil: the call's heap is not the api's (polls)
	if h != nil {
		h.enter("api")
	}
	began := time.Now()
	end := func() {
		a.nanos.Add(int64(time.Since(began)))
		if h != nil {
			h.leave("api", 0)
		}
	}
	resp, err := a.next.RoundTrip(r)
	a.n.Add(1)
	if err != nil {
		end()
		return nil, err
	}
	resp.Body = &apiBody{ReadCloser: resp.Body, end: end}
	return resp, nil
}

func (a *apiCalls) totals() (int64, time.Duration) { return a.n.Load(), time.Duration(a.nanos.Load()) }

type apiBody struct {
	io.ReadCloser
	once sync.Once
	end  func()
}

func (b *apiBody) Close() error {
	b.once.Do(b.end)
	return b.ReadCloser.Close()
}

// awsUnits estimates the DynamoDB capacity units of every request the
// runtime makes (on-demand pricing's read and write request units) and
// counts the bytes it puts into S3. Units are estimated from sizes, as
// DynamoDB rounds them: a write a unit per KB of each item it writes (the
// item's request JSON, a little over its stored size), twice in a
// transaction; a read a unit per 4 KB of the items it returns (the
// response), half of that when eventually consistent, twice in a
// transaction.
type awsUnits struct {
	next       http.RoundTripper
	mu         sync.Mutex
	rru, wru   float64
	wruByOp    map[string]float64 // "DynamoDB.<operation>" → its write units
	s3PutBytes int64
}

func (u *awsUnits) tune(o *localrun.Options) {
	u.next = o.AWS.HTTPClient.(*http.Client).Transport
	o.AWS.HTTPClient = &http.Client{Transport: u}
}

func (u *awsUnits) totals() (float64, float64, int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.rru, u.wru, u.s3PutBytes
}

// writesByOp is the write units of each DynamoDB operation so far.
func (u *awsUnits) writesByOp() map[string]float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.wruByOp)
}

func (u *awsUnits) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	service, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	switch {
	case service == "S3" && (op == "PutObject" || op == "UploadPart") && r.ContentLength > 0:
		u.mu.Lock()
		u.s3PutBytes += r.ContentLength
		u.mu.Unlock()
	case service == "DynamoDB":
		return u.dynamo(r, op)
	}
	return u.next.RoundTrip(r)
}

func (u *awsUnits) dynamo(r *http.Request, op string) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		ConsistentRead bool
		TransactItems  []json.RawMessage
		RequestItems   map[string]json.RawMessage
	}
	_ = json.Unmarshal(body, &req)
	resp, err := u.next.RoundTrip(r2)
	if err != nil {
		return nil, err
	}
	var rru, wru float64
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem":
		wru = kbUnits(len(body), 1024)
	case "TransactWriteItems":
		for _, it := range req.TransactItems {
			wru += 2 * kbUnits(len(it), 1024)
		}
	case "BatchWriteItem":
		wru = kbUnits(len(body), 1024)
	case "GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems":
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(out))
		rru = kbUnits(len(out), 4096)
		switch {
		case op == "TransactGetItems":
			rru *= 2
		case !req.ConsistentRead:
			rru /= 2
		}
	}
	u.mu.Lock()
	u.rru, u.wru = u.rru+rru, u.wru+wru
	if wru > 0 {
		if u.wruByOp == nil {
			u.wruByOp = map[string]float64{}
		}
		u.wruByOp[op] += wru
	}
	u.mu.Unlock()
	return resp, nil
}

// kbUnits is size in units of unit bytes, rounded up, at least one.
func kbUnits(size, unit int) float64 { return math.Max(1, math.Ceil(float64(size)/float64(unit))) }

// batchTimes is when a watched batch was seen to reach each stage, from
// its create.
type batchTimes struct {
	inProgress, firstResult, terminal time.Duration
	final                             *openai.Batch
	finished                          bool
}

// watch gets batch id every poll (every runningPoll, when longer, while
// its rows run), and its first page of rows until one is there, until the
// batch is terminal or deadline passes.
func watch(t *testing.T, c openai.Client, id string, created time.Time, poll, runningPoll time.Duration, deadline time.Time) batchTimes {
	t.Helper()
	var bt batchTimes
	ctx := context.Background()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		b, err := c.Batches.Get(ctx, id, option.WithRequestTimeout(30*time.Second))
		at := time.Since(created)
		if err == nil {
			bt.final = b
			if bt.inProgress == 0 && b.Status != openai.BatchStatusValidating {
				bt.inProgress = at
			}
		}
		if bt.firstResult == 0 && bt.inProgress != 0 {
			var page struct {
				Data []json.RawMessage `json:"data"`
			}
			if err := c.Get(ctx, "batches/"+id+"/rows?limit=1", nil, &page); err == nil && len(page.Data) > 0 {
				bt.firstResult = time.Since(created)
			}
		}
		if bt.final != nil && terminal[bt.final.Status] {
			bt.terminal, bt.finished = at, true
			return bt
		}
		if time.Now().After(deadline) {
			if bt.final == nil {
				t.Fatalf("get batch %s: every get failed, last: %v", id, err)
			}
			bt.terminal = at
			return bt
		}
		if runningPoll > poll && running(bt) {
			time.Sleep(runningPoll - poll)
			tick.Reset(poll)
		}
		<-tick.C
	}
}

// running says whether bt's batch is between its first result and 90% of
// its rows done: then no figure needs watch's poll resolution, and each
// poll is an API call the emulator serves on the cores the service runs
// on, so watch polls every runningPoll instead.
func running(bt batchTimes) bool {
	if bt.firstResult == 0 || bt.final == nil || bt.final.RequestCounts.Total == 0 {
		return false
	}
	done := bt.final.RequestCounts.Completed + bt.final.RequestCounts.Failed
	return done*10 < bt.final.RequestCounts.Total*9
}

func outcomeOf(bt batchTimes) string {
	b := bt.final
	if !bt.finished {
		return fmt.Sprintf("still %s after %.0f s, %d rows done", b.Status, bt.terminal.Seconds(), b.RequestCounts.Completed+b.RequestCounts.Failed)
	}
	return fmt.Sprintf("%s, %d rows completed", b.Status, b.RequestCounts.Completed)
}

// largeFigures is the large scenario's run.
type largeFigures struct {
	rows, parts int
	bytes       int64
	load        string
	upload      time.Duration
	times       batchTimes
	c           counts
	last        lastRound
	idle        slotPhases
}

// runLarge writes the rows to a file, uploads it with the Uploads API in
// 4 MiB parts and runs it as one batch, every stage measured.
func runLarge(t *testing.T, rows int) largeFigures {
	path, size := writeLargeInput(t, rows)
	m := startMetered(t, "big-256", largeCap, largeLatency)
	defer m.Close()
	c := m.client(t, "bench-large")
	f := largeFigures{rows: rows, bytes: size, load: loadAverage()}
	end := m.mark()
	began := time.Now()
	fileID, parts := uploadFile(t, c, path, size)
	f.upload, f.parts = time.Since(began), parts
	m.api.heap = nil // the polls below are not what the api holds at its peak
	t.Logf("large: uploaded %d bytes in %d parts in %.1f s", size, parts, f.upload.Seconds())
	created := time.Now()
	use := startSlotUse(func() int64 { return m.Mock.InFlight("big-256") }, largeCap, created)
	b := createBatch(t, c, fileID)
	f.times = watch(t, c, b.ID, created, 100*time.Millisecond, time.Second, created.Add(largeLimit))
	f.idle = use.stop(f.times.terminal)
	f.c = end("big-256")
	f.last = lastRoundOf(t, m.benchRuntime, b.ID, largeCap)
	t.Logf("large: last round: %s", f.last)
	first, shared := m.runs.snapshot()
	var delivered time.Time
	for _, at := range first {
		if delivered.IsZero() || at.Before(delivered) {
			delivered = at
		}
	}
	t.Logf("large: first work message at an executor %.1f s after create; invocations by messages %v", delivered.Sub(created).Seconds(), shared)
	t.Logf("large: %s; in progress %.1f s, first result %.1f s, terminal %.1f s", outcomeOf(f.times),
		f.times.inProgress.Seconds(), f.times.firstResult.Seconds(), f.times.terminal.Seconds())
	return f
}

// writeLargeInput writes rows chat rows of largeRowBytes each (their
// content padded with words) to a temporary file, so that the test's own
// heap does not hold them.
func writeLargeInput(t *testing.T, rows int) (string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "large.jsonl")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w := bufio.NewWriter(out)
	words := strings.Repeat("lorem ipsum dolor sit amet ", largeRowBytes/20)
	for i := range rows {
		line := func(content string) []byte {
			b, _ := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("r%06d", i), "method": "POST", "url": "/v1/chat/completions",
				"body": map[string]any{"model": "big-256", "messages": []any{map[string]any{"role": "user", "content": content}}}})
			return b
		}
		prefix := fmt.Sprintf("row %d ", i)
		pad := largeRowBytes - 1 - len(line(prefix))
		w.Write(line(prefix + words[:pad]))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	st, err := out.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return path, st.Size()
}

// uploadFile uploads the file at path with the Uploads API in parts of
// largePartBytes, read from the file one at a time.
func uploadFile(t *testing.T, c openai.Client, path string, size int64) (string, int) {
	t.Helper()
	ctx := context.Background()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	u, err := c.Uploads.New(ctx, openai.UploadNewParams{Bytes: size, Filename: "large.jsonl", MimeType: "application/jsonl", Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for off := int64(0); off < size; off += largePartBytes {
		p, err := c.Uploads.Parts.New(ctx, u.ID, openai.UploadPartNewParams{Data: io.NewSectionReader(in, off, min(largePartBytes, size-off))})
		if err != nil {
			t.Fatalf("part at %d: %v", off, err)
		}
		parts = append(parts, p.ID)
	}
	done, err := c.Uploads.Complete(ctx, u.ID, openai.UploadCompleteParams{PartIDs: parts})
	if err != nil {
		t.Fatal(err)
	}
	return done.File.ID, len(parts)
}

func (f largeFigures) limit() time.Duration {
	return time.Duration(float64(f.rows) * float64(largeLatency) / largeCap)
}

func (f largeFigures) figures() []figure {
	wall := f.times.terminal
	ratio := wall.Seconds() / f.limit().Seconds()
	gbs := f.c.gbSeconds("executor") * 1000 / float64(f.rows)
	fs := []figure{
		{"Batch result", outcomeOf(f.times), fmt.Sprintf("completed, %d rows", f.rows), f.times.finished && f.times.final.RequestCounts.Completed == int64(f.rows)},
		{"Upload (Uploads API, 4 MiB parts)", fmt.Sprintf("%.1f s (%d parts, %.0f MB/s)", f.upload.Seconds(), f.parts, float64(f.bytes)/1e6/f.upload.Seconds()), "", true},
		{"Create → in_progress (validation and plan)", fmt.Sprintf("%.1f s; the longest dispatcher invocation %.1f s", f.times.inProgress.Seconds(), f.c.longest["dispatcher"].Seconds()), "", true},
		{"Create → first row's result", fmt.Sprintf("%.1f s", f.times.firstResult.Seconds()), "", true},
		{"Wall time (create → completed) ÷ physical limit", fmt.Sprintf("%.2f× (%.1f s ÷ %.1f s)", ratio, wall.Seconds(), f.limit().Seconds()),
			fmt.Sprintf("≤ %.2f×", barLargeRatio), f.times.finished && ratio <= barLargeRatio},
		{fmt.Sprintf("Idle capacity by phase (seconds of all %d slots)", largeCap), f.idle.String(), "", true},
		{"Last round (the batch's last chunk on each lane)", f.last.String(), "", true},
		{"Peak in-flight requests at the mock", fmt.Sprint(f.c.mockPeak), fmt.Sprintf("≤ %d", largeCap), f.c.mockPeak <= largeCap},
		{"AWS requests per 1,000 rows (functions; api apart)", fmt.Sprintf("%.1f (api and tick %.1f)",
			float64(f.c.aws.attributed())*1000/float64(f.rows), float64(f.c.aws.of(unattributed))*1000/float64(f.rows)), "", true},
		{"Executor GB-seconds per 1,000 rows", fmt.Sprintf("%.2f", gbs), fmt.Sprintf("≤ %.1f", barGBs100ms), gbs <= barGBs100ms},
	}
	return append(fs, heapFigures(f.c)...)
}

// heapFigures is each function's heap peak against half its memory.
func heapFigures(c counts) []figure {
	var fs []figure
	fns := slices.Sorted(func(yield func(string) bool) {
		for fn := range c.heapPeak {
			if !yield(fn) {
				return
			}
		}
	})
	for _, fn := range fns {
		alone, ok := c.heapAlone[fn]
		peak, half := float64(alone)/(1<<20), float64(c.memory[fn])*barHeapShare
		value := fmt.Sprintf("%.0f MiB an invocation alone, %.0f MiB with others", peak, float64(c.heapPeak[fn])/(1<<20))
		if !ok {
			value = fmt.Sprintf("never alone; %.0f MiB with others", float64(c.heapPeak[fn])/(1<<20))
		}
		fs = append(fs, figure{fmt.Sprintf("Heap peak while %s ran", fn), value,
			fmt.Sprintf("≤ %.0f MiB (half of %d MB)", half, c.memory[fn]), ok && peak <= half})
	}
	return fs
}

func (f largeFigures) markdown() section {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	fs := f.figures()
	w("## %s: %d rows of %d bytes (%.0f MB) through the Uploads API", largeTitle, f.rows, largeRowBytes, float64(f.bytes)/1e6)
	w("")
	runHeader(w, f.load)
	if f.rows != largeRowsDefault {
		w("- **Not the full run**: BENCH_LARGE_ROWS=%d (the bars are for %d rows, 200 MB)", f.rows, largeRowsDefault)
	}
	w("")
	w("The file is written to disk and uploaded with the official client's Uploads API (`uploads.create`, a `parts.create` per %d MiB "+
		"read from the file, `complete`), then run as one batch of model `big-256` (provider openai at the mock, `max_concurrency: %d`, "+
		"every call answered after %d ms), `batches.get` every 100 ms (every second from the first result until 90%% of the rows are done) and the first page of `GET /v1/batches/{id}/rows` every 100 ms until it holds the first result. The physical "+
		"limit is rows × latency ÷ capacity: no service can do better at that cap.",
		largePartBytes>>20, largeCap, largeLatency.Milliseconds())
	w("")
	tableOf(w, fs)
	w("")
	w("Heap: the Go heap (`/memory/classes/heap/objects:bytes`, live objects and those not yet collected) sampled every millisecond, "+
		"above %.0f MiB before the upload. Every function runs in this one process, so a function's peak is the process's "+
		"while one of its invocations ran (the api's: while one of the upload's calls was open), and the peak while it was the only one running divided by its invocations running then (deployed, each has a sandbox of its own): an upper bound of its own heap, which the process's other work (the mock provider, this client) adds to; "+
		"a deployed function adds its runtime and binary (about 20–30 MB) to it.", float64(f.c.heapBase)/(1<<20))
	w("")
	awsTable(w, f.c, f.rows)
	w("")
	costLines(w, f.c, f.rows, f.times.final, largeLatency)
	return section{b.String(), fs}
}

// awsTable writes the run's AWS requests and invocations by function.
func awsTable(w func(string, ...any), c counts, rows int) {
	w("| Function | Invocations | Run time | AWS requests | Per 1,000 rows | Most of them |")
	w("| --- | ---: | ---: | ---: | ---: | --- |")
	for _, fn := range []string{"dispatcher", "executor", "finalizer", "webhook", "deadletter"} {
		w("| %s | %d | %.1f s | %d | %.1f | %s |", fn, c.invoked[fn], c.ran[fn].Seconds(), c.aws.of(fn), float64(c.aws.of(fn))*1000/float64(rows), topOps(c.aws[fn], 4))
	}
	w("| api, tick sender, schedule firer | %d client calls | %.1f s | %d | %.1f | %s |", c.apiCalls, c.apiTime.Seconds(),
		c.aws.of(unattributed), float64(c.aws.of(unattributed))*1000/float64(rows), topOps(c.aws[unattributed], 4))
}

// turnFigures is the turnaround scenario's run.
type turnFigures struct {
	n                        int
	load                     string
	total, first, inProgress []time.Duration
	outcomes                 map[string]int
	c                        counts
}

// runTurnaround creates n batches of turnRows rows one after another,
// each when the one before has ended, and times each from its create.
func runTurnaround(t *testing.T, n int) turnFigures {
	m := startMetered(t, "quick-64", 64, 0)
	defer m.Close()
	c := m.client(t, "bench-turnaround")
	rows := nRows(turnRows, "turnaround")
	for i := range rows {
		rows[i].model = "quick-64"
	}
	data := jsonlRows(rows)
	f := turnFigures{n: n, load: loadAverage(), outcomes: map[string]int{}}
	end := m.mark()
	for i := range n {
		file := upload(t, c, fmt.Sprintf("turn-%d.jsonl", i), data)
		created := time.Now()
		b := createBatch(t, c, file.ID)
		bt := watch(t, c, b.ID, created, turnPoll, 0, created.Add(turnLimit))
		f.total, f.first, f.inProgress = append(f.total, bt.terminal), append(f.first, bt.firstResult), append(f.inProgress, bt.inProgress)
		f.outcomes[outcomeOf(bt)]++
	}
	f.c = end("quick-64")
	t.Logf("turnaround: p50 %.2f s, p90 %.2f s; first result p50 %.2f s", pct(f.total, 50).Seconds(), pct(f.total, 90).Seconds(), pct(f.first, 50).Seconds())
	return f
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[max(0, (len(s)*p+99)/100-1)]
}

func (f turnFigures) figures() []figure {
	done := f.outcomes[fmt.Sprintf("completed, %d rows completed", turnRows)]
	p50, p90 := pct(f.total, 50), pct(f.total, 90)
	return []figure{
		{"Batches completed", fmt.Sprintf("%d of %d", done, f.n), fmt.Sprintf("%d", f.n), done == f.n},
		{"Create → completed, p50", fmt.Sprintf("%.2f s", p50.Seconds()), fmt.Sprintf("≤ %.0f s", barTurnP50.Seconds()), p50 <= barTurnP50},
		{"Create → completed, p90", fmt.Sprintf("%.2f s", p90.Seconds()), fmt.Sprintf("≤ %.0f s", barTurnP90.Seconds()), p90 <= barTurnP90},
		{"Create → completed, max", fmt.Sprintf("%.2f s", pct(f.total, 100).Seconds()), "", true},
		{"Create → first row's result, p50 / p90", fmt.Sprintf("%.2f s / %.2f s", pct(f.first, 50).Seconds(), pct(f.first, 90).Seconds()), "", true},
		{"Create → in_progress, p50 / p90", fmt.Sprintf("%.2f s / %.2f s", pct(f.inProgress, 50).Seconds(), pct(f.inProgress, 90).Seconds()), "", true},
	}
}

func (f turnFigures) markdown() section {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	fs := f.figures()
	w("## %s: %d batches of %d rows, one after another", turnTitle, f.n, turnRows)
	w("")
	runHeader(w, f.load)
	if f.n != turnBatchesDefault {
		w("- **Not the full run**: BENCH_TURN_BATCHES=%d (the bars are for %d)", f.n, turnBatchesDefault)
	}
	w("")
	w("Each batch's file is uploaded (not timed), the batch created, and `batches.get` and the first page of "+
		"`GET /v1/batches/{id}/rows` called every %d ms until it is terminal; the next batch is created after that. Model `quick-64` "+
		"(`max_concurrency: 64`) at the mock, which answers at once; dispatcher tick every %.0f s (as deployed), so what is timed is "+
		"the path from the create through the queues. Times are from just before the create call to the get that saw the stage.",
		turnPoll.Milliseconds(), benchTick.Seconds())
	w("")
	tableOf(w, fs)
	w("")
	awsTable(w, f.c, f.n*turnRows)
	return section{b.String(), fs}
}

// slowFigures is the slow-upstream scenario's run.
type slowFigures struct {
	rows  int
	load  string
	times batchTimes
	c     counts
}

// runSlow runs rows small rows as one batch at 1 s a call and
// max_concurrency 512.
func runSlow(t *testing.T, rows int) slowFigures {
	m := startMetered(t, "slow-512", slowCap, slowLatency)
	defer m.Close()
	c := m.client(t, "bench-slow")
	in := nRows(rows, "slow")
	for i := range in {
		in[i].model = "slow-512"
	}
	data := jsonlRows(in)
	f := slowFigures{rows: rows, load: loadAverage()}
	end := m.mark()
	file := upload(t, c, "slow.jsonl", data)
	created := time.Now()
	b := createBatch(t, c, file.ID)
	f.times = watch(t, c, b.ID, created, time.Second, 0, created.Add(slowLimit))
	f.c = end("slow-512")
	t.Logf("slow: %s in %.1f s; executor %d invocations ran %.1f s", outcomeOf(f.times), f.times.terminal.Seconds(),
		f.c.invoked["executor"], f.c.ran["executor"].Seconds())
	return f
}

func (f slowFigures) figures() []figure {
	limit := time.Duration(float64(f.rows) * float64(slowLatency) / slowCap)
	ratio := f.times.terminal.Seconds() / limit.Seconds()
	gbs := f.c.gbSeconds("executor") * 1000 / float64(f.rows)
	inFlight := float64(f.c.mockCalls) * slowLatency.Seconds() / f.c.ran["executor"].Seconds()
	cost := costOf(f.c, f.rows).total()
	return []figure{
		{"Batch result", outcomeOf(f.times), fmt.Sprintf("completed, %d rows", f.rows), f.times.finished && f.times.final.RequestCounts.Completed == int64(f.rows)},
		{"Wall time (create → completed) ÷ physical limit", fmt.Sprintf("%.2f× (%.1f s ÷ %.1f s)", ratio, f.times.terminal.Seconds(), limit.Seconds()), "", true},
		{"Peak in-flight requests at the mock", fmt.Sprint(f.c.mockPeak), fmt.Sprintf("≤ %d", slowCap), f.c.mockPeak <= slowCap},
		{"Executor invocations; rows in flight per invocation-second", fmt.Sprintf("%d; %.0f", f.c.invoked["executor"], inFlight), "", true},
		{"Executor GB-seconds per 1,000 rows", fmt.Sprintf("%.2f", gbs), fmt.Sprintf("≤ %.0f", barGBs1s), gbs <= barGBs1s},
		{"AWS cost per million rows", fmt.Sprintf("$%.4f", cost), fmt.Sprintf("≤ $%.2f", barCostPerMRows), cost <= barCostPerMRows},
	}
}

func (f slowFigures) markdown() section {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	fs := f.figures()
	w("## %s, %d rows at max_concurrency %d", slowTitle, f.rows, slowCap)
	w("")
	runHeader(w, f.load)
	if f.rows != slowRowsDefault {
		w("- **Not the full run**: BENCH_SLOW_ROWS=%d (the bars are for %d)", f.rows, slowRowsDefault)
	}
	w("")
	w("One batch of %d small chat rows (`files.create`, then the batch, `batches.get` every second) of model `slow-512` at the mock, "+
		"which answers every call after %.0f s. Rows in flight per invocation-second: the mock's calls × latency ÷ the executor "+
		"invocations' run time, what an executor's GB-seconds buy.", f.rows, slowLatency.Seconds())
	w("")
	tableOf(w, fs)
	w("")
	awsTable(w, f.c, f.rows)
	w("")
	costLines(w, f.c, f.rows, f.times.final, slowLatency)
	return section{b.String(), fs}
}

// Public list prices, region us-east-1, from the providers' pricing pages
// (aws.amazon.com/{lambda,sqs,dynamodb,s3,api-gateway}/pricing,
// openai.com/api/pricing) as of 2025-06; the first paid tier, no free tier.
const (
	priceLambdaGBs     = 0.0000133334 // $ per GB-second, arm64
	priceLambdaRequest = 0.20 / 1e6   // $ per invocation
	priceSQSRequest    = 0.40 / 1e6   // standard queue, per request (64 KB)
	priceDynamoWRU     = 0.625 / 1e6  // on-demand, standard table class, per write request unit
	priceDynamoRRU     = 0.125 / 1e6  // per read request unit
	priceS3Put         = 0.005 / 1e3  // S3 Standard PUT, COPY, POST, LIST
	priceS3Get         = 0.0004 / 1e3 // GET, HEAD and the rest
	priceS3GBMonth     = 0.023        // S3 Standard storage, first 50 TB
	priceAPIGateway    = 3.50 / 1e6   // REST API (infra/api.go), first 333 million a month
	priceModelIn       = 0.15 / 1e6   // gpt-4o-mini, $ per input token, the reference model
	priceModelOut      = 0.60 / 1e6   // $ per output token
)

// storedDays is how long the bytes a batch puts stay in S3 at the
// defaults (docs/design.md "Expiry"): its input file's expiry class
// (files.DefaultTTL and files.InputKept, rounded up to a class) or its
// parts' (PartsExpiry), the longer; S3's lifecycle may take a day more.
func storedDays() float64 {
	tag, _ := resources.ExpiryTagFor(files.DefaultTTL + files.InputKept)
	input, _ := resources.ExpiryOf(tag)
	return max(input, resources.Define("relay").PartsExpiry).Hours() / 24
}

// costItem is one priced line: how many per million rows, at what price.
type costItem struct {
	name, unit string
	perM       float64 // units per million rows
	price      float64 // $ per unit
}

type costTable []costItem

func (ct costTable) total() (sum float64) {
	for _, it := range ct {
		sum += it.perM * it.price
	}
	return sum
}

// costOf prices a run's counts per million rows: every function's
// GB-seconds and invocations (the api's: the client's calls), every SQS
// and S3 request and DynamoDB unit the run made (the api's and the tick's
// too), and the bytes it put into S3 for storedDays.
func costOf(c counts, rows int) costTable {
	perM := func(n float64) float64 { return n * 1e6 / float64(rows) }
	var gbs float64
	invocations := float64(c.apiCalls)
	for _, fn := range []string{"api", "dispatcher", "executor", "finalizer", "webhook", "deadletter"} {
		gbs += c.gbSeconds(fn)
		invocations += float64(c.invoked[fn])
	}
	var sqsN, s3Put, s3Get float64
	for op, n := range c.aws.byOp() {
		switch service, name, _ := strings.Cut(op, "."); {
		case service == "SQS":
			sqsN += float64(n)
		case service == "S3" && (strings.HasPrefix(name, "Put") || strings.HasPrefix(name, "List") || strings.HasPrefix(name, "Copy") ||
			strings.Contains(name, "Multipart") || name == "UploadPart"):
			s3Put += float64(n)
		case service == "S3" && !strings.HasPrefix(name, "Delete"):
			s3Get += float64(n)
		}
	}
	return costTable{
		{"Lambda GB-seconds (arm64), all functions", "GB-s", perM(gbs), priceLambdaGBs},
		{"Lambda invocations (api: the client's calls)", "requests", perM(invocations), priceLambdaRequest},
		{"API Gateway (REST) requests", "requests", perM(float64(c.apiCalls)), priceAPIGateway},
		{"SQS requests", "requests", perM(sqsN), priceSQSRequest},
		{"DynamoDB write request units", "WRU", perM(c.wru), priceDynamoWRU},
		{"DynamoDB read request units", "RRU", perM(c.rru), priceDynamoRRU},
		{"S3 PUT, COPY, POST, LIST", "requests", perM(s3Put), priceS3Put},
		{"S3 GET and others", "requests", perM(s3Get), priceS3Get},
		{fmt.Sprintf("S3 storage, %.0f days", storedDays()), "GB-months", perM(float64(c.s3Bytes)) / 1e9 * storedDays() / 30, priceS3GBMonth},
	}
}

// writesLine is c's DynamoDB write units per 1,000 rows by operation,
// most first.
func writesLine(c counts, rows int) string {
	ops := slices.SortedFunc(maps.Keys(c.wruByOp), func(a, b string) int { return cmp.Compare(c.wruByOp[b], c.wruByOp[a]) })
	var parts []string
	for _, op := range ops {
		if n := c.wruByOp[op]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", op, n*1000/float64(rows)))
		}
	}
	return strings.Join(parts, ", ")
}

// costLines writes the run's cost per million rows with its arithmetic,
// beside what the same rows cost at the reference model.
func costLines(w func(string, ...any), c counts, rows int, b *openai.Batch, latency time.Duration) {
	ct := costOf(c, rows)
	w("### Cost per million rows at %d ms", latency.Milliseconds())
	w("")
	w("This run's counts scaled to a million rows, at public list prices (us-east-1, the constants in `localstack/bench_large_test.go` "+
		"with their sources). DynamoDB units are estimated from each request's and answer's size as DynamoDB rounds them (`awsUnits`); "+
		"S3 storage is the bytes this run put (input and parts; the parts' usage objects gzipped) kept %.0f days, the longer of the "+
		"input file's expiry class at the default 30-day TTL and the parts' lifecycle rule (`storedDays`). The API calls include the client's polling "+
		"(this bench's `batches.get` interval). Left out: the fixed costs that do not grow with rows (the tick's 43,200 invocations "+
		"a month, the event-source mappings' idle long polls, alarms).", storedDays())
	w("")
	w("| Item | Per million rows | Price | $ per million rows |")
	w("| --- | ---: | ---: | ---: |")
	for _, it := range ct {
		w("| %s | %.4g %s | $%.4g | $%.4f |", it.name, it.perM, it.unit, it.price, it.perM*it.price)
	}
	w("| **total** | | | **$%.4f** |", ct.total())
	w("")
	w("DynamoDB write units per 1,000 rows by operation: %s.", writesLine(c, rows))
	if b == nil || b.Usage.InputTokens == 0 {
		return
	}
	in, out := float64(b.Usage.InputTokens)/float64(rows), float64(b.Usage.OutputTokens)/float64(rows)
	provider := 1e6 * (in*priceModelIn + out*priceModelOut)
	w("")
	w("The same rows at the reference model (gpt-4o-mini, $%.2f per million input and $%.2f per million output tokens; the mock "+
		"counts %.0f input and %.0f output tokens a row): 1,000,000 × (%.0f × $%.2g + %.0f × $%.2g) = $%.2f per million rows, "+
		"$%.2f with the providers' 50%% batch discount, which saves $%.2f. The service's AWS cost is %.2f%% of that saving.",
		priceModelIn*1e6, priceModelOut*1e6, in, out, in, priceModelIn, out, priceModelOut, provider, provider/2, provider/2, 100*ct.total()/(provider/2))
}
