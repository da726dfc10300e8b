package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/heapmeter"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/resources"
)

// oneChunk is a memTable holding batch b and its chunk c, claimed.
func oneChunk(b batch.Batch, c batch.Chunk) *memTable {
	m := newMemTable()
	m.putBatch(b)
	m.putChunk(c)
	m.setInflight(c.Model, c.Slots)
	return m
}

// discardBucket is a memBucket that counts the bytes of the parts written
// and keeps none of them: a run's heap, not the bucket's, is measured.
type discardBucket struct {
	*memBucket
	written atomic.Int64
}

func (f *discardBucket) PutTagged(_ context.Context, _ string, r io.Reader, _ int64, _ string) error {
	n, err := io.Copy(io.Discard, r)
	f.written.Add(n)
	return err
}

// executeRows runs one chunk of rows through Execute, with the real
// provider client against an upstream answering every row with answer
// bytes of JSON, and returns the heap's peak while it ran.
func executeRows(tb testing.TB, rows, answer, slots int) uint64 {
	tb.Helper()
	body := []byte(`{"id":"chatcmpl-1","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2},"pad":"` +
		strings.Repeat("x", answer-100) + `"}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	defer up.Close()
	models, err := config.ParseModels([]byte("models:\n  - name: m\n    provider: openai\n    base_url: " + up.URL + "/v1\n"))
	if err != nil {
		tb.Fatal(err)
	}
	var input strings.Builder
	for i := range rows {
		fmt.Fprintf(&input, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`+"\n", i)
	}
	exp := time.Now().Add(time.Hour).Unix()
	b := batch.Batch{ID: "batch_m", Tenant: "t", Endpoint: "/v1/chat/completions", Status: batch.InProgress, ChunksTotal: 1,
		ExpiresAt: &exp, Input: []batch.Object{{Key: "in", Size: int64(input.Len())}}}
	c := batch.Chunk{Batch: b.ID, Tenant: "t", Rows: rows, End: int64(input.Len()), State: batch.ChunkClaimed, Run: "run1",
		Lease: time.Now().Add(time.Hour).UnixMilli(), Slots: slots, Model: "m"}
	table, bucket := oneChunk(b, c), &discardBucket{memBucket: newMemBucket()}
	bucket.put("in", []byte(input.String()))
	e := testEngine(&Engine{Store: table, Blobs: bucket, Queue: &fakeQueue{}, Models: models, Set: resources.Define("t"),
		Provider: &provider.Client{HTTP: provider.NewHTTPClient(), Models: models, Keys: provider.EnvKeys{}},
		Log:      slog.New(slog.DiscardHandler)})
	m, _ := json.Marshal(msg.Message{Type: msg.Chunk, Tenant: "t", Batch: b.ID, Run: "run1"})
	var failed []string
	peak := heapmeter.Peak(func() {
		failed, err = e.Execute(context.Background(), []msg.Delivery{{ID: "d", Body: string(m), ReceiveCount: 1}})
	})
	if cms := table.committed(); err != nil || len(failed) > 0 || len(cms) != 1 || cms[0].Completed != int64(rows) {
		tb.Fatalf("Execute: failed %v, err %v, commits %+v; want one of %d completed rows", failed, err, cms, rows)
	}
	if min := int64(rows * answer); bucket.written.Load() < min {
		tb.Fatalf("%d bytes of parts written, want at least %d", bucket.written.Load(), min)
	}
	return peak
}

// TestExecuteHeapBoundedByBytes checks that a run's memory does not grow
// with its rows: ten times the rows with the same answers and slots (90 MB
// more answers) peaks at most 10 MiB higher, the collector's timing
// (docs/design.md "Memory"). Before, a run held every row's answer until
// its commit, and the lines twice more: 90 MB and more. (A bar of 20% of
// the smaller peak failed on that timing alone once the lines' buffer
// stopped doubling: 16 against 24 MiB; 2,000 rows peak at 23.)
func TestExecuteHeapBoundedByBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: it moves 100 MB through a local upstream (make test runs it)")
	}
	const answer, slots = 256 << 10, 8
	small := executeRows(t, 40, answer, slots)
	large := executeRows(t, 400, answer, slots)
	t.Logf("heap peak: %d MiB for 40 rows, %d MiB for 400 rows of %d KiB answers", small>>20, large>>20, answer>>10)
	if large > small+10<<20 {
		t.Errorf("heap peak %d MiB for 400 rows, want at most 10 MiB over the %d MiB for 40", large>>20, small>>20)
	}
}

