//go:build browser

package localstack

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// testBrowserSimpleRows: a JSONL file of {prompt} lines and a CSV file of
// prompts, uploaded together, make one batch each for the model picked once
// in the form, on chat completions; both complete, their rows named row-<n>
// (docs/api.md "Files").
func testBrowserSimpleRows(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	dir := t.TempDir()
	jsonlPath := writeFile(t, dir, "prompts.jsonl", []byte(`{"prompt":"first prompt"}`+"\n"+`{"custom_id":"mine","prompt":"second prompt"}`+"\n"+
		`{"messages":[{"role":"user","content":"third prompt"}]}`+"\n"))
	csvPath := writeFile(t, dir, "more.csv", []byte("prompt\nfourth\nfifth\n"))

	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.signIn()
	// The endpoint select is for JSONL files of requests: a simple JSONL
	// file goes to chat completions whatever it says.
	p.do("pick another endpoint", chromedp.SetValue(chromedp.ID("endpoint"), "/v1/embeddings"))
	p.upload(jsonlPath, csvPath)
	jsonlID, csvID := p.uploadedBatch("prompts.jsonl"), p.uploadedBatch("more.csv")
	for _, id := range []string{jsonlID, csvID} {
		p.waitRow(id, "completed", 60*time.Second)
	}
	for id, rows := range map[string][]string{jsonlID: {"row-1", "mine", "row-3"}, csvID: {"row-1", "row-2"}} {
		b := waitBatch(t, c, id)
		if b.Status != "completed" || b.Model != "gpt-4o-mini" || b.Endpoint != "/v1/chat/completions" {
			t.Errorf("batch %s: %s, model %q, endpoint %q; want completed with gpt-4o-mini on /v1/chat/completions", id, b.Status, b.Model, b.Endpoint)
		}
		checkInvariant(t, c, b, rows)
	}
	out, _ := checkInvariant(t, c, waitBatch(t, c, jsonlID), []string{"row-1", "mine", "row-3"})
	if l := out["mine"]; l.Response == nil || !bytes.Contains(l.Response.Body, []byte("echo: second prompt")) {
		t.Errorf("row mine: got %+v", l.Response)
	}
}
