package part

import (
	"encoding/json"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
)

// benchRows is a chunk's rows at the shipped default (config.DefaultChunkRows).
const benchRows = 768

// benchOutcome is a row's outcome as the executor sets it: a 2xx answer of
// about 4 KB, compact as the provider gives it (the 50,000-row bench's echo).
func benchOutcome() Outcome {
	body, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "big-256",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "echo: " + strings.Repeat("lorem ipsum dolor sit amet ", 150)},
			"finish_reason": "stop"}}, "usage": map[string]any{"prompt_tokens": 700, "completion_tokens": 701, "total_tokens": 1401}})
	return Outcome{CustomID: "r000001", Result: inference.Result{StatusCode: 200, Body: body, Compact: true, RequestID: "req_1", Model: "big-256",
		Usage: inference.Usage{InputTokens: 700, OutputTokens: 701, TotalTokens: 1401}, Attempts: 1, Latency: 100 * time.Millisecond}}
}

// BenchmarkLinesSet sets rows' lines from 256 goroutines, as many as a
// model of max_concurrency 256 answers at once, chunks of benchRows rows.
func BenchmarkLinesSet(b *testing.B) {
	o := benchOutcome()
	b.SetBytes(int64(len(o.Result.Body)))
	lines, set := make([]*Lines, b.N/benchRows+1), make([]atomic.Int32, b.N/benchRows+1)
	for i := range lines {
		lines[i] = NewLines(batch.Batch{ID: "batch_bench", Tenant: "t", KeyID: "k"}, batch.Chunk{Rows: benchRows, FirstRow: i * benchRows, Model: "big-256"}, time.Unix(0, 0))
	}
	var next atomic.Int64
	b.SetParallelism(max(1, 256/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := int(next.Add(1) - 1)
			lines[n/benchRows].Set(n%benchRows, o)
			if set[n/benchRows].Add(1) == benchRows {
				lines[n/benchRows].Close() // committed: a run lets go of its lines
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
	for _, l := range lines {
		l.Close()
	}
}

// cpuTime is the process's CPU time so far, user and system: what a row
// costs on a loaded machine, where wall time per op says little.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
