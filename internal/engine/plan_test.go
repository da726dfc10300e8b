package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/file"
)

// planTable is a memTable that keeps the chunks a plan records and stops
// the plan there.
type planTable struct {
	*memTable
	chunks []batch.Chunk
}

var errPlanned = errors.New("chunks recorded")

func (f *planTable) PutChunks(_ context.Context, cs []batch.Chunk) error {
	f.chunks = append(f.chunks, cs...)
	return errPlanned
}

// planFixture is an engine on models planning batch_1 of tenant t, whose
// input, the file file-1, holds input.
func planFixture(models *config.Models, input string) (*Engine, *planTable, batch.Batch) {
	b := batch.Batch{ID: "batch_1", Tenant: "t", Endpoint: "/v1/chat/completions", InputFileID: "file-1", Status: batch.Validating}
	table := &planTable{memTable: newMemTable()}
	table.putBatch(b)
	key := "files/t/file-1/000000"
	_ = table.PutFileOverwrite(context.Background(), file.File{ID: "file-1", Tenant: "t", Filename: "in.jsonl", Objects: []string{key}})
	bucket := newMemBucket()
	bucket.put(key, []byte(input))
	return testEngine(&Engine{Store: table, Blobs: bucket, Models: models, Log: slog.New(slog.DiscardHandler)}), table, b
}

// A batch whose rows alternate two models (1,200 of a model of capacity 6,
// 600 of one of capacity 3, interleaved) is planned into chunks of each
// model's own size (24 round trips of its slots: 144 and 72 rows), not a
// chunk at every change of model.
func TestPlanMixedModels(t *testing.T) {
	t.Parallel()
	models, err := config.ParseModels([]byte("models:\n" +
		"  - {name: six, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 6}\n" +
		"  - {name: three, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for i := range 1800 {
		m := "six"
		if i%3 == 2 {
			m = "three"
		}
		fmt.Fprintf(&sb, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[]}}`+"\n", i, m)
	}
	e, table, b := planFixture(models, sb.String())
	if err := e.planInput(context.Background(), b, time.Now().Add(time.Minute)); !errors.Is(err, errPlanned) {
		t.Fatalf("plan: %v", err)
	}
	rows := map[string]int{}
	for _, c := range table.chunks {
		rows[c.Model] += c.Rows
		if limit := map[string]int{"six": 144, "three": 72}[c.Model]; c.Rows > limit {
			t.Errorf("chunk %d of %s: %d rows, over %d", c.Index, c.Model, c.Rows, limit)
		}
	}
	if want := (1200+143)/144 + (600+71)/72; len(table.chunks) != want || rows["six"] != 1200 || rows["three"] != 600 {
		t.Fatalf("%d chunks holding %v rows, want %d holding 1200 and 600", len(table.chunks), rows, want)
	}
}

// A model's chunks hold 24 round trips of its slots: 400 rows on a model
// of capacity 8 make chunks of 192 rows, so two such batches share its
// slots from their first rows (docs/design.md "Chunk size").
func TestPlanChunkRowsBySlots(t *testing.T) {
	t.Parallel()
	models, err := config.ParseModels([]byte("models:\n  - {name: eight, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 8}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for i := range 400 {
		fmt.Fprintf(&sb, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"eight","messages":[]}}`+"\n", i)
	}
	e, table, b := planFixture(models, sb.String())
	if err := e.planInput(context.Background(), b, time.Now().Add(time.Minute)); !errors.Is(err, errPlanned) {
		t.Fatalf("plan: %v", err)
	}
	var got []int
	for _, c := range table.chunks {
		got = append(got, c.Rows)
	}
	if want := []int{192, 192, 16}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows per chunk %v, want %v", got, want)
	}
}

// TestPlanCopiesNoRowBodies: the plan's check of each row for a refusal
// without a call (provider.Refusal) reads the row's body where it is in
// the row: planning 3 MB of 16 KB rows allocates under three times the
// input (the scan's reads and this bucket's copy of it). Before, each
// body was copied three times more, over four times the input.
func TestPlanCopiesNoRowBodies(t *testing.T) {
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 32}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	pad := strings.Repeat("x", 16<<10)
	for i := range 200 {
		fmt.Fprintf(&sb, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":%q}]}}`+"\n", i, pad)
	}
	e, table, b := planFixture(models, sb.String())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := e.planInput(context.Background(), b, time.Now().Add(time.Minute)); !errors.Is(err, errPlanned) {
		t.Fatalf("plan: %v", err)
	}
	runtime.ReadMemStats(&after)
	if rows := table.chunks[0].Rows; rows != 200 {
		t.Fatalf("chunk 0 of %d rows, want the 200", rows)
	}
	if per := float64(after.TotalAlloc-before.TotalAlloc) / float64(sb.Len()); per > 3 {
		t.Errorf("planning allocated %.1f bytes per input byte, want under 3", per)
	}
}
