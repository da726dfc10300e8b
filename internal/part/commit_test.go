package part

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
)

// Commit's lines are those of TestLinesOf; here, what the commit takes
// from them.
func TestCommit(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 23, 30, 0, 0, time.FixedZone("x", -2*3600))
	b := batch.Batch{ID: "batch_x", Tenant: "t", KeyID: "k"}
	c := batch.Chunk{Batch: "batch_x", Tenant: "t", Index: 3, FirstRow: 30, Slots: 8, Run: "r"}
	outs := []Outcome{
		{CustomID: "a", Result: inference.Result{StatusCode: 200, Body: json.RawMessage(`{"ok":true}`), Model: "m",
			Usage: inference.Usage{InputTokens: 10, OutputTokens: 1, TotalTokens: 11}}},
		{CustomID: "c", Code: CodeExpired, Message: "late", Expired: true},
		{CustomID: "g", Code: CodeCancelled, Message: "cancelled", Cancelled: true},
		{CustomID: "d", Result: inference.Result{ErrCode: "request_timeout", ErrMessage: "slow"}},
	}
	objs, cm, err := Commit(c, LinesOf(b, c, outs, now), 2, now)
	if err != nil {
		t.Fatal(err)
	}
	_, want := build(t, b, c, outs, now)
	parts := readObjects(t, objs)
	if string(parts["out"]) != string(want["out"]) || string(parts["err"]) != string(want["err"]) || string(parts["usage"]) != string(want["usage"]) {
		t.Fatalf("parts differ from the lines': got %q", parts)
	}
	ch := cm.Chunk
	if ch.Pattern != "oeee" || ch.OutBytes != int64(len(want["out"])) || ch.ErrBytes != int64(len(want["err"])) || ch.Run != "r" || ch.Index != 3 {
		t.Fatalf("chunk %+v", ch)
	}
	if cm.Completed != 1 || cm.Failed != 3 || cm.Expired != 1 || cm.Cancelled != 1 || cm.DeadLetters != 2 {
		t.Fatalf("counts %+v", cm)
	}
	if cm.Usage.TotalTokens != 11 || cm.UsageByModel["m"].Requests != 1 || cm.UsageByModel["m"].Total != 11 || cm.Day != "2026-12-02" {
		t.Fatalf("usage %+v by model %+v day %s", cm.Usage, cm.UsageByModel, cm.Day)
	}
}

// Kept: chunk parts outlive every file made of them. Without
// output_expires_after the bucket's parts/ rule deletes them partsExpiry
// after they were written, so an output file made at the end of the window
// must expire by then, counted from the batch's creation, not from its own
// (which let it outlive its parts by up to a day); with it, a class that
// covers the window, the finalize's grace and the expiry.
func TestKept(t *testing.T) {
	t.Parallel()
	const day = 24 * 3600
	at := func(v int64) *int64 { return &v }
	parts := 30 * 24 * time.Hour
	tests := []struct {
		name  string
		b     batch.Batch
		until int64
		tag   string
	}{
		{"no output expiry", batch.Batch{CreatedAt: 1000, ExpiresAt: at(1000 + day)}, 1000 + 30*day, ""},
		{"an hour", batch.Batch{CreatedAt: 1000, ExpiresAt: at(1000 + day), OutputExpiresAfter: at(3600)}, 1000 + 2*day, "2d"},
		{"30 days", batch.Batch{CreatedAt: 1000, ExpiresAt: at(1000 + day), OutputExpiresAfter: at(30 * day)}, 1000 + 30*day, "32d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, tag := Kept(tt.b, parts)
			if got := KeptUntil(tt.b, parts); got != tt.until || tag != tt.tag {
				t.Fatalf("KeptUntil = %d (tag %q), want %d (%q)", got, tag, tt.until, tt.tag)
			}
		})
	}
}

// afterPutter is a batch.Putter whose first put of each key reads the whole
// body, keeps it, and fails all the same (a timeout after the write).
type afterPutter struct {
	mu     sync.Mutex
	failed map[string]bool
	got    map[string]string
}

