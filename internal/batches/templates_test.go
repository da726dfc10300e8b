package batches

import (
	"strings"
	"testing"
	"time"
)

func TestRunKey(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 7, 6, 0, 0, 0, time.FixedZone("CET", 3600))
	if runKey("batch_t", at) != runKey("batch_t", at.UTC()) {
		t.Error("one instant in two zones gave two run keys")
	}
	if runKey("batch_t", at) == runKey("batch_t", at.Add(time.Minute)) || runKey("batch_t", at) == runKey("batch_u", at) {
		t.Error("different firings share a run key")
	}
	// No HTTP header value holds a NUL: a client's Idempotency-Key cannot
	// take a run's.
	if !strings.Contains(runKey("batch_t", at), "\x00") {
		t.Error("run key could collide with an Idempotency-Key header")
	}
}
