package localstack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// An Idempotency-Key is scoped to the tenant and the route and bound to the
// body (docs/api.md "Overview"): a repeat writes nothing, another body gets
// 422 idempotency_key_reused, the same key on another route makes its own
// batch, and a key does not skip the early in-flight check.
func TestIdempotencyKeyScopedAndBound(t *testing.T) {
	t.Parallel()
	rt := runtime(t, func(o *localrun.Options) { o.Env.MaxInflight = 1 })
	ctx := context.Background()
	c, key := client(t, rt, "acme")
	ac, _ := anthropicClient(t, rt, "acme")
	files := func() int {
		t.Helper()
		page, err := c.Files.List(ctx, openai.FileListParams{})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Data)
	}
	create := func(idem, content string) (int, []byte) {
		return postBatch(t, rt, key, map[string]any{"endpoint": "/v1/chat/completions", "requests": []map[string]any{
			{"custom_id": "ok", "method": "POST", "url": "/v1/chat/completions", "body": map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": content}}}},
			{"custom_id": "bad", "method": "POST", "url": "/v1/chat/completions", "body": map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": "[[mock:400]] no"}}}},
		}}, "Idempotency-Key", idem)
	}

	// At the limit, a new key is refused before its inline input is stored.
	if err := rt.App.Store.ReserveInflight(ctx, "acme", "batch_held", 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	if status, body := create("fresh-key", "hi"); status != 429 {
		t.Fatalf("create with a new key at the limit: %d %s, want 429", status, body)
	}
	if n := files(); n != 0 {
		t.Fatalf("a create refused at the limit left %d files, want none", n)
	}
	if _, err := rt.App.Store.ReleaseInflight(ctx, "acme", "batch_held"); err != nil {
		t.Fatal(err)
	}

	// A repeat returns the first batch and stores no second input file.
	s1, first := create("k", "hi")
	s2, again := create("k", "hi")
	b1 := decodeBatch(t, first)
	if s1 != 200 || s2 != 200 || decodeBatch(t, again).ID != b1.ID {
		t.Fatalf("repeated create: %d %s then %d %s, want one batch twice", s1, first, s2, again)
	}
	if n := files(); n != 1 {
		t.Fatalf("a repeated inline create left %d files, want 1", n)
	}
	// Another body with the same key: 422, and nothing stored.
	status, body := create("k", "something else")
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(body, &e)
	if status != 422 || e.Error.Code != "idempotency_key_reused" {
		t.Fatalf("same key, another body: %d %s, want 422 idempotency_key_reused", status, body)
	}
	if n := files(); n != 1 {
		t.Fatalf("a reused key left %d files, want 1", n)
	}
	waitBatch(t, c, b1.ID)

	// The same key on the retry route makes the retry, once.
	retry := func() apiBatch {
		t.Helper()
		req, _ := http.NewRequest("POST", rt.URL+"/v1/batches/"+b1.ID+"/retry", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if status := resp.StatusCode; status != 200 {
			t.Fatalf("retry with the create's key: %d %s", status, body)
		}
		return decodeBatch(t, body)
	}
	r1 := retry()
	if r1.ID == b1.ID || retry().ID != r1.ID {
		t.Fatalf("retry with the create's key: got %s (batch %s), want a new batch, once", r1.ID, b1.ID)
	}
	waitBatch(t, c, r1.ID)

	// And on the Anthropic route, a message batch of its own.
	params := anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{msgRequest("a", "claude-haiku-4-5", "hi")}}
	m, err := ac.Messages.Batches.New(ctx, params, aoption.WithHeader("Idempotency-Key", "k"))
	if err != nil {
		t.Fatalf("message batch with the create's key: %v", err)
	}
	if m.ID == b1.ID || m.ID == r1.ID {
		t.Fatalf("message batch with the create's key: got %s", m.ID)
	}
	// Another tenant's same key is its own.
	_, other := client(t, rt, "globex")
	if status, body := postBatch(t, rt, other, map[string]any{"endpoint": "/v1/chat/completions", "requests": []map[string]any{
		{"method": "POST", "url": "/v1/chat/completions", "body": map[string]any{"model": "gpt-4o-mini"}},
	}}, "Idempotency-Key", "k"); status != 200 || decodeBatch(t, body).ID == b1.ID {
		t.Fatalf("another tenant's key: %d %s", status, body)
	}
}