func (p *afterPutter) PutTagged(_ context.Context, key string, r io.Reader, _ int64, _ string) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got[key] = string(b)
	if !p.failed[key] {
		p.failed[key] = true
		return errors.New("RequestTimeout: the put took effect")
	}
	return nil
}

// A part's put that fails is tried again, its body whole from the start:
// the part holds answers already paid for, and failing the commit would
// run its rows upstream again.
func TestWriteTriesAgain(t *testing.T) {
	t.Parallel()
	now := time.Now()
	b := batch.Batch{ID: "batch_x", Tenant: "t"}
	c := batch.Chunk{Batch: "batch_x", Tenant: "t", Index: 3, Run: "r", Attempt: "a1"}
	outs := []Outcome{
		{CustomID: "a", Result: inference.Result{StatusCode: 200, Body: json.RawMessage(`{"ok":true}`), Model: "m"}},
		{CustomID: "d", Result: inference.Result{ErrCode: "request_timeout", ErrMessage: "slow"}},
	}
	objs, cm, err := Commit(c, LinesOf(b, c, outs, now), 0, now)
	if err != nil {
		t.Fatal(err)
	}
	want := readObjects(t, objs)
	for _, o := range objs {
		if _, err := o.Body.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
	}
	p := &afterPutter{failed: map[string]bool{}, got: map[string]string{}}
	written, err := Write(context.Background(), p, cm, objs)
	if err != nil || len(written) != len(want) {
		t.Fatalf("Write: %v, wrote %v; want every part written on its second try", err, written)
	}
	for kind, body := range want {
		got := p.got[cm.Chunk.Parts(kind)]
		if kind == "usage" {
			got, body = usageJSON(t, got), []byte(usageJSON(t, string(body)))
		}
		if got != string(body) {
			t.Errorf("%s part: %q, want %q", kind, got, body)
		}
	}
}

// usageJSON is the events of usage object body, as JSON.
func usageJSON(t *testing.T, body string) string {
	t.Helper()
	evs, err := ReadUsage(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(evs)
	return string(j)
}

// The usage object, kept as long as the output file, is written gzipped:
// a fraction of its events' bytes, read back as the same events (and one
// written plain, before, still reads).
func TestWriteGzipsUsage(t *testing.T) {
	t.Parallel()
	now := time.Now()
	b := batch.Batch{ID: "batch_x", Tenant: "tenant-a", KeyID: "key_0123456789abcdef"}
	c := batch.Chunk{Batch: "batch_x", Tenant: "tenant-a", Index: 3, Run: "r", Attempt: "a1"}
	var outs []Outcome
	for i := range 200 {
		outs = append(outs, Outcome{CustomID: fmt.Sprintf("request-%d", i), Result: inference.Result{StatusCode: 200, Body: json.RawMessage(`{"ok":true}`),
			Model: "m", Attempts: 1, Latency: time.Duration(900+i) * time.Millisecond, Usage: inference.Usage{InputTokens: int64(i), OutputTokens: 3, TotalTokens: int64(i) + 3}}})
	}
	objs, cm, err := Commit(c, LinesOf(b, c, outs, now), 0, now)
	if err != nil {
		t.Fatal(err)
	}
	plain := readObjects(t, objs)["usage"]
	if _, err := objs["usage"].Body.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	p := &afterPutter{failed: map[string]bool{}, got: map[string]string{}}
	if _, err := Write(context.Background(), p, cm, objs); err != nil {
		t.Fatal(err)
	}
	stored := p.got[cm.Chunk.Parts("usage")]
	t.Logf("usage object: %d bytes gzipped, %d plain", len(stored), len(plain))
	if !strings.HasPrefix(stored, "\x1f\x8b") || len(stored)*4 > len(plain) {
		t.Fatalf("usage object of %d bytes (gzip: %v), want gzip under a quarter of its %d plain bytes", len(stored), strings.HasPrefix(stored, "\x1f\x8b"), len(plain))
	}
	if got, want := usageJSON(t, stored), usageJSON(t, string(plain)); got != want || !strings.Contains(want, "request-199") {
		t.Fatalf("usage read back %s, want %s", got, want)
	}
}