// BenchmarkExecuteHeap reports the Go heap's peak while a run executes
// 100 and 1,000 rows whose upstream answers are 1 MB each (BENCHMARKS.md
// "Memory"); the bar is 1,000 rows within 20% of 100.
func BenchmarkExecuteHeap(b *testing.B) {
	const answer, slots = 1 << 20, 16
	for b.Loop() {
		small := executeRows(b, 100, answer, slots)
		large := executeRows(b, 1000, answer, slots)
		b.ReportMetric(float64(small)/(1<<20), "MiB-peak/100rows")
		b.ReportMetric(float64(large)/(1<<20), "MiB-peak/1000rows")
		b.ReportMetric(float64(large)/float64(small), "ratio")
	}
}

// changedBucket answers every read with err: blob.ErrChanged as S3
// answers If-Match on a replaced object, blob.ErrNotFound for a deleted one.
type changedBucket struct {
	*memBucket
	err error
}

func (f *changedBucket) ReadRange(context.Context, []batch.Object, int64, int64) ([]byte, error) {
	return nil, fmt.Errorf("get in: %w", f.err)
}

// TestExecuteInputChanged: a chunk whose pinned input object was replaced
// after the plan (a 412 to the executor's If-Match), or deleted, runs
// nothing, commits an error line per row (giving its slots back), and
// records the error that ends the batch failed. Before, a deleted object
// failed the run on every delivery, its slots held through every retry
// and takeover until its rows dead-lettered.
func TestExecuteInputChanged(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		code string
	}{{blob.ErrChanged, batch.CodeInputChanged}, {blob.ErrNotFound, batch.CodeInputMissing}} {
		exp := time.Now().Add(time.Hour).Unix()
		b := batch.Batch{ID: "batch_c", Tenant: "t", Endpoint: "/v1/chat/completions", Status: batch.InProgress, ChunksTotal: 1,
			ExpiresAt: &exp, InputFileID: "file-x", Input: []batch.Object{{Key: "in", Size: 10, ETag: `"abc"`}}}
		c := batch.Chunk{Batch: b.ID, Tenant: "t", Rows: 3, End: 10, State: batch.ChunkClaimed, Run: "run1",
			Lease: time.Now().Add(time.Hour).UnixMilli(), Slots: 2, Model: "m"}
		table := oneChunk(b, c)
		e := testEngine(&Engine{Store: table, Blobs: &changedBucket{memBucket: newMemBucket(), err: tt.err}, Queue: &fakeQueue{}, Set: resources.Define("t"),
			Provider: nil, Log: slog.New(slog.DiscardHandler)})
		m, _ := json.Marshal(msg.Message{Type: msg.Chunk, Tenant: "t", Batch: b.ID, Run: "run1"})

		failed, err := e.Execute(context.Background(), []msg.Delivery{{ID: "d", Body: string(m), ReceiveCount: 1}})

		if err != nil || len(failed) > 0 {
			t.Fatalf("%s: Execute: failed %v, err %v", tt.code, failed, err)
		}
		cms := table.committed()
		if len(cms) != 1 || cms[0].Failed != 3 || cms[0].Completed != 0 || cms[0].Chunk.Pattern != "eee" || cms[0].Chunk.Slots != 2 {
			t.Fatalf("%s: commits %+v, want one of 3 failed rows and the chunk's 2 slots handed on", tt.code, cms)
		}
		if n := table.inflightOf("m", 0); n != 0 {
			t.Fatalf("%s: %d slots of m in flight after the commit, want its 2 given back", tt.code, n)
		}
		after := table.batch(b.ID)
		if len(after.ErrorList) != 1 || after.ErrorList[0].Code != tt.code {
			t.Fatalf("batch errors %+v, want %s", after.ErrorList, tt.code)
		}
		if got := batch.FinalStatus(&after); got != batch.Failed {
			t.Fatalf("%s: final status %s, want failed", tt.code, got)
		}
	}
}

// padProvider answers every row at once with a body of answer bytes.
type padProvider struct{ body json.RawMessage }

func (p padProvider) Do(context.Context, string, json.RawMessage, provider.Route) inference.Result {
	return inference.Result{StatusCode: 200, Model: "x", Body: p.body}
}

