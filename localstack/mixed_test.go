package localstack

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/relaybatch/relay/internal/part"
)

// A batch whose rows alternate two models is cut by model (docs/design.md
// "Chunks"): each model's rows fill chunks of its own, wherever they sit in
// the input, and every row's line is its own answer, at its own row.
func TestMixedModelsChunkedByModel(t *testing.T) {
	t.Parallel()
	rt := runtime(t) // RELAY_CHUNK_ROWS 10
	c, key := client(t, rt, "acme")
	var rows []row
	for i := range 60 {
		model := "gpt-4o-mini"
		if i%3 == 2 {
			model = "gpt-4o-mini-backup"
		}
		rows = append(rows, row{id: fmt.Sprintf("r%04d", i), content: fmt.Sprintf("hello %d", i), model: model})
	}
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != "completed" {
		t.Fatalf("batch %s: %+v", b.Status, b.RequestCounts)
	}
	chunks, err := rt.App.Store.Chunks(context.Background(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	perModel := map[string]int{}
	for _, ch := range chunks {
		perModel[ch.Model]++
	}
	// 40 rows and 20 in chunks of 10, not a chunk at every change of model.
	if len(chunks) != 6 || perModel["gpt-4o-mini"] != 4 || perModel["gpt-4o-mini-backup"] != 2 {
		t.Fatalf("%d chunks, by model %v; want 4 and 2", len(chunks), perModel)
	}
	out, errs := checkInvariant(t, c, b, idsOf(rows))
	if len(errs) != 0 {
		t.Fatalf("error lines: %+v", errs)
	}
	for i, r := range rows {
		var body struct {
			Model   string `json:"model"`
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		l := out[r.id]
		if l.Response == nil || json.Unmarshal(l.Response.Body, &body) != nil || len(body.Choices) == 0 {
			t.Fatalf("row %s: %+v", r.id, l)
		}
		wantModel := map[string]string{"gpt-4o-mini": "gpt-4o-mini", "gpt-4o-mini-backup": "backup-upstream"}[r.model]
		if body.Choices[0].Message.Content != "echo: "+r.content || body.Model != wantModel || l.ID != part.LineID(b.ID, i) {
			t.Fatalf("row %s (%d): content %q model %q id %s; want %q from %s", r.id, i, body.Choices[0].Message.Content, body.Model, l.ID, "echo: "+r.content, wantModel)
		}
	}
	// /results: every row, in input order, although the chunks are not.
	res := readLines(t, rawGet(t, rt, key, "/v1/batches/"+b.ID+"/results"))
	if len(res) != len(rows) {
		t.Fatalf("results: %d lines, want %d", len(res), len(rows))
	}
	for i, l := range res {
		if l.CustomID != rows[i].id {
			t.Fatalf("results line %d: %s, want %s (input order)", i, l.CustomID, rows[i].id)
		}
	}
}

// The retry of a batch mixing models reads each failed row back from its
// chunk's spans: exactly the rows that failed, whichever model's.
func TestMixedModelsRetry(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	var rows []row
	var failed []string
	for i := range 24 {
		r := row{id: fmt.Sprintf("r%02d", i), content: fmt.Sprintf("hello %d", i), model: "gpt-4o-mini"}
		if i%2 == 1 {
			r.model = "gpt-4o-mini-backup"
		}
		if i%5 == 3 {
			r.content = "[[mock:400]] no"
			failed = append(failed, r.id)
		}
		rows = append(rows, r)
	}
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	_, errs := checkInvariant(t, c, b, idsOf(rows))
	if len(errs) != len(failed) {
		t.Fatalf("%d error lines, want %d", len(errs), len(failed))
	}
	status, resp := rawDo(t, rt, key, "POST", "/v1/batches/"+b.ID+"/retry", nil)
	if status != 200 {
		t.Fatalf("retry: %d %s", status, resp)
	}
	var r struct {
		ID string `json:"id"`
	}
	json.Unmarshal(resp, &r)
	rb := waitBatch(t, c, r.ID)
	if _, errs := checkInvariant(t, c, rb, failed); len(errs) != len(failed) {
		t.Fatalf("retried batch: %d error lines, want the %d failed rows again", len(errs), len(failed))
	}
}
