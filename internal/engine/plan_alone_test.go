package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
)

// alonePlanFixture is an engine on one model "m" of capacity 4, planning
// batch_1 whose input is rows; row i is refused at create (relay.refused,
// a NoCall row) when refused(i).
func alonePlanFixture(t *testing.T, rows int, refused func(i int) bool) (*Engine, *memTable, *fakeQueue) {
	t.Helper()
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for i := range rows {
		body := `{"model":"m","messages":[]}`
		if refused(i) {
			body = `{"model":"m","messages":[],"relay":{"refused":"no"}}`
		}
		fmt.Fprintf(&sb, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, body)
	}
	table := newMemTable()
	table.putBatch(batch.Batch{ID: "batch_1", Tenant: "t", Endpoint: "/v1/chat/completions", InputFileID: "file-1", Status: batch.Validating})
	key := "files/t/file-1/000000"
	_ = table.PutFileOverwrite(context.Background(), file.File{ID: "file-1", Tenant: "t", Filename: "in.jsonl", Objects: []string{key}})
	bucket := newMemBucket()
	bucket.put(key, []byte(sb.String()))
	q := &fakeQueue{}
	return testEngine(&Engine{Store: table, Blobs: bucket, Models: models, Queue: q, Log: slog.New(slog.DiscardHandler)}), table, q
}

// TestPlanOfOnlyRefusedRowsStarts: a batch whose every row is refused
// without a call has no ready entry at all; its plan still records it
// started and in progress, and claims its one NoCall chunk alone, holding
// no slot, with the chunk's work message sent.
func TestPlanOfOnlyRefusedRowsStarts(t *testing.T) {
	t.Parallel()
	e, table, q := alonePlanFixture(t, 3, func(int) bool { return true })

	if err := e.Plan(context.Background(), "t", "batch_1"); err != nil {
		t.Fatalf("plan: %v", err)
	}

	b, c := table.batch("batch_1"), table.chunk("batch_1", 0)
	if !b.Started || b.Status != batch.InProgress || b.ChunksTotal != 1 || len(table.entries("m")) != 0 {
		t.Fatalf("batch started %v, %s, %d chunks, entries %v; want started, in_progress, 1, none", b.Started, b.Status, b.ChunksTotal, table.entries("m"))
	}
	if !c.NoCall || c.State != batch.ChunkClaimed || c.Slots != 0 || table.inflightOf("m", 0) != 0 {
		t.Fatalf("chunk %+v, %d in flight; want NoCall, claimed, no slots", c, table.inflightOf("m", 0))
	}
	if len(q.sent) != 1 || q.sent[0].Type != msg.Chunk || q.sent[0].Run != c.Run {
		t.Fatalf("sent %+v, want the chunk's work message", q.sent)
	}
}

// putReadyFailsOnce is a memTable whose first PutReady fails before it
// takes effect.
type putReadyFailsOnce struct {
	*memTable
	failed bool
}

func (f *putReadyFailsOnce) PutReady(ctx context.Context, r sched.Ready) error {
	if !f.failed {
		f.failed = true
		return errors.New("ThrottlingException")
	}
	return f.memTable.PutReady(ctx, r)
}

// TestPlanAgainAfterItsAloneClaimsClaimsThemOnce: a plan whose chunks that
// run alone were claimed, and which then failed (its ready entry not
// put), runs again from the recorded chunks (restart): it claims no alone
// chunk a second time, puts the model's entry at its first chunk, stepping
// by next_same past the NoCall chunk, and the capacity claim that follows
// steps the entry to the model's next chunk, never to the NoCall one.
func TestPlanAgainAfterItsAloneClaimsClaimsThemOnce(t *testing.T) {
	t.Parallel()
	// Rows 1 and 150 refused: chunk 0 (rows 0, 2-97), chunk 1 (NoCall:
	// rows 1 and 150), chunk 2 (the rest).
	e, table, q := alonePlanFixture(t, 200, func(i int) bool { return i == 1 || i == 150 })
	f := &putReadyFailsOnce{memTable: table}
	e.Store = f

	if err := e.Plan(context.Background(), "t", "batch_1"); err == nil {
		t.Fatal("first plan: no error, want PutReady's")
	}
	if err := e.Plan(context.Background(), "t", "batch_1"); err != nil {
		t.Fatalf("second plan: %v", err)
	}

	alone, first := table.chunk("batch_1", 1), table.chunk("batch_1", 0)
	if !alone.NoCall || alone.Attempts != 1 || alone.Rows != 2 || first.NextSame != 2 {
		t.Fatalf("chunk 1 %+v, chunk 0's next_same %d; want NoCall claimed once, of 2 rows; 2", alone, first.NextSame)
	}
	var runs []int
	for _, m := range q.sent {
		runs = append(runs, m.Chunk)
	}
	if b := table.batch("batch_1"); !b.Started || first.State != batch.ChunkClaimed || first.Slots != 4 || !slices.Equal(runs, []int{1, 0}) {
		t.Fatalf("started %v, chunk 0 %s holding %d, messages for chunks %v; want started, claimed holding 4, [1 0]", b.Started, first.State, first.Slots, runs)
	}
	if es := table.entries("m"); len(es) != 1 || es[0].Next != 2 || !es[0].Mixed {
		t.Fatalf("entries %+v, want one at chunk 2, mixed", es)
	}
}

// TestPlanSizesNoCallChunksByNoCapacity: rows refused without a call take
// no slot, so their chunks are not sized by their model's capacity (24
// round trips of its slots: 96 rows on a model of 4) but by the chunk row
// limit (768) and bytes alone: 200 such rows are one chunk, one claim,
// one run and one commit on the batch's record, not three. A Message
// Batch of 100,000 rows naming a model of the other shape on a small model
// was otherwise planned into thousands of chunks, all claimed and sent at
// once.
func TestPlanSizesNoCallChunksByNoCapacity(t *testing.T) {
	t.Parallel()
	e, table, q := alonePlanFixture(t, 200, func(int) bool { return true })

	if err := e.Plan(context.Background(), "t", "batch_1"); err != nil {
		t.Fatalf("plan: %v", err)
	}

	if b, c := table.batch("batch_1"), table.chunk("batch_1", 0); b.ChunksTotal != 1 || c.Rows != 200 || !c.NoCall || len(q.sent) != 1 {
		t.Fatalf("%d chunks, chunk 0 of %d rows (NoCall %v), %d messages; want 1 NoCall chunk of 200 rows, 1 message", b.ChunksTotal, c.Rows, c.NoCall, len(q.sent))
	}
}
