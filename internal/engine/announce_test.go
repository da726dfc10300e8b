package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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
