package engine

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/resources"
)

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
	bucket := newMemBucket()
	for _, k := range []string{chunks[0].Parts("out"), chunks[1].Parts("out"), chunks[1].Parts("err"), stray} {
		bucket.put(k, []byte("lines\n"))
	}
	table := newMemTable()
	table.putBatch(b)
	for _, c := range chunks {
		table.putChunk(c)
	}
	var ended []batch.Status
	e := testEngine(&Engine{Store: table, Blobs: bucket, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Set: resources.Set{PartsExpiry: 30 * 24 * time.Hour},
		Lifecycle: lifecycleFunc(func(_ context.Context, b batch.Batch) error { ended = append(ended, b.Status); return nil })})
	if err := e.FinalizeBatch(context.Background(), "t", "batch_x"); err != nil {
		t.Fatal(err)
	}
	out, _ := table.GetFile(context.Background(), "t", "file-x-output")
	errf, _ := table.GetFile(context.Background(), "t", "file-x-errors")
	if !slices.Equal(out.Objects, []string{chunks[0].Parts("out"), chunks[1].Parts("out")}) || out.Bytes != 14 {
		t.Fatalf("output file %+v", out)
	}
	if !slices.Equal(errf.Objects, []string{chunks[1].Parts("err")}) || errf.Bytes != 6 || errf.Filename != "batch_x_error.jsonl" {
		t.Fatalf("error file %+v", errf)
	}
	if out.ExpiresAt == nil || *out.ExpiresAt != now.Unix()+hour {
		t.Fatalf("output file expires at %v, want %d (an hour after it was written)", out.ExpiresAt, now.Unix()+hour)
	}
	if keys := bucket.keys(); slices.Contains(keys, stray) || len(keys) != 3 {
		t.Fatalf("objects left: %v, want the three committed parts and nothing written", keys)
	}
	if after := table.batch("batch_x"); after.Status != batch.Completed || *after.OutputFileID != "file-x-output" || *after.ErrorFileID != "file-x-errors" || !slices.Equal(ended, []batch.Status{batch.Completed}) {
		t.Fatalf("batch %+v, Terminal saw %v", after, ended)
	}
	// A second finalize message finds the batch ended: only Terminal again.
	if err := e.FinalizeBatch(context.Background(), "t", "batch_x"); err != nil || len(ended) != 2 {
		t.Fatalf("second finalize: %v, Terminal %v", err, ended)
	}
}

// staleChunks answers its first Chunks with its last chunk still claimed:
// a read made before the batch's last commit landed.
type staleChunks struct {
	*memTable
	reads int
}

func (s *staleChunks) Chunks(ctx context.Context, id string) ([]batch.Chunk, error) {
	cs, err := s.memTable.Chunks(ctx, id)
	if s.reads++; s.reads == 1 && len(cs) > 0 {
		cs[len(cs)-1].State = batch.ChunkClaimed
	}
	return cs, err
}

// A finalize reads the batch and its chunks side by side: when the chunks
// were read before the last commit landed, and the batch after it, it
// reads the chunks again instead of failing (its message would come back
// only after minutes) or ending the batch without the last chunk's part.
func TestFinalizeReadsChunksAgainWhenReadBeforeTheLastCommit(t *testing.T) {
	t.Parallel()
	b := batch.Batch{ID: "batch_x", Tenant: "t", Status: batch.InProgress, CreatedAt: 1, ChunksTotal: 2, ChunksDone: 2}
	table := &staleChunks{memTable: newMemTable()}
	table.putBatch(b)
	bucket := newMemBucket()
	for i := range 2 {
		c := batch.Chunk{Tenant: "t", Batch: "batch_x", Index: i, Attempt: "a", State: batch.ChunkDone, OutBytes: 6}
		table.putChunk(c)
		bucket.put(c.Parts("out"), []byte("lines\n"))
	}
	e := testEngine(&Engine{Store: table, Blobs: bucket, Log: slog.New(slog.DiscardHandler), Set: resources.Set{PartsExpiry: time.Hour}})
	if err := e.FinalizeBatch(context.Background(), "t", "batch_x"); err != nil {
		t.Fatal(err)
	}
	out, _ := table.GetFile(context.Background(), "t", "file-x-output")
	if after := table.batch("batch_x"); after.Status != batch.Completed || out.Bytes != 12 || len(out.Objects) != 2 || table.reads != 2 {
		t.Fatalf("batch %s, output %+v after %d chunk reads: want completed with both parts, the chunks read twice", after.Status, out, table.reads)
	}
}

// lateBatch answers its first GetBatch with the batch before another
// finalizer ended it, and then ends it and deletes its output file as the
// user would.
type lateBatch struct {
	*memTable
	reads int
}

func (l *lateBatch) GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error) {
	b, err := l.memTable.GetBatch(ctx, tenant, id)
	if l.reads++; l.reads == 1 {
		ended := b
		ended.Status = batch.Completed
		l.putBatch(ended)
		l.mu.Lock()
		delete(l.files, "t/file-x-output")
		l.mu.Unlock()
	}
	return b, err
}

// A duplicate finalizer that read the batch before another ended it
// writes no file record: the user may have deleted the ended batch's
// output file since, and it stays deleted. It sees the batch terminal and
// makes sure of the terminal event, as any later finalize does.
func TestLateFinalizeDoesNotBringBackADeletedFile(t *testing.T) {
	t.Parallel()
	b := batch.Batch{ID: "batch_x", Tenant: "t", Status: batch.InProgress, CreatedAt: 1, ChunksTotal: 1, ChunksDone: 1}
	table := &lateBatch{memTable: newMemTable()}
	table.putBatch(b)
	c := batch.Chunk{Tenant: "t", Batch: "batch_x", Index: 0, Attempt: "a", State: batch.ChunkDone, OutBytes: 6}
	table.putChunk(c)
	bucket := newMemBucket()
	bucket.put(c.Parts("out"), []byte("lines\n"))
	var ended []batch.Status
	e := testEngine(&Engine{Store: table, Blobs: bucket, Log: slog.New(slog.DiscardHandler), Set: resources.Set{PartsExpiry: time.Hour},
		Lifecycle: lifecycleFunc(func(_ context.Context, b batch.Batch) error { ended = append(ended, b.Status); return nil })})
	if err := e.FinalizeBatch(context.Background(), "t", "batch_x"); err != nil {
		t.Fatal(err)
	}
	if f, err := table.GetFile(context.Background(), "t", "file-x-output"); err == nil {
		t.Fatalf("output file %+v written again after the user deleted it", f)
	}
	if !slices.Equal(ended, []batch.Status{batch.Completed}) {
		t.Fatalf("Terminal saw %v, want the completed batch once", ended)
	}
}
