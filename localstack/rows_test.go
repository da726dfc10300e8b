package localstack

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Inline simple rows ({messages}, {prompt}) with the batch's model and no
// endpoint complete as chat completions; rows without a custom_id get
// row-<n> (n from 1), returned in the output lines (docs/api.md "Batches").
func TestInlineSimpleRowsComplete(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	user := func(s string) []any { return []any{map[string]any{"role": "user", "content": s}} }
	reqs := []map[string]any{
		{"messages": user("first simple")},
		{"custom_id": "mine", "messages": []any{map[string]any{"role": "system", "content": "be brief"}, map[string]any{"role": "user", "content": "second simple"}}},
		{"prompt": "third simple"},
	}
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "requests": reqs})
	status, resp := rawDo(t, rt, key, "POST", "/v1/batches", bytes.NewReader(body))
	if status != 200 {
		t.Fatalf("inline simple create: %d %s", status, resp)
	}
	var created openai.Batch
	if err := json.Unmarshal(resp, &created); err != nil || created.Endpoint != "/v1/chat/completions" {
		t.Fatalf("created: %s (%v), want endpoint /v1/chat/completions", resp, err)
	}
	b := waitBatch(t, c, created.ID)
	if b.Status != "completed" {
		t.Fatalf("batch ended %s: %+v", b.Status, b.Errors)
	}
	out, _ := checkInvariant(t, c, b, []string{"row-1", "mine", "row-3"})
	for id, want := range map[string]string{"row-1": "echo: first simple", "mine": "echo: second simple", "row-3": "echo: third simple"} {
		l := out[id]
		if l.Response == nil || !bytes.Contains(l.Response.Body, []byte(want)) || !bytes.Contains(l.Response.Body, []byte(`"model":"gpt-4o-mini"`)) {
			t.Errorf("row %s: got %+v, want %q from gpt-4o-mini", id, l.Response, want)
		}
	}
}

// A JSONL file of {prompt} lines is a batch with the create's model, as a
// CSV file of prompts is.
func TestSimpleJSONLFileCompletes(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	f := upload(t, c, "prompts.jsonl", []byte(`{"prompt":"one"}`+"\n"+`{"custom_id":"two","prompt":"two"}`+"\n\n"+`{"messages":[{"role":"user","content":"three"}]}`+"\n"))
	b := createBatch(t, c, f.ID, option.WithJSONSet("model", "gpt-4o-mini"))
	b = waitBatch(t, c, b.ID)
	out, _ := checkInvariant(t, c, b, []string{"row-1", "two", "row-3"})
	if l := out["row-3"]; l.Response == nil || !bytes.Contains(l.Response.Body, []byte("echo: three")) {
		t.Fatalf("row-3: got %+v", l.Response)
	}
	// Without the model, the batch fails naming the line and the field.
	nomodel := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if nomodel.Status != "failed" || len(nomodel.Errors.Data) == 0 || nomodel.Errors.Data[0].Param != "model" || nomodel.Errors.Data[0].Line != 1 {
		t.Fatalf("without a model: %s %+v", nomodel.Status, nomodel.Errors.Data)
	}
}

// Broken simple rows are refused at create with a 400 naming the row and
// the field (or the batch's own field).
func TestInlineSimpleRowsRefused(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	_, key := client(t, rt, "acme")
	good := map[string]any{"prompt": "fine"}
	tests := []struct {
		name  string
		body  map[string]any
		param string
		msg   string
	}{
		{"no model", map[string]any{"endpoint": "/v1/chat/completions", "requests": []any{good}}, "model", "requests[0]"},
		{"messages a string", map[string]any{"model": "gpt-4o-mini", "requests": []any{good, map[string]any{"messages": "hi"}}}, "requests[1].messages", "non-empty array"},
		{"prompt and messages", map[string]any{"model": "gpt-4o-mini", "requests": []any{map[string]any{"prompt": "a", "messages": []any{}}}}, "requests[0].prompt", "not both"},
		{"a parameter besides", map[string]any{"model": "gpt-4o-mini", "requests": []any{map[string]any{"prompt": "a", "max_tokens": 3}}}, "requests[0].max_tokens", "with a body"},
		{"not chat", map[string]any{"model": "gpt-4o-mini", "endpoint": "/v1/embeddings", "requests": []any{good}}, "endpoint", "requests[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, body := postBatch(t, rt, key, tt.body)
			var e struct {
				Error struct{ Param, Message string }
			}
			json.Unmarshal(body, &e)
			if status != 400 || e.Error.Param != tt.param || !strings.Contains(e.Error.Message, tt.msg) {
				t.Fatalf("got %d %s, want 400 on %s saying %q", status, body, tt.param, tt.msg)
			}
		})
	}
}