// genBucket is a discardBucket whose input is rows of rowBytes each,
// made as they are read: the input is not in the heap a test measures.
type genBucket struct {
	*discardBucket
	rowBytes int
}

func (f *genBucket) row(i int) string {
	head := fmt.Sprintf(`{"custom_id":"r%08d","method":"POST","url":"/v1/chat/completions","body":{"model":"x","pad":"`, i)
	return head + strings.Repeat("x", f.rowBytes-len(head)-4) + "\"}}\n"
}

func (f *genBucket) ReadRange(_ context.Context, _ []batch.Object, start, end int64) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(int(end - start))
	for i := start / int64(f.rowBytes); i < end/int64(f.rowBytes); i++ {
		b.WriteString(f.row(int(i)))
	}
	return b.Bytes(), nil
}

// chainRows runs chunks chunks of rows rows of rowBytes each in one
// invocation, the first claimed and each commit claiming the next as its
// continuation (docs/design.md "Scheduling"), every answer rowBytes too,
// and returns the heap's peak while it ran.
func chainRows(t *testing.T, chunks, rows, rowBytes int) uint64 {
	t.Helper()
	exp := time.Now().Add(time.Hour).Unix()
	size := int64(chunks * rows * rowBytes)
	b := batch.Batch{ID: "batch_c", Tenant: "t", Endpoint: "/v1/chat/completions", Status: batch.InProgress,
		ChunksTotal: chunks, ExpiresAt: &exp, Input: []batch.Object{{Key: "in", Size: size}}}
	table := &runsTable{memTable: newMemTable(), id: b.ID}
	for i := range chunks {
		c := batch.Chunk{Batch: b.ID, Tenant: "t", Index: i, Start: int64(i * rows * rowBytes), End: int64((i + 1) * rows * rowBytes),
			FirstRow: i * rows, Rows: rows, Model: "x", State: batch.ChunkPending, NextSame: -1}
		if i == 0 {
			c.State, c.Run, c.Lease, c.Slots = batch.ChunkClaimed, "run0", time.Now().Add(time.Hour).UnixMilli(), 8
		}
		table.putChunk(c)
	}
	table.setInflight("x", 8)
	table.putBatch(b)
	table.readyAt("x", 1, false)
	bucket := &genBucket{discardBucket: &discardBucket{memBucket: newMemBucket()}, rowBytes: rowBytes}
	answer := json.RawMessage(`{"id":"chatcmpl-1","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2},"pad":"` +
		strings.Repeat("x", rowBytes) + `"}`)
	e := testEngine(&Engine{Store: table, Blobs: bucket, Queue: &lockedQueue{}, Set: resources.Define("t"),
		Provider: padProvider{answer}, Log: slog.New(slog.DiscardHandler)})
	d := workDelivery(t, table.chunkAt(0), "d0")
	var failed []string
	var err error
	// Collected often, the heap's peak is what the runs hold, not when
	// their garbage happened to go.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	peak := heapmeter.Peak(func() {
		failed, err = e.Execute(context.Background(), []msg.Delivery{d})
	})
	if n := len(table.committed()); err != nil || len(failed) > 0 || n != chunks {
		t.Fatalf("Execute: failed %v, err %v, %d commits; want %d, the chain run in the invocation", failed, err, n, chunks)
	}
	if min := size; bucket.written.Load() < min {
		t.Fatalf("%d bytes of parts written, want at least %d", bucket.written.Load(), min)
	}
	return peak
}

// TestContinuationsHeapBoundedByBytes checks that an invocation's memory
// does not grow with the chunks it ran as continuations: 24 chunks in a
// row peak within 1.5 times 3 (docs/design.md "Memory"). Before, every run
// kept its input range and its lines until the invocation ended: the
// executors of a 50,000-row batch of 4 KB rows held 500 MiB.
func TestContinuationsHeapBoundedByBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: it moves 100 MB through the engine (make test runs it)")
	}
	const rows, rowBytes = 768, 4 << 10
	small := chainRows(t, 3, rows, rowBytes)
	large := chainRows(t, 24, rows, rowBytes)
	t.Logf("heap peak: %d MiB for 3 chunks, %d MiB for 24 chunks of %d rows of %d KiB", small>>20, large>>20, rows, rowBytes>>10)
	if float64(large) > 1.5*float64(max(small, 16<<20)) {
		t.Errorf("heap peak %d MiB for 24 chunks in a row, want within 1.5 times the %d MiB for 3", large>>20, small>>20)
	}
}
