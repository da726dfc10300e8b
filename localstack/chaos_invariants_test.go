//go:build chaos

package localstack

// The invariants `make chaos` checks while the run goes on, not only at
// its end (docs/design.md "Scheduling"): each model's peak in flight at
// the mock stays within its max_concurrency; no row is sent upstream by
// two runs at once, nor twice at once by one run delivered twice; no
// request starts after the lease its run had when it sent it (the
// executor's X-Relay-Lease-Until header). The mock records every request
// (mockup.Options.Record), and the figures are checked from those records
// once the run has settled.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/mockup"
)

// chaosMix is the models the batches' rows name, of three capacities
// (chaosModels: 12, 6 and 3), each as often as its share of their
// capacity, as users size work to models; a batch's rows come in runs of
// one model, each run minMixRun..maxMixRun rows, so every batch
// interleaves the three. (Thirds gave chaos-small 400 rows on 3 slots
// through the provider's fault bursts: about ten minutes of work for that
// model alone, past the run's budget, with the other two models idle.)
var chaosMix = []string{"gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini", "chaos-medium", "chaos-medium", "chaos-small"}

const minMixRun, maxMixRun = 4, 10

// slowRow is the marker of a row slower than an executor invocation
// (chaosExecTimeout): it runs on chaos-medium, whose timeout lets it, and
// is cut by the invocation's deadline every time it runs.
const slowRow = "[[mock:sleep=12s]]"

// mixedModels gives each of n rows a model of chaosMix, in runs.
func (c *chaos) mixedModels(n int) []string {
	models := make([]string, 0, n)
	for len(models) < n {
		m := chaosMix[c.intn(len(chaosMix))]
		for range minMixRun + c.intn(maxMixRun-minMixRun+1) {
			models = append(models, m)
		}
	}
	return models[:n]
}

