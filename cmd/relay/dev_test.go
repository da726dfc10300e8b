package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// relay dev's console leaves out the embedded-metric line the tick logs
// every minute, and keeps the rest.
func TestDevLogLeavesOutMetrics(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(noMetrics{slog.NewTextHandler(&buf, nil)}).With("function", "dispatcher")
	log.Info("tick", "_aws", map[string]any{"CloudWatchMetrics": []any{}}, "OldestBatchAgeSeconds", 0)
	log.Info("batch planned", "batch_id", "batch_1")
	if got := buf.String(); strings.Contains(got, "tick") || !strings.Contains(got, "batch planned") || !strings.Contains(got, "function=dispatcher") {
		t.Fatalf("logged %q; want the batch line only", got)
	}
}
