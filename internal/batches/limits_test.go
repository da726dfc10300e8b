package batches

import (
	"context"
	"errors"
	"log/slog"
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

// holdingTable is a hand-written holdingStore: CreateBatch writes the
// batch then fails with err when after is set (a write that took effect
// although its call failed), or fails unwritten with err otherwise.
type holdingTable struct {
	batches  map[string]batch.Batch
	err      error
	after    bool
	first    string // CreateBatch finds the key's first batch, of this id
	getErr   error
	released []string
}

func (f *holdingTable) CreateBatch(_ context.Context, b batch.Batch, _ store.IdemKey) (batch.Batch, bool, error) {
	if f.first != "" {
		return batch.Batch{ID: f.first, Tenant: b.Tenant}, false, nil
	}
	if f.err == nil || f.after {
		f.batches[b.ID] = b
	}
	if f.err != nil {
		return b, false, f.err
	}
	return b, true, nil
}

func (f *holdingTable) GetBatch(_ context.Context, _, id string) (batch.Batch, error) {
	if f.getErr != nil {
		return batch.Batch{}, f.getErr
	}
	b, ok := f.batches[id]
	if !ok {
		return b, store.ErrBatchNotFound
	}
	return b, nil
}

func (f *holdingTable) ReleaseInflight(_ context.Context, _, id string) (bool, error) {
	f.released = append(f.released, id)
	return true, nil
}

// A create whose batch write fails gives its in-flight slot back only if
// the batch does not exist: a write that took effect although its call
// failed (docs/design.md "Conflicts and ambiguous writes") is the batch's,
// and keeps its slot while it runs.
func TestRecordHoldingReleasesOnlyAnUnrecordedBatch(t *testing.T) {
	t.Parallel()
	timeout := errors.New("request timed out")
	tests := []struct {
		name        string
		err         error
		after       bool
		first       string
		getErr      error
		wantCreated bool
		wantErr     bool
		wantRelease bool
	}{
		{"recorded", nil, false, "", nil, true, false, false},
		{"failed before the write", timeout, false, "", nil, false, true, true},
		{"failed after the write took effect", timeout, true, "", nil, true, false, false},
		{"failed, and the read back failed too", timeout, false, "", timeout, false, true, false},
		{"the key's first batch is another", nil, false, "batch_0", nil, false, false, true},
		{"the key's first batch is this one (an earlier try took effect)", nil, false, "batch_1", nil, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &holdingTable{batches: map[string]batch.Batch{}, err: tt.err, after: tt.after, first: tt.first, getErr: tt.getErr}
			b := batch.Batch{ID: "batch_1", Tenant: "t", Status: batch.Validating}
			saved, created, err := recordHolding(context.Background(), f, slog.New(slog.DiscardHandler), b, store.IdemKey{})
			if (err != nil) != tt.wantErr || created != tt.wantCreated {
				t.Fatalf("got created %v, err %v; want created %v, an error %v", created, err, tt.wantCreated, tt.wantErr)
			}
			if created && saved.ID != b.ID {
				t.Errorf("got batch %q, want %q", saved.ID, b.ID)
			}
			if got := len(f.released) > 0; got != tt.wantRelease {
				t.Errorf("slot released: got %v, want %v", got, tt.wantRelease)
			}
		})
	}
}
