package batches

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

// A page of rows reads committed chunks after its cursor; one of failed
// rows (the dead-letter list) skips, by its pattern, a chunk whose rows
// all went to the output file, without reading its parts.
func TestRowsQueryLists(t *testing.T) {
	t.Parallel()
	done := func(i int, pattern string) batch.Chunk {
		return batch.Chunk{Index: i, State: batch.ChunkDone, Pattern: pattern}
	}
	tests := []struct {
		name string
		q    RowsQuery
		c    batch.Chunk
		want bool
	}{
		{"a committed chunk", RowsQuery{After: -1}, done(0, "oo"), true},
		{"the cursor's chunk", RowsQuery{After: 3}, done(3, "oe"), false},
		{"a chunk not committed yet", RowsQuery{After: -1}, batch.Chunk{Index: 4, State: batch.ChunkClaimed}, false},
		{"failed rows, a chunk with one", RowsQuery{After: -1, Failed: true}, done(1, "oeo"), true},
		{"failed rows, a chunk with none", RowsQuery{After: -1, Failed: true}, done(1, "ooo"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.q.lists(tt.c); got != tt.want {
				t.Errorf("lists: got %v, want %v", got, tt.want)
			}
		})
	}
}

// rowsStore is a batch of chunks, one row each; it counts its chunk
// queries.
type rowsStore struct {
	Store
	chunks  []batch.Chunk
	queries *atomic.Int64
}

func (s rowsStore) GetBatch(_ context.Context, tenant, id string) (batch.Batch, error) {
	b := batch.Batch{ID: id, Tenant: tenant, ChunksTotal: len(s.chunks)}
	for _, c := range s.chunks {
		if c.State == batch.ChunkDone {
			b.ChunksDone++
		}
	}
	return b, nil
}

func (s rowsStore) Chunks(context.Context, string) ([]batch.Chunk, error) {
	if s.queries != nil {
		s.queries.Add(1)
	}
	return s.chunks, nil
}

// A batch none of whose chunks is committed has no row to list: its page
// is empty without a query of its chunks (a client polling for the first
// result of a 50,000-row batch read its 72 chunks every time).
func TestRowsBeforeTheFirstCommitReadNoChunk(t *testing.T) {
	t.Parallel()
	chunks := []batch.Chunk{{Index: 0, State: batch.ChunkClaimed}, {Index: 1, State: batch.ChunkPending}}
	queries := &atomic.Int64{}
	s := &Service{Now: time.Now, Log: slog.New(slog.DiscardHandler), Store: rowsStore{chunks: chunks, queries: queries},
		Blobs: rowsBlobs{reads: &atomic.Int64{}}, Deliveries: sameDeliveries{}}
	page, err := s.Rows(context.Background(), "acme", "batch_x", RowsQuery{After: -1, Limit: 1})
	if err != nil || len(page.Data) != 0 || page.More || page.Last != -1 || queries.Load() != 0 {
		t.Fatalf("page %+v, %v after %d chunk queries: want an empty page and none", page, err, queries.Load())
	}
	chunks[0].State = batch.ChunkDone
	if _, err := s.Rows(context.Background(), "acme", "batch_x", RowsQuery{After: -1, Limit: 1}); err != nil || queries.Load() != 1 {
		t.Fatalf("%v after %d chunk queries: want one once a chunk is done", err, queries.Load())
	}
}

// rowsBlobs counts the usage parts read; chunk i's row has custom_id r-i.
type rowsBlobs struct {
	Blobs
	reads *atomic.Int64
}

func (b rowsBlobs) Get(_ context.Context, key string) (io.ReadCloser, error) {
	b.reads.Add(1)
	var i int
	fmt.Sscanf(path.Base(key), "%d", &i)
	return io.NopCloser(strings.NewReader(fmt.Sprintf(`{"custom_id":"r-%d","row":%d,"status":"completed"}`+"\n", i, i))), nil
}

type sameDeliveries struct{ Deliveries }

func (sameDeliveries) WithDeliveries(_ context.Context, b batch.Batch) batch.Batch { return b }

// A page looking for one custom_id (or the failed rows of a batch with
// few) read every chunk of the batch in one request: 66 usage parts at
// the default 768 rows a chunk, 50,000 with 1. A page reads at most
// maxPageChunks chunks; has_more and last_id go on from there.
func TestRowsPageReadsBoundedChunks(t *testing.T) {
	t.Parallel()
	const n = 3*maxPageChunks + 5
	var chunks []batch.Chunk
	for i := range n {
		chunks = append(chunks, batch.Chunk{Tenant: "acme", Batch: "batch_x", Index: i, FirstRow: i, Rows: 1, State: batch.ChunkDone})
	}
	reads := &atomic.Int64{}
	s := &Service{Now: time.Now, Log: slog.New(slog.DiscardHandler), Store: rowsStore{chunks: chunks},
		Blobs: rowsBlobs{reads: reads}, Deliveries: sameDeliveries{}}
	want := fmt.Sprintf("r-%d", n-1)
	q, pages, found := RowsQuery{After: -1, Limit: 100, CustomID: want}, 0, 0
	for {
		before := reads.Load()
		page, err := s.Rows(context.Background(), "acme", "batch_x", q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if got := reads.Load() - before; got > maxPageChunks {
			t.Fatalf("page %d read %d usage parts, more than %d", pages, got, maxPageChunks)
		}
		found += len(page.Data)
		if !page.More {
			break
		}
		if page.Last <= q.After {
			t.Fatalf("page %d: last %d does not move past %d", pages, page.Last, q.After)
		}
		q.After = page.Last
	}
	if found != 1 || pages != 4 || reads.Load() != n {
		t.Fatalf("found %d rows in %d pages reading %d parts; want the one row, 4 pages, each chunk read once", found, pages, reads.Load())
	}
}
