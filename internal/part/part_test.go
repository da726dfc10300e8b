package part

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
)

// build is the part of outs, the outcomes of chunk c's rows of batch b, set
// in order, and its objects by kind.
func build(t *testing.T, b batch.Batch, c batch.Chunk, outs []Outcome, now time.Time) (Part, map[string][]byte) {
	t.Helper()
	l := LinesOf(b, c, outs, now)
	defer l.Close()
	objs, p, err := l.part()
	if err != nil {
		t.Fatal(err)
	}
	return p, readObjects(t, objs)
}

func TestLinesOf(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b := batch.Batch{ID: "batch_x", Tenant: "t", KeyID: "k"}
	ok := func(id string, tokens int64) Outcome {
		return Outcome{CustomID: id, Result: inference.Result{StatusCode: 200, Body: json.RawMessage(`{"ok":true}`), Model: "m",
			Usage: inference.Usage{InputTokens: tokens, OutputTokens: 1, TotalTokens: tokens + 1, CachedTokens: tokens / 2, ReasoningTokens: 1}}}
	}
	outs := []Outcome{
		ok("a", 10),
		{CustomID: "b", Result: inference.Result{StatusCode: 400, Body: json.RawMessage(`{"error":{}}`), Model: "m"}},
		{CustomID: "c", Code: "batch_expired", Message: "late", Expired: true},
		{CustomID: "f", Code: "batch_expired", Message: "a callback's own code"},
		{CustomID: "g", Code: "batch_cancelled", Message: "cancelled", Cancelled: true},
		{CustomID: "d", Result: inference.Result{ErrCode: "request_timeout", ErrMessage: "slow"}},
		ok("e", 5),
	}
	p, objs := build(t, b, batch.Chunk{FirstRow: 30}, outs, now)
	if p.Pattern != "oeeeeeo" || p.Completed != 2 || p.Failed != 5 || p.Expired != 1 || p.Cancelled != 1 {
		t.Fatalf("pattern %q completed %d failed %d expired %d cancelled %d", p.Pattern, p.Completed, p.Failed, p.Expired, p.Cancelled)
	}
	if p.Tokens.InputTokens != 15 || p.Tokens.CachedTokens != 7 || p.Tokens.ReasoningTokens != 2 || p.ByModel["m"].Requests != 3 || p.ByModel["m"].Input != 15 {
		t.Fatalf("tokens %+v by model %+v", p.Tokens, p.ByModel)
	}
	lines := bytes.Split(bytes.TrimSpace(objs["err"]), []byte("\n"))
	if len(lines) != 5 {
		t.Fatalf("error lines: got %d", len(lines))
	}
	var l Line
	json.Unmarshal(lines[0], &l)
	if l.CustomID != "b" || l.Response == nil || l.Response.StatusCode != 400 || l.Error != nil || l.ID != LineID("batch_x", 31) {
		t.Fatalf("an upstream 400 keeps its response: got %+v", l)
	}
	json.Unmarshal(lines[4], &l)
	if l.CustomID != "d" || l.Response != nil || l.Error == nil || l.Error.Code != "request_timeout" {
		t.Fatalf("a row without an answer gets an error: got %+v", l)
	}
	evs := map[string]UsageEvent{}
	for line := range bytes.Lines(p.Usage) {
		var ev UsageEvent
		json.Unmarshal(line, &ev)
		evs[ev.CustomID] = ev
	}
	if len(evs) != len(outs) {
		t.Fatalf("usage events: got %d, want one per row", len(evs))
	}
	if ev := evs["a"]; ev.Row != 30 || ev.Status != "completed" || ev.LastStatus == nil || *ev.LastStatus != 200 || ev.Error != nil ||
		ev.Model != "m" || ev.KeyID != "k" || ev.InputTokens != 10 || ev.OutputTokens != 1 || ev.TotalTokens != 11 || ev.At != now.Unix() {
		t.Fatalf("the first row's event: got %+v", ev)
	}
	if ev := evs["b"]; ev.Row != 31 || ev.Status != "failed" || ev.LastStatus == nil || *ev.LastStatus != 400 || ev.Error == nil || ev.Error.Code != "upstream_error" {
		t.Fatalf("an upstream 400's event: got %+v", ev)
	}
	if ev := evs["d"]; ev.Status != "failed" || ev.LastStatus != nil || ev.Error == nil || ev.Error.Code != "request_timeout" || ev.TotalTokens != 0 {
		t.Fatalf("a row without an answer's event: got %+v", ev)
	}
}

func TestLinesOfBodyNotJSON(t *testing.T) {
	t.Parallel()
	outs := []Outcome{{CustomID: "x", Result: inference.Result{StatusCode: 200, Body: json.RawMessage(`{"cut`), Model: "m"}}}
	p, objs := build(t, batch.Batch{ID: "batch_x"}, batch.Chunk{}, outs, time.Now())
	var l Line
	if err := json.Unmarshal(bytes.TrimSpace(objs["err"]), &l); err != nil || l.Error == nil || l.Error.Code != CodeNotJSON {
		t.Fatalf("error part %q: %v", objs["err"], err)
	}
	if p.Failed != 1 || p.Completed != 0 || len(objs["out"]) != 0 || p.Pattern != "e" {
		t.Fatalf("part %+v", p)
	}
}

func TestLinesOfNoRows(t *testing.T) {
	t.Parallel()
	p, objs := build(t, batch.Batch{ID: "batch_x"}, batch.Chunk{}, nil, time.Now())
	if p.Pattern != "" || len(objs["out"])+len(objs["err"])+len(objs["usage"]) != 0 || p.Completed+p.Failed != 0 {
		t.Fatalf("part %+v", p)
	}
}

// The error line of a workflow record that expired after running requests
// carries their usage, which the batch's tokens count; an error line of a
// row that used none has no usage.
func TestLinesOfExpiredRecordCarriesUsage(t *testing.T) {
	t.Parallel()
	spent := inference.Usage{InputTokens: 7, OutputTokens: 3, TotalTokens: 10}
	outs := []Outcome{
		{CustomID: "rec", Code: CodeExpired, Message: "late", Expired: true, Result: inference.Result{Model: "m", Usage: spent}},
		{CustomID: "plain", Code: CodeExpired, Message: "late", Expired: true},
	}
	p, objs := build(t, batch.Batch{ID: "batch_x"}, batch.Chunk{}, outs, time.Now())
	lines := bytes.Split(bytes.TrimSpace(objs["err"]), []byte("\n"))
	var rec, plain Line
	json.Unmarshal(lines[0], &rec)
	json.Unmarshal(lines[1], &plain)
	if rec.Usage == nil || *rec.Usage != (LineUsage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10}) || rec.Error == nil || rec.Error.Code != CodeExpired {
		t.Fatalf("the record's line: got %s", lines[0])
	}
	if plain.Usage != nil || bytes.Contains(lines[1], []byte(`"usage"`)) {
		t.Fatalf("the plain row's line: got %s, want no usage", lines[1])
	}
	if p.Tokens.TotalTokens != 10 || p.Expired != 2 {
		t.Fatalf("part tokens %+v, expired %d", p.Tokens, p.Expired)
	}
}
