package native

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/heapmeter"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/part"
)

// commitDiscarding commits chunk c reading its part through, keeping
// nothing of it.
func (f *fakes) commitDiscarding(c batch.Chunk, rows *part.Lines) error {
	defer rows.Close()
	objs, _, err := part.Commit(c, rows, 0, time.Now())
	if err != nil {
		return err
	}
	for _, o := range objs {
		if _, err := io.Copy(io.Discard, o.Body); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commitCalls[c.Index]++
	c.State = batch.ChunkDone
	f.chunks[c.Index] = c
	return nil
}

// resultLine is an OpenAI result line answering row of group 0 of batch
// b with a 200 whose body is about size bytes.
func resultLine(b string, row, size int) string {
	return fmt.Sprintf(`{"id":"batch_req_%d","custom_id":%q,"response":{"status_code":200,"request_id":"req_%d","body":`+
		`{"id":"chatcmpl-%d","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2},"pad":"%s"}},"error":null}`+"\n",
		row, customID(tag(b, 0), row), row, row, strings.Repeat("x", max(0, size-100)))
}

// messageResultLine is resultLine as a Message Batches result.
func messageResultLine(b string, row, size int) string {
	return fmt.Sprintf(`{"custom_id":%q,"result":{"type":"succeeded","message":{"id":"msg_%d","type":"message","role":"assistant",`+
		`"content":[{"type":"text","text":"%s"}],"usage":{"input_tokens":1,"output_tokens":1}}}}`+"\n",
		customID(tag(b, 0), row), row, strings.Repeat("x", max(0, size-120)))
}

// importOf sets s up to import group 0 of f's batch, rows rows in chunks
// of perChunk, from an OpenAI batch whose output file the handler serves
// (the model "nat" on it); it returns the group and the provider batch.
func importOf(t testing.TB, s *Service, f *fakes, rows, perChunk int, results http.HandlerFunc) (batch.Group, upstream, remote) {
	t.Helper()
	return importOn(t, config.OpenAI, s, f, rows, perChunk, results)
}

// importOn is importOf from a provider batch of provider p.
func importOn(t testing.TB, p config.Provider, s *Service, f *fakes, rows, perChunk int, results http.HandlerFunc) (batch.Group, upstream, remote) {
	t.Helper()
	srv := httptest.NewServer(results)
	t.Cleanup(srv.Close)
	base := srv.URL + "/v1"
	if p == config.Anthropic {
		base = srv.URL // relay adds /v1
	}
	models, err := config.ParseModels(fmt.Appendf(nil, "models:\n- {name: nat, provider: %s, base_url: %s, api_key_env: NATIVE_TEST_KEY, batch: native}\n", p, base))
	if err != nil {
		t.Fatal(err)
	}
	s.Models = models
	var in strings.Builder
	f.chunks = map[int]batch.Chunk{}
	g := batch.Group{Batch: f.b.ID, Index: 0, Model: "nat", Rows: rows}
	for i := range rows {
		if i%perChunk == 0 {
			f.chunks[i/perChunk] = batch.Chunk{Batch: f.b.ID, Tenant: "t", Index: i / perChunk, FirstRow: i, Model: "nat", Start: int64(in.Len()), State: batch.ChunkPending}
			g.Chunks = append(g.Chunks, i/perChunk)
		}
		fmt.Fprintf(&in, `{"custom_id":"c%d","method":"POST","url":"/v1/chat/completions","body":{"model":"nat","messages":[]}}`+"\n", i)
		c := f.chunks[i/perChunk]
		c.Rows, c.End = c.Rows+1, int64(in.Len())
		f.chunks[i/perChunk] = c
	}
	f.input = []byte(in.String())
	up, err := s.upstream(context.Background(), f.b, "nat")
	if err != nil {
		t.Fatal(err)
	}
	return g, up, remote{id: "batch_prov", ended: true, outFile: "file-out"}
}

// An answer over the cap, imported, is the row's response_too_large as a
// direct call's is, and the row is not run again; a result line too long
// to read whole (past the cap and its framing) is one too, not a failed
// import. Before, an import took any answer a provider batch gave, up to
// a 64 MiB line, and a longer line failed the whole import.
func TestImportCapsAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider config.Provider
		line     func(b string, row, size int) string
	}{{config.OpenAI, resultLine}, {config.Anthropic, messageResultLine}} {
		t.Run(string(tc.provider), func(t *testing.T) {
			t.Parallel()
			s, f, mock := newFlow(t, 1, "")
			s.MaxResponseBytes = 4 << 10
			sizes := []int{1 << 10, 8 << 10, 256 << 10, 1 << 10} // under, over, a line past cap + slack, under
			g, up, r := importOn(t, tc.provider, s, f, len(sizes), 2, func(w http.ResponseWriter, _ *http.Request) {
				for row, size := range sizes {
					io.WriteString(w, tc.line(f.b.ID, row, size))
				}
			})
			if err := s.importGroup(context.Background(), f.b, g, up, r); err != nil {
				t.Fatal(err)
			}
			for row, want := range []string{"ok", inference.CodeResponseTooLarge, inference.CodeResponseTooLarge, "ok"} {
				o := f.commits[row/2][row%2]
				got := o.Result.ErrCode
				if o.Result.OK() {
					got = "ok"
				}
				if got != want || o.CustomID != fmt.Sprintf("c%d", row) {
					t.Errorf("row %d: got %s %q (%s), want %s", row, o.CustomID, got, o.Result.ErrMessage, want)
				}
			}
			if st := mock.Stats(); st.Requests != 0 {
				t.Errorf("%d rows run directly, want none", st.Requests)
			}
		})
	}
}

