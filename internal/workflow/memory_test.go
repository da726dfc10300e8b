package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/heapmeter"
	"github.com/relaybatch/relay/internal/inference"
)

// Results read back as the array of what was set, in position order
// whatever the order of the sets, in memory or spilled to a file, and
// through a JSON round trip.
func TestResultsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	for _, size := range []int{10, 200 << 10} { // in memory; past resultsInMemory
		r := NewResults(8)
		for _, i := range []int{5, 0, 7, 1, 3, 2, 6, 4} {
			if err := r.Set(i, Result{ID: fmt.Sprint(i), StatusCode: 200, Body: json.RawMessage(`"` + strings.Repeat("x", size) + `"`)}); err != nil {
				t.Fatal(err)
			}
		}
		data, err := json.Marshal(State{Step: 1, Results: r})
		if err != nil {
			t.Fatal(err)
		}
		var st State
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatal(err)
		}
		for _, got := range []*Results{r, st.Results} {
			rs := listResults(got)
			for i, res := range rs {
				if res.ID != fmt.Sprint(i) || len(res.Body) != size+2 {
					t.Fatalf("size %d: result %d is %s (%d bytes)", size, i, res.ID, len(res.Body))
				}
			}
			if len(rs) != 8 {
				t.Fatalf("size %d: %d results, want 8", size, len(rs))
			}
			got.Close()
		}
	}
}

// stepHeap runs a record of one step of n requests whose answers are
// size bytes each, against a callback that reads its events through, and
// returns the heap's peak and the answers' bytes; each checkpoint's
// results are read through too, as internal/wfhost streams them to S3.
func stepHeap(t testing.TB, n, size int) (peak uint64, input int64) {
	t.Helper()
	var reqs strings.Builder
	for i := range n {
		if i > 0 {
			reqs.WriteByte(',')
		}
		fmt.Fprintf(&reqs, `{"id":"r%d","body":{"model":"m","messages":[]}}`, i)
	}
	var eventBytes atomic.Int64
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, _ := io.Copy(io.Discard, r.Body)
		eventBytes.Add(m)
		if eventBytes.Load() > m { // the step's results event
			io.WriteString(w, `{"state":"completed","output":{}}`)
			return
		}
		fmt.Fprintf(w, `{"state":"continue","requests":[%s]}`, reqs.String())
	}))
	defer cb.Close()
	pad := strings.Repeat("x", size-100)
	r := &Runner{
		Spec:       Spec{URL: cb.URL, MaxSteps: 2, MaxRequests: n, MaxTokens: DefaultMaxTokens, CallbackTimeout: time.Minute},
		WorkflowID: "batch_1:rec", RecordID: "rec", Model: "m",
		Call: (&Caller{HTTP: cb.Client()}).Call,
		Exec: func(_ context.Context, calls []Call, done func(int, inference.Result)) {
			for i := range calls {
				body := fmt.Appendf(nil, `{"id":"chatcmpl-%d","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2},"pad":"%s"}`, i, pad)
				done(i, inference.Result{StatusCode: 200, Body: body, Usage: inference.Usage{InputTokens: 1, OutputTokens: 1, TotalTokens: 2}})
				input += int64(len(body))
			}
		},
		Save: func(_ context.Context, st State) error {
			a, _, err := st.Results.Array()
			if err == nil {
				_, err = io.Copy(io.Discard, a)
			}
			return err
		},
		Now: time.Now,
	}
	var o Outcome
	var err error
	peak = heapmeter.Peak(func() { o, err = r.Run(context.Background(), State{}) })
	o.State.Results.Close()
	if err != nil || o.Kind != Completed || o.State.Requests != n {
		t.Fatalf("Run: %+v, %v", o, err)
	}
	if eventBytes.Load() < input {
		t.Fatalf("the callback read %d bytes of events, want at least the %d of the answers", eventBytes.Load(), input)
	}
	return peak, input
}

// A step's heap is bounded by bytes, not by its requests' answers: its
// peak stays within 1.2 × a tenth of the answers' size (docs/design.md
// "Memory"). Before, a step held every answer, and copied them all into
// its results event and its checkpoint.
func TestStepHeapBoundedByBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: it moves 250 MB through a local callback (make test runs it)")
	}
	peak, input := stepHeap(t, 2000, 128<<10)
	t.Logf("heap peak: %d MiB for a step of %d MiB of answers", peak>>20, input>>20)
	if bar := 1.2 * float64(input) / 10; float64(peak) > bar {
		t.Errorf("heap peak %d MiB, want within %d MiB (1.2 × a tenth of the %d MiB of answers)", peak>>20, int64(bar)>>20, input>>20)
	}
}

// BenchmarkStepHeap reports the Go heap's peak while a workflow step runs
// 5,000 requests of 100 KiB answers (BENCHMARKS.md "Memory"); the bar is
// 1.2 × a tenth of the answers' size.
func BenchmarkStepHeap(b *testing.B) {
	for b.Loop() {
		peak, input := stepHeap(b, 5000, 100<<10)
		b.ReportMetric(float64(peak)/(1<<20), "MiB-peak")
		b.ReportMetric(float64(input)/(1<<20), "MiB-answers")
		b.ReportMetric(float64(peak)/(float64(input)/10), "peak/tenth")
	}
}
