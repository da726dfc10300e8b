package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// fakeTable is a hand-written Store of one batch, its chunks and the files
// written; the methods it leaves to the embedded nil Store panic.
type fakeTable struct {
	Store
	b      batch.Batch
	chunks []batch.Chunk
	files  map[string]file.File
}

func (f *fakeTable) GetBatch(_ context.Context, tenant, id string) (batch.Batch, error) {
	if tenant != f.b.Tenant || id != f.b.ID {
		return batch.Batch{}, store.ErrBatchNotFound
	}
	return f.b, nil
}

func (f *fakeTable) UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error) {
	b, err := f.GetBatch(ctx, tenant, id)
	if err != nil {
		return b, err
	}
	if err := fn(&b); err != nil {
		return f.b, err
	}
	f.b = b
	return b, nil
}

func (f *fakeTable) Chunks(context.Context, string) ([]batch.Chunk, error) { return f.chunks, nil }

func (f *fakeTable) PutFileOverwrite(_ context.Context, file file.File) error {
	f.files[file.ID] = file
	return nil
}

// fakeBucket is a hand-written Blobs of object keys.
type fakeBucket struct {
	Blobs
	keys []string
}

func (f *fakeBucket) List(context.Context, string) ([]string, error) { return f.keys, nil }

func (f *fakeBucket) Delete(_ context.Context, keys ...string) error {
	f.keys = slices.DeleteFunc(f.keys, func(k string) bool { return slices.Contains(keys, k) })
	return nil
}

func (f *fakeBucket) Put(context.Context, string, io.Reader, int64) error {
	return errors.New("the finalizer writes no object")
}

// FinalizeBatch records the output and error files made of the committed
// parts, removes the parts no commit points to, ends the batch and runs
// Lifecycle.Terminal; the output file expires output_expires_after from when it is
// written, not from the batch's creation.
func TestFinalizeBatch(t *testing.T) {
	t.Parallel()
	created, now := time.Unix(1_000_000, 0), time.Unix(1_000_000+7200, 0)
	hour := int64(3600)
	b := batch.Batch{ID: "batch_x", Tenant: "t", Status: batch.InProgress, CreatedAt: created.Unix(), ChunksTotal: 2, ChunksDone: 2, OutputExpiresAfter: &hour}
	chunks := []batch.Chunk{
		{Tenant: "t", Batch: "batch_x", Index: 0, Attempt: "a", State: batch.ChunkDone, OutBytes: 10},
		{Tenant: "t", Batch: "batch_x", Index: 1, Attempt: "b", State: batch.ChunkDone, OutBytes: 4, ErrBytes: 6},
	}
	stray := batch.PartKey("t", "batch_x", 1, "lost", "out")
	bucket := &fakeBucket{keys: []string{chunks[0].Parts("out"), chunks[1].Parts("out"), chunks[1].Parts("err"), stray}}
	table := &fakeTable{b: b, chunks: chunks, files: map[string]file.File{}}
	var ended []batch.Status
	e := testEngine(&Engine{Store: table, Blobs: bucket, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Set: resources.Set{PartsExpiry: 30 * 24 * time.Hour},
		Lifecycle: lifecycleFunc(func(_ context.Context, b batch.Batch) error { ended = append(ended, b.Status); return nil })})
	if err := e.FinalizeBatch(context.Background(), "t", "batch_x"); err != nil {
		t.Fatal(err)
	}
	out, errf := table.files["file-x-output"], table.files["file-x-errors"]
	if !slices.Equal(out.Objects, []string{chunks[0].Parts("out"), chunks[1].Parts("out")}) || out.Bytes != 14 {
		t.Fatalf("output file %+v", out)
	}
	if !slices.Equal(errf.Objects, []string{chunks[1].Parts("err")}) || errf.Bytes != 6 || errf.Filename != "batch_x_error.jsonl" {
		t.Fatalf("error file %+v", errf)
	}
	if out.ExpiresAt == nil || *out.ExpiresAt != now.Unix()+hour {
		t.Fatalf("output file expires at %v, want %d (an hour after it was written)", out.ExpiresAt, now.Unix()+hour)
	}
	if slices.Contains(bucket.keys, stray) || len(bucket.keys) != 3 {
		t.Fatalf("parts left: %v", bucket.keys)
	}
	if table.b.Status != batch.Completed || *table.b.OutputFileID != "file-x-output" || *table.b.ErrorFileID != "file-x-errors" || !slices.Equal(ended, []batch.Status{batch.Completed}) {
		t.Fatalf("batch %+v, Terminal saw %v", table.b, ended)
	}
	// A second finalize message finds the batch ended: only Terminal again.
	if err := e.FinalizeBatch(context.Background(), "t", "batch_x"); err != nil || len(ended) != 2 {
		t.Fatalf("second finalize: %v, Terminal %v", err, ended)
	}
}
