package jsonl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// benchInput is n chat rows of about 250 bytes, a typical small request.
func benchInput(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"request-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarize item %d in one line."}],"max_tokens":200}}`+"\n", i, i)
	}
	return b.Bytes()
}

// largeInput is n chat rows of 4,000 bytes each, their content padded with
// words, as localstack's large bench writes them (writeLargeInput): 50,000
// of them are the 200 MB of OpenAI's largest batch.
func largeInput(n int) []byte {
	const rowBytes = 4_000
	words := strings.Repeat("lorem ipsum dolor sit amet ", rowBytes/20)
	var b bytes.Buffer
	for i := range n {
		line := func(content string) []byte {
			l, _ := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("r%06d", i), "method": "POST", "url": "/v1/chat/completions",
				"body": map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": content}}}})
			return l
		}
		prefix := fmt.Sprintf("row %d ", i)
		b.Write(line(prefix + words[:rowBytes-1-len(line(prefix))]))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// reportPerRow adds heap allocations and CPU time per row to a benchmark's
// output.
func reportPerRow(b *testing.B, rows int, run func()) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	n := float64(b.N) * float64(rows)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/row")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/row")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/row")
}

func BenchmarkScan(b *testing.B) {
	const rows = 50_000
	input := benchInput(rows)
	b.SetBytes(int64(len(input)))
	reportPerRow(b, rows, func() {
		res, err := Scan(bytes.NewReader(input), chatOptions(), func(Row) error { return nil })
		if err != nil || len(res.Errors) != 0 || res.Rows != rows {
			b.Fatalf("got %v, %v", res.Errors, err)
		}
	})
}

// BenchmarkScanLarge scans rows of the large bench's size (4 KB chat rows),
// where validation costs by the byte, not by the row.
func BenchmarkScanLarge(b *testing.B) {
	const rows = 2_000
	input := largeInput(rows)
	b.SetBytes(int64(len(input)))
	reportPerRow(b, rows, func() {
		res, err := Scan(bytes.NewReader(input), chatOptions(), func(Row) error { return nil })
		if err != nil || len(res.Errors) != 0 || res.Rows != rows {
			b.Fatalf("got %v, %v", res.Errors, err)
		}
	})
}

func BenchmarkScanCSV(b *testing.B) {
	const rows = 50_000
	var sb strings.Builder
	sb.WriteString("custom_id,prompt\n")
	for i := range rows {
		fmt.Fprintf(&sb, "request-%d,\"Summarize item %d in one line, please.\"\n", i, i)
	}
	input := []byte(sb.String())
	b.SetBytes(int64(len(input)))
	reportPerRow(b, rows, func() {
		res, err := Scan(bytes.NewReader(input), csvOptions(), func(Row) error { return nil })
		if err != nil || len(res.Errors) != 0 || res.Rows != rows {
			b.Fatalf("got %v, %v", res.Errors, err)
		}
	})
}

// BenchmarkParseRequests parses one chunk of 100 rows, as the executor does.
func BenchmarkParseRequests(b *testing.B) {
	const rows = 100
	input := benchInput(rows)
	b.SetBytes(int64(len(input)))
	reportPerRow(b, rows, func() {
		if reqs, err := ParseRequests(input); err != nil || len(reqs) != rows {
			b.Fatalf("got %d, %v", len(reqs), err)
		}
	})
}