// submitMixed is submit (loadkit_test.go) with a model per row.
func submitMixed(ctx context.Context, c openai.Client, lat *latencies, rows []chatRow, models []string, inline bool, opts ...option.RequestOption) (*openai.Batch, *openai.FileObject, error) {
	params := openai.BatchNewParams{Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h}
	reqs := make([]map[string]any, len(rows))
	var jsonl bytes.Buffer
	for i, r := range rows {
		reqs[i] = r.request(models[i])
		line, _ := json.Marshal(reqs[i])
		jsonl.Write(line)
		jsonl.WriteByte('\n')
	}
	if inline {
		b, err := timed(lat, "create (inline)", func() (*openai.Batch, error) {
			return c.Batches.New(ctx, params, append(opts, option.WithJSONDel("input_file_id"), option.WithJSONSet("requests", reqs))...)
		})
		return b, nil, err
	}
	f, err := timed(lat, "upload file", func() (*openai.FileObject, error) {
		return c.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(jsonl.Bytes()), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("upload: %w", err)
	}
	params.InputFileID = f.ID
	b, err := timed(lat, "create (file)", func() (*openai.Batch, error) { return c.Batches.New(ctx, params, opts...) })
	return b, f, err
}

// skewedClock is an invocation's clock: off by up to maxSkew either way.
func (c *chaos) skewedClock(string) func() time.Time {
	off := time.Duration(c.intn(int(2*maxSkew/time.Millisecond)+1))*time.Millisecond - maxSkew
	c.mu.Lock()
	c.skews++
	c.maxSkewSeen = max(c.maxSkewSeen, off.Abs())
	c.mu.Unlock()
	return func() time.Time { return time.Now().Add(off) }
}

const maxSkew = 2 * time.Second

// duplicateInvoke decides whether a batch of work messages goes to two
// executor invocations at once (esm.Poller.Duplicate).
func (c *chaos) duplicateInvoke(fn string, _ any) bool {
	if fn != "executor" || !c.roll(pDuplicateInvoke) {
		return false
	}
	c.count(faultDupInvoke)
	return true
}

// throttleRenewal decides whether a lease renewal is throttled: an
// UpdateItem of an invocation that moves the lease and sets neither the
// run (a takeover) nor the fence (a run's start, TakeFence, whose
// throttles are the general rule's).
func (c *chaos) throttleRenewal(expr string) bool {
	if !strings.HasPrefix(expr, "SET lease = ") || strings.Contains(expr, "#run = ") || !c.roll(pThrottleRenewal) {
		return false
	}
	c.count(faultRenewal)
	return true
}

// invariants is what the mock's records say about the run.
type invariants struct {
	peaks [][3]string // model, peak in flight at the mock, max_concurrency
	// oneCopy is each model's peak in flight from the records, counting
	// once a row a run sent twice at once: above the cap, the slots
	// accounting is wrong; within it, only the duplicate executions are.
	oneCopy       map[string]int
	overPeak      int // models whose peak passed their cap
	requests      int // model requests recorded
	unattributed  int // of them without X-Relay-Run (workflow steps)
	crossRun      int // rows sent by two runs at once
	sameRun       int // rows sent twice at once by one run (two executions)
	crossPairs    int // pairs of such requests
	afterLease    int // requests started after their run's lease
	worstLate     time.Duration
	slowRequests  int // requests of slow rows
	examples      []string
	emulatorPeakM int64 // the emulator's peak RSS, MB (0: not found)
}

// checkInvariants reads the mock's records and peaks against the models'
// capacities.
func checkInvariants(mock *mockup.Server, models *config.Models) invariants {
	var inv invariants
	peaks := mock.Stats().PeakInFlight
	for _, m := range models.Models {
		peak := peaks[m.Upstream()]
		inv.peaks = append(inv.peaks, [3]string{m.Name, strconv.FormatInt(peak, 10), strconv.Itoa(m.MaxConcurrency)})
		if peak > int64(m.MaxConcurrency) {
			inv.overPeak++
		}
	}
	byKey := map[string][]mockup.Request{}
	recs := mock.Requests()
	upstreamOf := map[string]string{} // the mock's model names → the models'
	for _, m := range models.Models {
		upstreamOf[m.Upstream()] = m.Name
	}
	inv.oneCopy = peakOneCopy(recs, upstreamOf)
	for _, r := range recs {
		inv.requests++
		if r.Run == "" {
			inv.unattributed++
			continue
		}
		byKey[r.Key] = append(byKey[r.Key], r)
		if r.LeaseUntil > 0 && r.Start.UnixMilli() > r.LeaseUntil {
			inv.afterLease++
			late := r.Start.Sub(time.UnixMilli(r.LeaseUntil))
			if late > inv.worstLate {
				inv.worstLate = late
			}
			inv.example(fmt.Sprintf("row %s: run %s sent it %v after its lease", r.Key, r.Run, late.Round(time.Millisecond)))
		}
	}
	for key, rs := range byKey {
		cross, same := overlaps(rs)
		inv.crossPairs += cross
		if cross > 0 {
			inv.crossRun++
			inv.example(fmt.Sprintf("row %s: sent by two runs at once (%d overlapping pairs)", key, cross))
		}
		if same > 0 {
			inv.sameRun++
			inv.example(fmt.Sprintf("row %s: sent twice at once by one run (%d overlapping pairs)", key, same))
		}
	}
	return inv
}

func (inv *invariants) example(s string) {
	if len(inv.examples) < 8 {
		inv.examples = append(inv.examples, s)
	}
}

// overlaps counts the pairs of requests of one row whose [start, end)
// intervals overlap, sent by two runs (cross) or by one run (same: a
// run's own retries of a row follow one another).
func overlaps(rs []mockup.Request) (cross, same int) {
	slices.SortFunc(rs, func(a, b mockup.Request) int { return a.Start.Compare(b.Start) })
	for i, a := range rs {
		for _, b := range rs[i+1:] {
			if !b.Start.Before(a.End) {
				break // sorted by start: no later one overlaps a
			}
			if a.Run == b.Run {
				same++
			} else {
				cross++
			}
		}
	}
	return cross, same
}

// report prints the invariants and fails the run on a broken one.
func (inv invariants) report(t *testing.T, w io.Writer) {
	t.Helper()
	rows := [][]string{{"continuous invariant", "value", "want"}}
	for _, p := range inv.peaks {
		rows = append(rows, []string{"peak in flight, " + p[0], p[1], "≤ " + p[2]})
	}
	for _, p := range inv.peaks {
		rows = append(rows, []string{"  counting a run's duplicated rows once, " + p[0], strconv.Itoa(inv.oneCopy[p[0]]), "-"})
	}
	rows = append(rows,
		[]string{"rows sent by two runs at once", strconv.Itoa(inv.crossRun), "0"},
		[]string{"rows sent twice at once by one run", strconv.Itoa(inv.sameRun), "0"},
		[]string{"requests started after their run's lease", strconv.Itoa(inv.afterLease), "0"},
		[]string{"  the latest of them, after the lease by", inv.worstLate.Round(time.Millisecond).String(), "-"},
		[]string{"model requests (without a run: workflow steps)", fmt.Sprintf("%d (%d)", inv.requests, inv.unattributed), "-"},
		[]string{"emulator peak RSS", fmt.Sprintf("%d MB", inv.emulatorPeakM), "-"},
	)
	table(w, rows)
	for _, e := range inv.examples {
		fmt.Fprintln(w, "   ", e)
	}
	if inv.overPeak > 0 {
		t.Errorf("%d model(s) had more requests in flight than their max_concurrency: %v", inv.overPeak, inv.peaks)
	}
	if inv.crossRun > 0 || inv.sameRun > 0 {
		t.Errorf("rows sent twice at once: %d by two runs (%d pairs), %d by one run delivered twice", inv.crossRun, inv.crossPairs, inv.sameRun)
	}
	if inv.afterLease > 0 {
		t.Errorf("%d requests started after their run's lease (the latest %v after)", inv.afterLease, inv.worstLate)
	}
}

// readmeRow is the seed's line of the README's reliability table.
func (inv invariants) readmeRow(seed int64, rows int64, faults int) string {
	var peaks []string
	for _, p := range inv.peaks {
		peaks = append(peaks, p[1]+"/"+p[2])
	}
	return fmt.Sprintf("| %d | %d | %d | %s | %d (%d by one run) | %d (≤ %v late) |",
		seed, rows, faults, strings.Join(peaks, ", "), inv.crossRun, inv.sameRun, inv.afterLease, inv.worstLate.Round(time.Millisecond))
}

// rssWatch samples the emulator's resident memory every 2 s until ctx
// ends; past limitMB it calls over once (moto's memory grows with many
// tiny chunks, TOOLCHAIN: fail clearly before the machine runs out).
type rssWatch struct {
	mu     sync.Mutex
	peakMB int64
}

func (r *rssWatch) run(ctx context.Context, port string, limitMB int64, over func(mb int64)) {
	fired := false
	for {
		mb := emulatorRSS(port)
		r.mu.Lock()
		r.peakMB = max(r.peakMB, mb)
		r.mu.Unlock()
		if mb > limitMB && !fired {
			fired = true
			over(mb)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

func (r *rssWatch) peak() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peakMB
}

// emulatorRSS is the resident memory, in MB, of the moto processes
// listening on port (0 when none is found: another emulator).
func emulatorRSS(port string) int64 {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var kb int64
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmd, []byte("moto")) || !bytes.Contains(cmd, []byte("\x00-p\x00"+port+"\x00")) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				kb += n
			}
		}
	}
	return kb / 1024
}

