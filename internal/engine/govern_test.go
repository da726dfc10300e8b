package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
	"github.com/relaybatch/relay/internal/sched"
)

// runTable is a hand-written Store of one batch with one claimed chunk
// that records the chunk's commit.
type runTable struct {
	Store
	b      batch.Batch
	c      batch.Chunk
	commit sched.Commit
}

func (f *runTable) GetBatch(context.Context, string, string) (batch.Batch, error) { return f.b, nil }
func (f *runTable) GetChunk(context.Context, string, int) (batch.Chunk, error)    { return f.c, nil }
func (f *runTable) ReadyHead(context.Context, string) (sched.Ready, bool, error) {
	return sched.Ready{}, false, nil
}
func (f *runTable) RenewLease(context.Context, string, int, string, time.Time) error { return nil }
func (f *runTable) CommitChunk(_ context.Context, _ string, c sched.Commit) error {
	f.commit = c
	return nil
}

// rowsBucket is a hand-written Blobs holding a chunk's rows and keeping
// the parts written.
type rowsBucket struct {
	Blobs
	rows  string
	mu    sync.Mutex
	parts map[string]string
}

func (f *rowsBucket) ReadRange(context.Context, []batch.Object, int64, int64) ([]byte, error) {
	return []byte(f.rows), nil
}

func (f *rowsBucket) PutTagged(ctx context.Context, key string, r io.Reader, size int64, _ string) error {
	return f.Put(ctx, key, r, size)
}

func (f *rowsBucket) Put(_ context.Context, key string, r io.Reader, _ int64) error {
	var b bytes.Buffer
	_, _ = b.ReadFrom(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.parts[key] = b.String()
	return nil
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
func (g fakeGovernor) Admit(context.Context, batch.Batch, batch.Chunk) (string, string, error) {
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
	up := &countingProvider{}
	e := testEngine(&Engine{Store: &runTable{b: b, c: c}, Blobs: &rowsBucket{rows: rows, parts: map[string]string{}}, Queue: &fakeQueue{}, Provider: up,
		Govern: fakeGovernor{allowed: func(m string) bool { return m == "m" }},
		Log:    slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Set: resources.Define("t")})
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
			table, bucket, up := &runTable{b: b, c: c}, &rowsBucket{rows: rows, parts: map[string]string{}}, &countingProvider{}
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
			if table.commit.Failed != wantFailed || table.commit.Completed != 2-wantFailed {
				t.Fatalf("commit counted %d completed, %d failed; want %d failed", table.commit.Completed, table.commit.Failed, wantFailed)
			}
			errPart := bucket.parts[table.commit.Chunk.Parts("err")]
			if code != "" && strings.Count(errPart, `"code":"`+code+`"`) != 2 {
				t.Fatalf("error part does not hold two %s lines:\n%s", code, errPart)
			}
		})
	}
}
