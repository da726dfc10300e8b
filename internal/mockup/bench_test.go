package mockup_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/mockup"
)

// largeRowBody is a chat body of the large scenario of make bench
// (localstack/bench_large_test.go, writeLargeInput): one user message
// padded with words to a row of about 4,000 bytes, model big-256.
func largeRowBody(i int) []byte {
	words := strings.Repeat("lorem ipsum dolor sit amet ", 4000/20)
	content := fmt.Sprintf("row %d ", i) + words[:3850]
	b, err := json.Marshal(map[string]any{"model": "big-256", "messages": []any{map[string]any{"role": "user", "content": content}}})
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkChatLargeRow serves the large bench's requests through the real
// handler, at no latency: the CPU the mock spends on one of them.
func BenchmarkChatLargeRow(b *testing.B) {
	m := mockup.New(mockup.Options{})
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = largeRowBody(i)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(bodies[0])))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(bodies[i%len(bodies)]))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer test-key")
		w := httptest.NewRecorder()
		m.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