// emulatorPort is the port of the emulator the tests use.
func emulatorPort(t *testing.T) string {
	endpoint := emutest.Endpoint(t)
	i := strings.LastIndex(endpoint, ":")
	return strings.TrimSuffix(endpoint[i+1:], "/")
}

// rssLimitMB is CHAOS_MAX_EMULATOR_RSS_MB, default 8 GB.
func rssLimitMB() int64 {
	if n, err := strconv.ParseInt(os.Getenv("CHAOS_MAX_EMULATOR_RSS_MB"), 10, 64); err == nil && n > 0 {
		return n
	}
	return 8 << 10
}

// modelNames are the models in the order checkInvariants reports them.
func modelNames(models *config.Models) []string {
	var names []string
	for _, m := range models.Models {
		names = append(names, m.Name)
	}
	return names
}

// peakOneCopy is, per model (the mock's names mapped back by upstreamOf),
// the most requests in flight at once in recs,
// leaving out a request of a run that overlaps an earlier one of the same
// run and row.
func peakOneCopy(recs []mockup.Request, upstreamOf map[string]string) map[string]int {
	slices.SortFunc(recs, func(a, b mockup.Request) int { return a.Start.Compare(b.Start) })
	type event struct {
		at    time.Time
		delta int
		model string
	}
	var events []event
	lastEnd := map[string]time.Time{} // run/row → the end of its latest request kept
	for _, r := range recs {
		id := r.Run + "/" + r.Key
		if r.Run != "" && r.Start.Before(lastEnd[id]) {
			continue
		}
		if r.Run != "" {
			lastEnd[id] = r.End
		}
		m := upstreamOf[r.Model]
		events = append(events, event{r.Start, 1, m}, event{r.End, -1, m})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	now, peak := map[string]int{}, map[string]int{}
	for _, e := range events {
		now[e.model] += e.delta
		peak[e.model] = max(peak[e.model], now[e.model])
	}
	return peak
}