// importHeap imports a provider batch of rows result lines of about size
// bytes each, in chunks of 500 rows, and returns the heap's peak and the
// results file's size.
func importHeap(t testing.TB, rows, size int) (peak uint64, input int64) {
	t.Helper()
	exp := time.Now().Add(24 * time.Hour).Unix()
	f := &fakes{b: batch.Batch{ID: "batch_heap", Tenant: "t", Endpoint: "/v1/chat/completions", Status: batch.InProgress,
		CreatedAt: time.Now().Unix(), ExpiresAt: &exp}, groups: map[int]batch.Group{}, commitCalls: map[int]int{}, discard: true}
	s := &Service{Store: f, Blobs: f, Queue: f, Engine: f, Keys: testKey{}, Now: time.Now, Log: slog.New(slog.DiscardHandler)}
	var served atomic.Int64
	g, up, r := importOf(t, s, f, rows, 500, func(w http.ResponseWriter, _ *http.Request) {
		bw := bufio.NewWriter(w)
		for row := range rows {
			n, _ := bw.WriteString(resultLine(f.b.ID, row, size))
			served.Add(int64(n))
		}
		bw.Flush()
	})
	var err error
	peak = heapmeter.Peak(func() { err = s.importGroup(context.Background(), f.b, g, up, r) })
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range f.chunks {
		if c.State != batch.ChunkDone {
			t.Fatalf("chunk %d not committed: %+v", i, c)
		}
	}
	return peak, served.Load()
}

// An import's heap is bounded by bytes, not by the provider batch's size:
// its peak stays within 1.2 × a tenth of the results file's (docs/design.md
// "Memory"). Before, an import held every answer until its chunks
// committed.
func TestImportHeapBoundedByBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: it moves 400 MB through a local provider (make test runs it)")
	}
	peak, input := importHeap(t, 3000, 128<<10)
	t.Logf("heap peak: %d MiB importing %d MiB of results", peak>>20, input>>20)
	if bar := 1.2 * float64(input) / 10; float64(peak) > bar {
		t.Errorf("heap peak %d MiB, want within %d MiB (1.2 × a tenth of the %d MiB imported)", peak>>20, int64(bar)>>20, input>>20)
	}
}

// BenchmarkImportHeap reports the Go heap's peak while a provider batch of
// 50,000 result lines of 10 KiB is imported (BENCHMARKS.md "Memory"); the
// bar is 1.2 × a tenth of the results file's size.
func BenchmarkImportHeap(b *testing.B) {
	for b.Loop() {
		peak, input := importHeap(b, 50_000, 10<<10)
		b.ReportMetric(float64(peak)/(1<<20), "MiB-peak")
		b.ReportMetric(float64(input)/(1<<20), "MiB-results")
		b.ReportMetric(float64(peak)/(float64(input)/10), "peak/tenth")
	}
}
