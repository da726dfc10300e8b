package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
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

// relay dev's mock flags (make dev MOCK_LATENCY=…, MOCK_ERROR_RATE=…)
// become the mock provider's options; a rate outside 0–1, --stack
// without AWS_ENDPOINT_URL and --lambda without --stack are usage errors.
func TestDevFlags(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "")
	var out bytes.Buffer
	f, err := parseDevFlags([]string{"--mock-latency", "200ms", "--mock-error-rate", "0.1", "--mock-addr", "127.0.0.1:9999"}, &out, &out)
	if err != nil || f.mock.Latency != 200*time.Millisecond || f.mock.ErrorRate != 0.1 || f.mockAddr != "127.0.0.1:9999" {
		t.Fatalf("got %+v, %v; want 200ms latency, 0.1 error rate on 127.0.0.1:9999", f, err)
	}
	for _, args := range [][]string{{"--mock-error-rate", "1.5"}, {"--stack", "relay"}, {"--lambda"}} {
		if _, err := parseDevFlags(args, &out, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
