package batches

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/store"
)

// releaseTable is a Store that records in-flight releases and has nothing
// else: every other method fails with errNotInFake, so a test that reaches
// one fails instead of panicking.
type releaseTable struct {
	released []string
	err      error
}

var errNotInFake = errors.New("batches test: not in this fake")

func (f *releaseTable) ReleaseInflight(_ context.Context, _, id string) (bool, error) {
	if f.err != nil {
		return false, f.err
	}
	f.released = append(f.released, id)
	return true, nil
}

func (*releaseTable) CreateBatch(context.Context, batch.Batch, store.IdemKey) (batch.Batch, bool, error) {
	return batch.Batch{}, false, errNotInFake
}
func (*releaseTable) GetBatch(context.Context, string, string) (batch.Batch, error) {
	return batch.Batch{}, errNotInFake
}
func (*releaseTable) UpdateBatch(context.Context, string, string, func(*batch.Batch) error) (batch.Batch, error) {
	return batch.Batch{}, errNotInFake
}
func (*releaseTable) ListBatches(context.Context, string, string, int, string) ([]batch.Batch, bool, error) {
	return nil, false, errNotInFake
}
func (*releaseTable) IdempotentBatch(context.Context, string, string) (store.Idem, error) {
	return store.Idem{}, errNotInFake
}
func (*releaseTable) Chunks(context.Context, string) ([]batch.Chunk, error) { return nil, errNotInFake }
func (*releaseTable) DeadLetters(context.Context, string, int, int) ([]batch.DeadLetter, bool, error) {
	return nil, false, errNotInFake
}
func (*releaseTable) GetFile(context.Context, string, string) (file.File, error) {
	return file.File{}, errNotInFake
}
func (*releaseTable) PutFile(context.Context, file.File) error          { return errNotInFake }
func (*releaseTable) PutFileOverwrite(context.Context, file.File) error { return errNotInFake }
func (*releaseTable) Inflight(context.Context, string) (int, error)     { return 0, errNotInFake }
func (*releaseTable) InflightMarkers(context.Context, string) ([]store.InflightMarker, error) {
	return nil, errNotInFake
}
func (*releaseTable) ReserveInflight(context.Context, string, string, int, time.Time) error {
	return errNotInFake
}
func (*releaseTable) Templates(context.Context, string) (int, error) { return 0, errNotInFake }
func (*releaseTable) TemplateMarkers(context.Context, string) ([]store.InflightMarker, error) {
	return nil, errNotInFake
}
func (*releaseTable) ReserveTemplate(context.Context, string, string, int, time.Time) error {
	return errNotInFake
}
func (f *releaseTable) ReleaseTemplate(_ context.Context, _, id string) (bool, error) {
	if f.err != nil {
		return false, f.err
	}
	f.released = append(f.released, "template "+id)
	return true, nil
}
func (*releaseTable) KeyByID(context.Context, string) (apikey.Key, error) {
	return apikey.Key{}, errNotInFake
}
func (*releaseTable) Usage(context.Context, string, string, string) ([]store.UsageRow, error) {
	return nil, errNotInFake
}
func (*releaseTable) UsageDetails(context.Context, string, string, string) ([]store.UsageDetail, error) {
	return nil, errNotInFake
}
func (*releaseTable) DeleteBatch(context.Context, string, string) error { return errNotInFake }
func (*releaseTable) DeleteFile(context.Context, string, string) error  { return errNotInFake }

var _ Store = (*releaseTable)(nil)

// enqueued records the webhooks queued.
type enqueued struct{ ids []string }

func (e *enqueued) Enqueue(_ context.Context, b batch.Batch) error {
	e.ids = append(e.ids, b.ID)
	return nil
}
func (*enqueued) Announce(context.Context, batch.Batch, string) error         { return nil }
func (*enqueued) WithDeliveries(_ context.Context, b batch.Batch) batch.Batch { return b }

// Terminal, the engine's Lifecycle, gives a counted batch's in-flight slot
// back before it queues the webhook, queues none when the release fails
// (the finalize message comes back and reports the state again), and
// queues a template's without a release (it holds no slot).
func TestTerminalReleasesThenEnqueues(t *testing.T) {
	t.Parallel()
	schedule := "0 * * * *"
	for _, tt := range []struct {
		name                   string
		b                      batch.Batch
		releaseErr             error
		wantReleased, wantSent []string
		wantErr                bool
	}{
		{name: "counted", b: batch.Batch{ID: "b1", Tenant: "t", Status: batch.Completed}, wantReleased: []string{"b1"}, wantSent: []string{"b1"}},
		{name: "release fails", b: batch.Batch{ID: "b1", Tenant: "t", Status: batch.Failed}, releaseErr: errors.New("throttled"), wantErr: true},
		{name: "template", b: batch.Batch{ID: "tpl", Tenant: "t", Status: batch.Cancelled, Schedule: &schedule}, wantSent: []string{"tpl"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			table, hooks := &releaseTable{err: tt.releaseErr}, &enqueued{}
			s := &Service{Store: table, Deliveries: hooks, MaxInflight: 1}
			err := s.Terminal(context.Background(), tt.b)
			if (err != nil) != tt.wantErr || !slices.Equal(table.released, tt.wantReleased) || !slices.Equal(hooks.ids, tt.wantSent) {
				t.Fatalf("Terminal: %v, released %v, queued %v; want error %v, released %v, queued %v",
					err, table.released, hooks.ids, tt.wantErr, tt.wantReleased, tt.wantSent)
			}
		})
	}
}
