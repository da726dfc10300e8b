package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/ratelimit"
)

// A tenant's templates are counted apart from its batches in flight: the
// template pool refuses the (max+1)-th, even when the creates race, gives
// a slot back once however often it is released, and leaves the in-flight
// pool alone.
func TestTemplateSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := emulatorStore(t)
	now := time.Now()
	const max = 3
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		taken   int
		refused int
	)
	for i := range 6 {
		wg.Go(func() {
			err := s.ReserveTemplate(ctx, "acme", "batch_t"+string(rune('a'+i)), max, now)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				taken++
			case errors.Is(err, ErrTemplateLimit):
				refused++
			default:
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	if taken != max || refused != 6-max {
		t.Fatalf("6 racing reserves of %d slots: %d taken, %d refused", max, taken, refused)
	}
	if n, err := s.Templates(ctx, "acme"); err != nil || n != max {
		t.Fatalf("Templates = %d, %v; want %d", n, err, max)
	}
	if n, err := s.Inflight(ctx, "acme"); err != nil || n != 0 {
		t.Fatalf("Inflight = %d, %v; want the in-flight pool untouched", n, err)
	}
	ms, err := s.TemplateMarkers(ctx, "acme")
	if err != nil || len(ms) != max {
		t.Fatalf("TemplateMarkers = %+v, %v", ms, err)
	}
	for i := range 3 {
		ok, err := s.ReleaseTemplate(ctx, "acme", ms[0].Batch)
		if err != nil || ok != (i == 0) {
			t.Fatalf("release %d of %s: %v, %v; want only the first to give the slot back", i+1, ms[0].Batch, ok, err)
		}
	}
	if n, err := s.Templates(ctx, "acme"); err != nil || n != max-1 {
		t.Fatalf("after a release: Templates = %d, %v; want %d", n, err, max-1)
	}
	if err := s.ReserveTemplate(ctx, "acme", "batch_tz", max, now); err != nil {
		t.Fatalf("reserve after a release: %v", err)
	}
	if err := s.ReserveTemplate(ctx, "globex", "batch_g", max, now); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
}

// A batch's webhook holds one pending slot however often its terminal
// state is reported (its enqueue repeated); the (max+1)-th batch is refused.
func TestWebhookSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := emulatorStore(t)
	now := time.Now()
	for range 3 {
		if err := s.ReserveWebhook(ctx, "acme", "batch_a", 2, now); err != nil {
			t.Fatalf("reserve, reported again: %v", err)
		}
	}
	if err := s.ReserveWebhook(ctx, "acme", "batch_b", 2, now); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveWebhook(ctx, "acme", "batch_c", 2, now); !errors.Is(err, ErrWebhookLimit) {
		t.Fatalf("third batch: %v, want ErrWebhookLimit", err)
	}
	if err := s.ReserveWebhook(ctx, "acme", "batch_a", 2, now); err != nil {
		t.Fatalf("a held slot at the limit: %v", err)
	}
	if ok, err := s.ReleaseWebhook(ctx, "acme", "batch_a"); !ok || err != nil {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if err := s.ReserveWebhook(ctx, "acme", "batch_c", 2, now); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if ms, err := s.WebhookMarkers(ctx, "acme"); err != nil || len(ms) != 2 {
		t.Fatalf("markers %+v, %v; want batch_b and batch_c", ms, err)
	}
	if n, err := s.Inflight(ctx, "acme"); err != nil || n != 0 {
		t.Fatalf("in-flight pool: %d, %v", n, err)
	}
}

// A rate budget's second takes leases while they fit its capacity, racing
// executors included, and starts afresh the next second.
func TestRateBudgetLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := emulatorStore(t)
	const sec = 1_700_000_000
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted int64
	)
	for range 8 {
		wg.Go(func() {
			ok, err := s.Lease(ctx, "m#K#rpm", sec, 3, 10)
			if err != nil {
				t.Errorf("lease: %v", err)
			}
			if ok {
				mu.Lock()
				granted += 3
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if granted != 9 {
		t.Fatalf("granted %d of a capacity of 10 in blocks of 3, want 9", granted)
	}
	if ok, err := s.Lease(ctx, "m#K#rpm", sec, 1, 10); err != nil || !ok {
		t.Fatalf("the last unit: %v %v", ok, err)
	}
	if ok, err := s.Lease(ctx, "m#K#rpm", sec, 1, 10); err != nil || ok {
		t.Fatalf("over capacity: %v %v", ok, err)
	}
	if ok, err := s.Lease(ctx, "m#K#rpm", sec+1, 10, 10); err != nil || !ok {
		t.Fatalf("the next second: %v %v", ok, err)
	}
}

// A dropped key is recorded for relay admin models, and a budget's use
// over a minute is the sum of its seconds.
func TestDroppedKeysAndBudgetUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := emulatorStore(t)
	if err := s.DropKey(ctx, "m", "KEY_A", 401, time.Unix(1_700_000_000, 0)); err != nil {
		t.Fatal(err)
	}
	got, err := s.DroppedKeys(ctx, "m")
	if err != nil || len(got) != 1 || got["KEY_A"].Status != 401 || got["KEY_A"].DroppedAt != 1_700_000_000 {
		t.Fatalf("dropped keys %+v, %v", got, err)
	}
	for sec, n := range map[int64]int64{1_700_000_000: 5, 1_700_000_030: 7, 1_700_000_100: 11} {
		if ok, err := s.Lease(ctx, "m#KEY_B#rpm", sec, n, 100); !ok || err != nil {
			t.Fatalf("lease: %v %v", ok, err)
		}
	}
	if used, err := s.BudgetUsed(ctx, "m#KEY_B#rpm", 1_700_000_000, 1_700_000_059); err != nil || used != 12 {
		t.Fatalf("used in the minute: %d, %v; want 12", used, err)
	}
}

// An executor's published key states are read back per model, one per
// key and executor, the latest publication in place of the one before.
func TestLimiterStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := emulatorStore(t)
	at := time.UnixMilli(1_700_000_000_123)
	a := ratelimit.KeyState{Env: "KEY_A", State: "dropped", Circuit: ratelimit.Open, Concurrency: 3, LimitedPerMinute: 12, RPM: 399.5, TPM: 0}
	b := ratelimit.KeyState{Env: "KEY_B", State: "live", Circuit: ratelimit.Closed, Concurrency: 16}
	if err := s.PublishLimiter(ctx, "m", "ex1", at.Add(-time.Second), []ratelimit.KeyState{b}); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishLimiter(ctx, "m", "ex1", at, []ratelimit.KeyState{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishLimiter(ctx, "other", "ex1", at, []ratelimit.KeyState{a}); err != nil {
		t.Fatal(err)
	}
	got, err := s.LimiterStates(ctx, "m")
	want := []ratelimit.Published{{KeyState: a, Executor: "ex1", At: at}, {KeyState: b, Executor: "ex1", At: at}}
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("states %+v, %v\nwant %+v", got, err, want)
	}
}
