package batches

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/schedule"
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
func (*releaseTable) BatchUsage(context.Context, string, string, string, []string) ([]store.UsageDetail, error) {
	return nil, nil
}

func (*releaseTable) UsageDetails(context.Context, string, string, string, int) ([]store.UsageDetail, error) {
	return nil, errNotInFake
}
func (*releaseTable) DeleteBatch(context.Context, string, string) error { return errNotInFake }
func (*releaseTable) DeleteFile(context.Context, string, string) error  { return errNotInFake }
func (*releaseTable) ReadyEntries(context.Context, string) ([]sched.Ready, error) {
	return nil, errNotInFake
}

var _ Store = (*releaseTable)(nil)

// enqueued records the webhooks queued.
type enqueued struct{ ids []string }

func (e *enqueued) Enqueue(_ context.Context, b batch.Batch) error {
	e.ids = append(e.ids, b.ID)
	return nil
}
func (*enqueued) Announce(context.Context, batch.Batch, string) error         { return nil }
func (*enqueued) Announces(batch.Batch) bool                                  { return false }
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

// templateTable holds one template; its updates answer as the store does
// when a write took effect but answered an error and was retried (the
// SDK's retry fails its condition, store.update reads the batch again and
// runs fn on it): fn runs a second time, on what the first run wrote.
type templateTable struct {
	releaseTable
	tpl              batch.Batch
	templateReleased []string
}

func (f *templateTable) GetBatch(context.Context, string, string) (batch.Batch, error) {
	return f.tpl, nil
}

func (f *templateTable) UpdateBatch(_ context.Context, _, _ string, fn func(*batch.Batch) error) (batch.Batch, error) {
	b := f.tpl
	if err := fn(&b); err != nil {
		return b, err
	}
	f.tpl = b
	b = f.tpl
	if err := fn(&b); err != nil {
		return b, err
	}
	f.tpl = b
	return b, nil
}

func (f *templateTable) ReleaseTemplate(_ context.Context, _, id string) (bool, error) {
	f.templateReleased = append(f.templateReleased, id)
	return true, nil
}

// inputFiles records what cancelling a template does to its input.
type inputFiles struct {
	Files
	expires  []string
	released []string
}

func (f *inputFiles) SetExpiresAt(_ context.Context, _, id string, at *int64) error {
	if at != nil {
		f.expires = append(f.expires, id)
	}
	return nil
}

func (f *inputFiles) Release(_ context.Context, _, id, _ string) error {
	f.released = append(f.released, id)
	return nil
}

// A template cancel whose write took effect but answered an error, then
// was retried, still does what follows a cancel: its template slot back,
// its input's expiry and hold, its webhook. Before, the retry read the
// template back cancelled as a concurrent cancel's and returned, so none of
// them happened (the input never expired, the webhook was never sent).
func TestTemplateCancelAfterAnAmbiguousWrite(t *testing.T) {
	t.Parallel()
	schedule := "0 * * * *"
	table := &templateTable{tpl: batch.Batch{ID: "batch_tpl", Tenant: "t", Status: batch.Scheduled, Schedule: &schedule, InputFileID: "file-in"}}
	files, hooks := &inputFiles{}, &enqueued{}
	s := &Service{Store: table, Files: files, Deliveries: hooks, MaxTemplates: 10, Now: time.Now}
	got, err := s.Cancel(context.Background(), "t", "batch_tpl")
	if err != nil || got.Status != batch.Cancelled {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	if !slices.Equal(table.templateReleased, []string{"batch_tpl"}) || !slices.Equal(files.expires, []string{"file-in"}) ||
		!slices.Equal(files.released, []string{"file-in"}) || !slices.Equal(hooks.ids, []string{"batch_tpl"}) {
		t.Fatalf("slot released %v, input expiring %v, input released %v, webhooks %v; want each once",
			table.templateReleased, files.expires, files.released, hooks.ids)
	}
}

// failingScheduler refuses every schedule.
type failingScheduler struct{ schedule.API }

func (failingScheduler) CreateSchedule(context.Context, *scheduler.CreateScheduleInput, ...func(*scheduler.Options)) (*scheduler.CreateScheduleOutput, error) {
	return nil, errors.New("scheduler: throttled")
}

// newTemplates is templateTable as a create records its template.
type newTemplates struct{ templateTable }

func (f *newTemplates) CreateBatch(_ context.Context, b batch.Batch, _ store.IdemKey) (batch.Batch, bool, error) {
	f.tpl = b
	return b, true, nil
}
func (*newTemplates) Templates(context.Context, string) (int, error) { return 0, nil }
func (*newTemplates) ReserveTemplate(context.Context, string, string, int, time.Time) error {
	return nil
}

func (f *inputFiles) Hold(context.Context, string, string, string) error { return nil }

// A template whose schedule cannot be created is cancelled with what
// follows a cancel: its template slot back, its input's expiry and hold
// ended. Before, it was only marked cancelled: its input, kept without an
// expiry while it was scheduled and held by it, was kept for ever, and its
// slot waited for a repair at the limit.
func TestTemplateWithoutScheduleCancelledWholly(t *testing.T) {
	t.Parallel()
	table, files, hooks := &newTemplates{}, &inputFiles{}, &enqueued{}
	s := &Service{Store: table, Files: files, Deliveries: hooks, MaxTemplates: 10, Now: time.Now,
		Schedules: &schedule.Manager{API: failingScheduler{}}, Log: slog.New(slog.DiscardHandler)}
	b := batch.Batch{ID: "batch_tpl", Tenant: "t", InputFileID: "file-in", Endpoint: "/v1/chat/completions", CompletionWindow: "24h"}
	if _, err := s.createTemplate(context.Background(), b, schedule.Spec{Cron: "0 * * * *", Timezone: "UTC"}, store.IdemKey{}); err == nil {
		t.Fatal("a template without its schedule was created")
	}
	if table.tpl.Status != batch.Cancelled || !slices.Equal(table.templateReleased, []string{"batch_tpl"}) ||
		!slices.Equal(files.expires, []string{"file-in"}) || !slices.Equal(files.released, []string{"file-in"}) {
		t.Fatalf("template %s, slot released %v, input expiring %v, input released %v; want cancelled, each once",
			table.tpl.Status, table.templateReleased, files.expires, files.released)
	}
}
