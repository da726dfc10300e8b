package localstack

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// Every plain-JSON endpoint of openai-go's batch enum runs end to end, and
// its answers decode with the SDK's own types.
func TestMoreBatchEndpoints(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	for _, tt := range []struct {
		endpoint  openai.BatchNewParamsEndpoint
		body      map[string]any
		check     func(t *testing.T, body []byte)
		wantUsage bool
	}{
		{openai.BatchNewParamsEndpointV1Moderations, map[string]any{"model": "gpt-4o-mini", "input": "is this fine"}, func(t *testing.T, body []byte) {
			var m openai.ModerationNewResponse
			if err := json.Unmarshal(body, &m); err != nil || len(m.Results) != 1 || m.Results[0].Flagged {
				t.Errorf("moderation answer %s: %v", body, err)
			}
		}, false},
		{openai.BatchNewParamsEndpointV1ImagesGenerations, map[string]any{"model": "gpt-4o-mini", "prompt": "a red fox"}, func(t *testing.T, body []byte) {
			var im openai.ImagesResponse
			if err := json.Unmarshal(body, &im); err != nil || len(im.Data) != 1 || im.Data[0].B64JSON == "" {
				t.Errorf("image answer %s: %v", body, err)
			}
		}, true},
	} {
		t.Run(string(tt.endpoint), func(t *testing.T) {
			t.Parallel()
			var in bytes.Buffer
			var ids []string
			for i := range 3 {
				id := fmt.Sprintf("r%d", i)
				ids = append(ids, id)
				line, _ := json.Marshal(map[string]any{"custom_id": id, "method": "POST", "url": tt.endpoint, "body": tt.body})
				in.Write(append(line, '\n'))
			}
			f := upload(t, c, "in.jsonl", in.Bytes())
			b, err := c.Batches.New(context.Background(), openai.BatchNewParams{
				InputFileID: f.ID, Endpoint: tt.endpoint, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
			})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			b = waitBatch(t, c, b.ID)
			if b.Status != "completed" || b.Endpoint != string(tt.endpoint) {
				t.Fatalf("got %s %s (%s)", b.Status, b.Endpoint, b.Errors.RawJSON())
			}
			out, errs := checkInvariant(t, c, b, ids)
			if len(errs) != 0 {
				t.Fatalf("error lines: %v", errs)
			}
			tt.check(t, out["r0"].Response.Body)
			if got := b.Usage.TotalTokens > 0; got != tt.wantUsage {
				t.Errorf("usage %s: want tokens %v", b.Usage.RawJSON(), tt.wantUsage)
			}
		})
	}
}

