package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/webhook"
)

// announcer is a Lifecycle that records the events announced, failing
// them with fail.
type announcer struct {
	lifecycleFunc
	events []string
	fail   error
}

func (a *announcer) Announce(_ context.Context, b batch.Batch, event string) error {
	if a.fail != nil {
		return a.fail
	}
	a.events = append(a.events, b.ID+" "+event)
	return nil
}

// A batch with a webhook_url announces in_progress once, however many of
// its runs start from a read of the batch before the record; a failed
// announce takes the record back, and the next run announces it.
func TestAnnounceInProgressOnce(t *testing.T) {
	t.Parallel()
	url := "https://hooks.example/x"
	b := batch.Batch{ID: "batch_x", Tenant: "t", Status: batch.InProgress, WebhookURL: &url}
	table := newMemTable()
	table.putBatch(b)
	life := &announcer{fail: errors.New("queue down")}
	e := testEngine(&Engine{Store: table, Log: slog.New(slog.DiscardHandler), Lifecycle: life})
	ctx := context.Background()

	e.announceInProgress(ctx, b)
	if len(life.events) != 0 || table.batch(b.ID).AnnouncedInProgress {
		t.Fatalf("failed announce: events %v, recorded %v; want none and the record taken back", life.events, table.batch(b.ID).AnnouncedInProgress)
	}
	life.fail = nil
	for range 3 { // runs that read the batch before the record
		e.announceInProgress(ctx, b)
	}
	if want := []string{"batch_x " + webhook.InProgress}; !slices.Equal(life.events, want) || !table.batch(b.ID).AnnouncedInProgress {
		t.Fatalf("events %v, recorded %v; want %v once, recorded", life.events, table.batch(b.ID).AnnouncedInProgress, want)
	}
	// Nothing for a batch without a webhook_url, or one stopping.
	plain := batch.Batch{ID: "batch_y", Tenant: "t", Status: batch.InProgress}
	stopping := b
	stopping.ID, stopping.Status = "batch_z", batch.Cancelling
	e.announceInProgress(ctx, plain)
	e.announceInProgress(ctx, stopping)
	if len(life.events) != 1 {
		t.Fatalf("events %v, want none for a batch without webhook or one cancelling", life.events)
	}
}

// ambiguousBatches answers an update of a batch as the store does when its
// write took effect but answered an error and was retried (the SDK's retry
// fails its condition, store.update reads the batch again and runs fn on
// it): fn runs a second time, on what the first run wrote.
type ambiguousBatches struct{ *memTable }

func (m ambiguousBatches) UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error) {
	if _, err := m.memTable.UpdateBatch(ctx, tenant, id, fn); err != nil {
		return batch.Batch{}, err
	}
	return m.memTable.UpdateBatch(ctx, tenant, id, fn)
}

// The run whose record of in_progress took effect but answered an error,
// then was retried, still queues the event: before, the retry read the
// record back as another run's and returned, so batch.in_progress was
// never sent.
func TestAnnounceInProgressAfterAnAmbiguousRecord(t *testing.T) {
	t.Parallel()
	url := "https://hooks.example/x"
	b := batch.Batch{ID: "batch_x", Tenant: "t", Status: batch.InProgress, WebhookURL: &url}
	table := newMemTable()
	table.putBatch(b)
	life := &announcer{}
	e := testEngine(&Engine{Store: ambiguousBatches{table}, Log: slog.New(slog.DiscardHandler), Lifecycle: life})
	e.announceInProgress(context.Background(), b)
	if want := []string{"batch_x " + webhook.InProgress}; !slices.Equal(life.events, want) || !table.batch(b.ID).AnnouncedInProgress {
		t.Fatalf("events %v, recorded %v; want %v, recorded", life.events, table.batch(b.ID).AnnouncedInProgress, want)
	}
}

// lostAnswer applies the first update of a batch and answers an error, as a
// write whose answer was lost (a timeout after it took effect, no retry).
type lostAnswer struct {
	*memTable
	once *sync.Once
}

func (m lostAnswer) UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error) {
	b, err := m.memTable.UpdateBatch(ctx, tenant, id, fn)
	lost := false
	m.once.Do(func() { lost = true })
	if lost && err == nil {
		return batch.Batch{}, context.DeadlineExceeded
	}
	return b, err
}

// A record of in_progress whose answer was lost may have taken effect: the
// run writes it again and queues the event. Before, it returned: the batch
// recorded the event queued, nothing queued it, and its terminal webhook
// waited two minutes for it (make chaos seed 99 gave up waiting first).
func TestAnnounceInProgressAfterALostAnswer(t *testing.T) {
	t.Parallel()
	url := "https://hooks.example/x"
	b := batch.Batch{ID: "batch_x", Tenant: "t", Status: batch.InProgress, WebhookURL: &url}
	table := newMemTable()
	table.putBatch(b)
	life := &announcer{}
	e := testEngine(&Engine{Store: lostAnswer{table, &sync.Once{}}, Log: slog.New(slog.DiscardHandler), Lifecycle: life})
	e.announceInProgress(context.Background(), b)
	if want := []string{"batch_x " + webhook.InProgress}; !slices.Equal(life.events, want) || !table.batch(b.ID).AnnouncedInProgress {
		t.Fatalf("events %v, recorded %v; want %v, recorded", life.events, table.batch(b.ID).AnnouncedInProgress, want)
	}
}

// failingTakeBack fails the second update of a batch (the take-back of a
// record whose event failed to queue) once, as a throttled write.
type failingTakeBack struct {
	*memTable
	n *int
}

func (m failingTakeBack) UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error) {
	if *m.n++; *m.n == 2 {
		return batch.Batch{}, errors.New("ThrottlingException")
	}
	return m.memTable.UpdateBatch(ctx, tenant, id, fn)
}

// A failed announce whose take-back of the record is throttled once tries
// the take-back again, so the batch's next chunk announces the event.
// Before, the record stayed: nothing queued in_progress, and the batch's
// completion webhook waited two minutes for it (make chaos, seed 99 at
// 768-row chunks, gave up waiting first).
func TestAnnounceInProgressTakeBackRetried(t *testing.T) {
	t.Parallel()
	url := "https://hooks.example/x"
	b := batch.Batch{ID: "batch_x", Tenant: "t", Status: batch.InProgress, WebhookURL: &url}
	table := newMemTable()
	table.putBatch(b)
	life := &announcer{fail: errors.New("queue throttled")}
	e := testEngine(&Engine{Store: failingTakeBack{table, new(int)}, Log: slog.New(slog.DiscardHandler), Lifecycle: life})
	e.announceInProgress(context.Background(), b)
	if table.batch(b.ID).AnnouncedInProgress {
		t.Fatal("in_progress recorded queued though its announce failed: the take-back was not tried again")
	}
	life.fail = nil
	e.announceInProgress(context.Background(), table.batch(b.ID))
	if want := []string{"batch_x " + webhook.InProgress}; !slices.Equal(life.events, want) {
		t.Fatalf("events %v, want %v from the next chunk", life.events, want)
	}
}
