package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
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
