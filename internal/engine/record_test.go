package engine

import (
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
)

func TestIsWorkflowChunk(t *testing.T) {
	t.Parallel()
	wf := jsonl.Request{CustomID: "w", Body: []byte(`{"model":"m","relay":{"workflow":{"url":"https://x.example"}}}`)}
	plain := jsonl.Request{CustomID: "p", Body: []byte(`{"model":"m","messages":[]}`)}
	tests := []struct {
		name string
		c    batch.Chunk
		reqs []jsonl.Request
		want bool
	}{
		{"a workflow record's own chunk", batch.Chunk{Rows: 1}, []jsonl.Request{wf}, true},
		{"a one-row plain chunk", batch.Chunk{Rows: 1}, []jsonl.Request{plain}, false},
		// Planned before workflows had chunks of their own: run as rows.
		{"a workflow row among others", batch.Chunk{Rows: 2}, []jsonl.Request{plain, wf}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := isWorkflowChunk(tt.c, tt.reqs); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
