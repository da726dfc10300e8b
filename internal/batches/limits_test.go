package batches

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/store"
)

func TestLeftBehind(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	young := store.InflightMarker{Batch: "batch_a", CreatedAt: now.Add(-10 * time.Second).Unix()}
	old := store.InflightMarker{Batch: "batch_a", CreatedAt: now.Add(-time.Hour).Unix()}
	tests := []struct {
		name   string
		m      store.InflightMarker
		status batch.Status
		found  bool
		want   bool
	}{
		{"running batch", old, batch.InProgress, true, false},
		{"validating batch", old, batch.Validating, true, false},
		{"cancelling batch", old, batch.Cancelling, true, false},
		{"finalizing batch", old, batch.Finalizing, true, false},
		{"completed batch", young, batch.Completed, true, true},
		{"failed batch", old, batch.Failed, true, true},
		{"expired batch", old, batch.Expired, true, true},
		{"cancelled batch", old, batch.Cancelled, true, true},
		{"create still under way", young, "", false, false},
		{"create that never recorded its batch", old, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := leftBehind(tt.m, batch.Batch{Status: tt.status}, tt.found, now); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInflightLimitedError(t *testing.T) {
	t.Parallel()
	s := &Service{MaxInflight: 7}
	var got *errs.Error
	if !errors.As(s.inflightLimited(), &got) || got.Kind != errs.RateLimited || got.RetryAfter <= 0 ||
		got.Code != "too_many_batches_in_flight" || !strings.Contains(got.Message, "7 batches in flight") {
		t.Fatalf("got %#v, want a 429 with Retry-After naming the limit", got)
	}
}

// With the limit off, or for a template, nothing is read or counted (the
// service here has no store: touching it would panic).
func TestInflightOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	off := &Service{}
	if err := off.checkInflight(ctx, "acme", CreateRequest{}); err != nil {
		t.Fatalf("limit off: %v", err)
	}
	on := &Service{MaxInflight: 1}
	if err := on.checkInflight(ctx, "acme", CreateRequest{Schedule: "* * * * *"}); err != nil {
		t.Fatalf("template: %v", err)
	}
	// The release side: the limit off, a batch that has not ended, a template.
	if err := off.ReleaseInflight(ctx, batch.Batch{Status: batch.Completed}); err != nil {
		t.Fatalf("release, limit off: %v", err)
	}
	tpl := "* * * * *"
	for _, b := range []batch.Batch{{Status: batch.InProgress}, {Status: batch.Cancelled, Schedule: &tpl}} {
		if err := on.ReleaseInflight(ctx, b); err != nil {
			t.Fatalf("release, %s batch: %v", b.Status, err)
		}
	}
}