// A /v1/moderations row without model runs on the models file's
// moderation_model, as OpenAI's moderations API takes a default model; with
// none configured, such a row is refused on its line (an input file) or
// with a 400 naming it (inline requests), saying what to configure
// (docs/api.md "Batches").
func TestModerationsWithoutModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rows := func(bodies ...map[string]any) ([]byte, []string) {
		var in bytes.Buffer
		var ids []string
		for i, body := range bodies {
			id := fmt.Sprintf("m%d", i)
			ids = append(ids, id)
			line, _ := json.Marshal(map[string]any{"custom_id": id, "method": "POST", "url": "/v1/moderations", "body": body})
			in.Write(append(line, '\n'))
		}
		return in.Bytes(), ids
	}
	create := func(c openai.Client, fileID string) *openai.Batch {
		b, err := c.Batches.New(ctx, openai.BatchNewParams{
			InputFileID: fileID, Endpoint: openai.BatchNewParamsEndpointV1Moderations, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		return waitBatch(t, c, b.ID)
	}

	t.Run("default configured", func(t *testing.T) {
		t.Parallel()
		rt := runtime(t, func(o *localrun.Options) {
			ms, err := config.ParseModels([]byte("moderation_model: omni-moderation-latest\n" + replaceMock(testModels+
				"  - {name: omni-moderation-latest, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, upstream_model: omni-moderation-2024-09-26}\n", o.MockAddr)))
			if err != nil {
				t.Fatal(err)
			}
			o.Models = ms
		})
		c, _ := client(t, rt, "acme")
		in, ids := rows(map[string]any{"input": "is this fine"}, map[string]any{"model": nil, "input": "and this"},
			map[string]any{"model": "gpt-4o-mini", "input": "named"})
		b := create(c, upload(t, c, "mod.jsonl", in).ID)
		if b.Status != "completed" {
			t.Fatalf("batch %s (%s), want completed", b.Status, b.Errors.RawJSON())
		}
		out, errs := checkInvariant(t, c, b, ids)
		if len(errs) != 0 {
			t.Fatalf("error lines: %v", errs)
		}
		for id, want := range map[string]string{"m0": "omni-moderation-2024-09-26", "m1": "omni-moderation-2024-09-26", "m2": "gpt-4o-mini"} {
			var m openai.ModerationNewResponse
			if err := json.Unmarshal(out[id].Response.Body, &m); err != nil || m.Model != want || len(m.Results) != 1 {
				t.Errorf("row %s answered %s (%v), want a moderation by %s", id, out[id].Response.Body, err, want)
			}
		}
	})

	t.Run("none configured", func(t *testing.T) {
		t.Parallel()
		rt := runtime(t)
		c, key := client(t, rt, "acme")
		in, _ := rows(map[string]any{"model": "gpt-4o-mini", "input": "named"}, map[string]any{"input": "is this fine"})
		b := create(c, upload(t, c, "mod.jsonl", in).ID)
		if b.Status != "failed" || len(b.Errors.Data) != 1 {
			t.Fatalf("batch %s, errors %s; want failed on one line", b.Status, b.Errors.RawJSON())
		}
		if e := b.Errors.Data[0]; e.Code != "missing_model" || e.Line != 2 || e.Param != "body.model" || !strings.Contains(e.Message, "moderation_model") {
			t.Errorf("error %+v, want missing_model on line 2 naming moderation_model", e)
		}
		status, body := rawDo(t, rt, key, "POST", "/v1/batches", strings.NewReader(
			`{"endpoint":"/v1/moderations","completion_window":"24h","requests":[{"body":{"model":"gpt-4o-mini","input":"a"}},{"body":{"input":"b"}}]}`))
		var e struct {
			Error struct{ Param, Code, Message string }
		}
		if json.Unmarshal(body, &e); status != 400 || e.Error.Param != "requests[1].body.model" || !strings.Contains(e.Error.Message, "moderation_model") {
			t.Errorf("inline create: %d %s, want 400 on requests[1].body.model naming moderation_model", status, body)
		}
	})
}

// A request naming a model that is not configured, or streaming, does not
// refuse its message batch: it comes back errored, as at Anthropic, and the
// others run.
func TestAnthropicRequestErroredNotRefused(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := anthropicClient(t, rt, "acme")
	stream := msgRequest("streams", "claude-haiku-4-5", "hi")
	stream.Params.SetExtraFields(map[string]any{"stream": true})
	b := newMessageBatch(t, c,
		msgRequest("unknown", "claude-nope", "hi"),
		msgRequest("good", "claude-haiku-4-5", "hello"),
		stream,
	)
	b = waitEnded(t, c, b.ID)
	if rc := b.RequestCounts; rc.Succeeded != 1 || rc.Errored != 2 {
		t.Fatalf("request_counts: %s, want 1 succeeded and 2 errored", rc.RawJSON())
	}
	got := messageResults(t, c, b, []string{"unknown", "good", "streams"})
	if got["good"].Result.Type != "succeeded" {
		t.Errorf("good: got %s", got["good"].RawJSON())
	}
	for id, want := range map[string]string{"unknown": `"claude-nope" is not a configured model`, "streams": "streaming is not supported"} {
		r := got[id].Result
		if r.Type != "errored" || r.Error.Error.Type != "invalid_request_error" || !strings.Contains(r.Error.Error.Message, want) {
			t.Errorf("%s: got %s, want errored invalid_request_error saying %q", id, got[id].RawJSON(), want)
		}
	}
}

// 29 days after a message batch ended it is archived: archived_at is set
// and its results are refused with Anthropic's error shape, not served
// until the bucket's lifecycle cuts them short.
func TestAnthropicResultsArchived(t *testing.T) {
	t.Parallel()
	var skip atomic.Int64 // how far the service's clock is ahead
	rt := runtime(t, func(o *localrun.Options) {
		o.Wire = func(a *app.App) {
			a.SetClock(func() time.Time { return time.Now().Add(time.Duration(skip.Load())) })
		}
	})
	c, key := anthropicClient(t, rt, "acme")
	b := waitEnded(t, c, newMessageBatch(t, c, msgRequest("a", "claude-haiku-4-5", "hi")).ID)
	if !b.ArchivedAt.IsZero() {
		t.Fatalf("archived_at %s right after the batch ended", b.ArchivedAt)
	}
	messageResults(t, c, b, []string{"a"})

	skip.Store(int64(29*24*time.Hour + time.Minute))
	b, err := c.Messages.Batches.Get(context.Background(), b.ID, anthropic.MessageBatchGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if want := b.EndedAt.Add(29 * 24 * time.Hour); !b.ArchivedAt.Equal(want) {
		t.Fatalf("archived_at %s, want %s (29 days after ended_at)", b.ArchivedAt, want)
	}
	stream := c.Messages.Batches.ResultsStreaming(context.Background(), b.ID, anthropic.MessageBatchResultsParams{})
	if stream.Next() || sdkStatus(t, stream.Err()) != 404 {
		t.Fatalf("results of an archived batch: got %v, want 404", stream.Err())
	}
	stream.Close()
	status, body := anthropicDo(t, rt, key, "GET", "/v1/messages/batches/"+b.ID+"/results", nil)
	if typ, msg := anthropicError(t, body); status != 404 || typ != "not_found_error" || !strings.Contains(msg, "archived") {
		t.Fatalf("got %d %s, want 404 not_found_error saying archived", status, body)
	}
}

// Completing an Upload with md5 checks it against the parts, in the order
// part_ids lists them.
func TestUploadMD5(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	ctx := context.Background()
	data := chatLines(20)
	u, err := c.Uploads.New(ctx, openai.UploadNewParams{Bytes: int64(len(data)), Filename: "in.jsonl", MimeType: "application/jsonl", Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	half := len(data) / 2
	var parts []string
	for _, chunk := range [][]byte{data[:half], data[half:]} {
		p, err := c.Uploads.Parts.New(ctx, u.ID, openai.UploadPartNewParams{Data: bytes.NewReader(chunk)})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p.ID)
	}
	sum := fmt.Sprintf("%x", md5.Sum(data))
	for _, tt := range []struct {
		name, md5, want string
		parts           []string
	}{
		{"wrong checksum", fmt.Sprintf("%x", md5.Sum([]byte("other"))), "does not match", parts},
		{"parts out of order", sum, "does not match", []string{parts[1], parts[0]}},
		{"not a checksum", "abc", "not an MD5 checksum", parts},
	} {
		_, err := c.Uploads.Complete(ctx, u.ID, openai.UploadCompleteParams{PartIDs: tt.parts, Md5: openai.String(tt.md5)})
		if status, msg := apiErr(t, err); status != 400 || !strings.Contains(msg, tt.want) {
			t.Errorf("%s: got %d %q, want 400 saying %q", tt.name, status, msg, tt.want)
		}
	}
	done, err := c.Uploads.Complete(ctx, u.ID, openai.UploadCompleteParams{PartIDs: parts, Md5: openai.String(strings.ToUpper(sum))})
	if err != nil || done.Status != "completed" || !bytes.Equal(content(t, c, done.File.ID), data) {
		t.Fatalf("complete with the right md5: %+v, %v", done, err)
	}
}

// GET /v1/files lists by created_at and leaves out expired files; a batch
// file expires after 30 days unless a scheduled template uses it.
func TestFilesListAndExpiry(t *testing.T) {
	t.Parallel()
	var skip atomic.Int64
	rt := runtime(t, func(o *localrun.Options) {
		o.Wire = func(a *app.App) {
			a.SetClock(func() time.Time { return time.Now().Add(time.Duration(skip.Load())) })
		}
	})
	c, key := client(t, rt, "acme")
	ctx := context.Background()

	first := upload(t, c, "first.jsonl", jsonlRows(nRows(2, "x")))
	if want := first.CreatedAt + 30*24*3600; first.ExpiresAt != want {
		t.Fatalf("expires_at %d, want created_at + 30 days (%d)", first.ExpiresAt, want)
	}
	b := waitBatch(t, c, createBatch(t, c, first.ID).ID)
	time.Sleep(1100 * time.Millisecond) // a later created_at, in seconds
	last := upload(t, c, "last.jsonl", jsonlRows(nRows(2, "x")))
	short, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(jsonlRows(nRows(1, "x"))), "short.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch, ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 3600}})
	if err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		page, err := c.Files.List(ctx, openai.FileListParams{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, f := range page.Data {
			ids = append(ids, f.ID)
		}
		return ids
	}
	// The output file's id sorts with its batch, before last's; by
	// created_at it comes after.
	if got, want := list(), []string{short.ID, last.ID, b.OutputFileID, first.ID}; !slices.Equal(got, want) {
		t.Fatalf("list: got %v, want %v (newest first)", got, want)
	}

	// A template keeps its input past 30 days; cancelling it lets it expire.
	status, body := postBatch(t, rt, key, map[string]any{"input_file_id": last.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h", "schedule": "0 3 * * *"})
	if status != 200 {
		t.Fatalf("create template: %d %s", status, body)
	}
	tpl := decodeBatch(t, body)
	skip.Store(int64(31 * 24 * time.Hour))
	if got, want := list(), []string{last.ID}; !slices.Equal(got, want) {
		t.Fatalf("list 31 days later: got %v, want only the template's input %v", got, want)
	}
	if _, err := c.Files.Get(ctx, first.ID); apiStatus(t, err) != 404 {
		t.Fatalf("get of an expired file: %v", err)
	}
	if _, err := c.Batches.Cancel(ctx, tpl.ID); err != nil {
		t.Fatal(err)
	}
	f, err := c.Files.Get(ctx, last.ID)
	if err != nil || f.ExpiresAt < time.Now().Add(60*24*time.Hour).Unix() {
		t.Fatalf("input of a cancelled template: %+v, %v; want it to expire 30 days after the cancel", f, err)
	}
}
