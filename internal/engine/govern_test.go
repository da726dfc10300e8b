package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/resources"
)

// rowsBucket is a memBucket holding rows as the object "in".
func rowsBucket(rows string) *memBucket {
	m := newMemBucket()
	m.put("in", []byte(rows))
	return m
}

// countingProvider answers every row, counting them and keeping the
// last route it was given.
type countingProvider struct {
	calls atomic.Int32
	mu    sync.Mutex
	route provider.Route
}

func (p *countingProvider) Do(_ context.Context, _ string, _ json.RawMessage, route provider.Route) inference.Result {
	p.calls.Add(1)
	p.mu.Lock()
	p.route = route
	p.mu.Unlock()
	return inference.Result{StatusCode: 200, Body: json.RawMessage(`{"ok":true}`), Model: "m"}
}

// fakeGovernor refuses every chunk with code (none when ""); allowed is
// its allow-list (nil: every model).
type fakeGovernor struct {
	code    string
	allowed func(string) bool
}

func (g fakeGovernor) Start(context.Context, batch.Batch) (func(string) bool, error) { return nil, nil }
func (g fakeGovernor) Admit(context.Context, batch.Batch, batch.Chunk, ...batch.Chunk) (string, string, error) {
	return g.code, "refused by the test", nil
}
func (g fakeGovernor) Allowed(context.Context, batch.Batch) (func(string) bool, error) {
	return g.allowed, nil
}

// The rows of a run go to the provider with the batch's fallback and its
// key's allow-list (provider.Route), so that a row never falls back to a
// model its key may not use (docs/api.md "Budgets, revocation and
// allow-lists").
func TestExecuteRoutesRowsInsideTheAllowList(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	fb := "fb"
	b := batch.Batch{ID: "batch_g", Tenant: "t", KeyID: "k1", Status: batch.InProgress, Endpoint: "/v1/chat/completions",
		ChunksTotal: 1, Input: []batch.Object{{Key: "in"}}, FallbackModel: &fb}
	c := batch.Chunk{Tenant: "t", Batch: "batch_g", Model: "m", State: batch.ChunkClaimed, Run: "r1", Slots: 1, Rows: 1,
		Lease: now.Add(time.Hour).UnixMilli()}
	rows := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n"
	c.End = int64(len(rows))
	up := &countingProvider{}
	e := testEngine(&Engine{Store: oneChunk(b, c), Blobs: rowsBucket(rows), Queue: &fakeQueue{}, Provider: up,
		Govern: fakeGovernor{allowed: func(m string) bool { return m == "m" }},
		Log:    slog.New(slog.NewTextHandler(os.Stderr, nil)), Now: func() time.Time { return now }, Set: resources.Define("t")})
	body, _ := json.Marshal(msg.Message{Type: msg.Chunk, Tenant: "t", Batch: "batch_g", Run: "r1", Attempt: 1})
	if failed, err := e.Execute(context.Background(), []msg.Delivery{{ID: "d1", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) != 0 {
		t.Fatalf("Execute: %v, failed %v", err, failed)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("provider called %d times, want 1", up.calls.Load())
	}
	if got := up.route; got.Fallback != "fb" || got.Allows("fb") || !got.Allows("m") {
		t.Fatalf("route: fallback %q, allows fb %v, m %v; want fb, false, true", got.Fallback, got.Allows("fb"), got.Allows("m"))
	}
}

// A chunk the Governor refuses when its run starts commits an error line
// with the refusal's code for every row, as failed rows, and none of its
// rows reaches the provider; one it admits runs them.
func TestExecuteSettlesRefusedChunks(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"credential_revoked", ""} {
		t.Run("refusal "+code, func(t *testing.T) {
			t.Parallel()
			now := time.Unix(1_000_000, 0)
			b := batch.Batch{ID: "batch_g", Tenant: "t", KeyID: "k1", Status: batch.InProgress, Endpoint: "/v1/chat/completions",
				ChunksTotal: 1, Input: []batch.Object{{Key: "in"}}}
			c := batch.Chunk{Tenant: "t", Batch: "batch_g", Model: "m", State: batch.ChunkClaimed, Run: "r1", Slots: 2, Rows: 2,
				Lease: now.Add(time.Hour).UnixMilli()}
			rows := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n" +
				`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n"
			c.End = int64(len(rows))
			table, bucket, up := oneChunk(b, c), rowsBucket(rows), &countingProvider{}
			e := testEngine(&Engine{Store: table, Blobs: bucket, Queue: &fakeQueue{}, Provider: up, Govern: fakeGovernor{code: code},
				Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Set: resources.Define("t")})
			body, _ := json.Marshal(msg.Message{Type: msg.Chunk, Tenant: "t", Batch: "batch_g", Run: "r1", Attempt: 1})
			failed, err := e.Execute(context.Background(), []msg.Delivery{{ID: "d1", Body: string(body), ReceiveCount: 1}})
			if err != nil || len(failed) != 0 {
				t.Fatalf("Execute: %v, failed %v", err, failed)
			}
			wantCalls, wantFailed := int32(0), int64(2)
			if code == "" {
				wantCalls, wantFailed = 2, 0
			}
			if got := up.calls.Load(); got != wantCalls {
				t.Fatalf("provider called %d times, want %d", got, wantCalls)
			}
			cms := table.committed()
			if len(cms) != 1 || cms[0].Failed != wantFailed || cms[0].Completed != 2-wantFailed {
				t.Fatalf("commits %+v; want one of %d failed rows", cms, wantFailed)
			}
			errPart, _ := bucket.object(cms[0].Chunk.Parts("err"))
			if code != "" && strings.Count(string(errPart), `"code":"`+code+`"`) != 2 {
				t.Fatalf("error part does not hold two %s lines:\n%s", code, errPart)
			}
		})
	}
}
