//go:build sdk

// The tests that run the official Go SDKs (openai-go, anthropic-sdk-go)
// against the mock, behind the build tag sdk, which make test and make vet
// set (the Makefile's TEST_TAGS) and make unit does not, so that make
// unit does not link the SDKs (README "Tests").

package mockup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/relaybatch/relay/internal/mockup"
)

func openAIClient(base string, opts ...option.RequestOption) *openai.Client {
	c := openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(base + "/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
	}, opts...)...)
	return &c
}

func anthropicClient(base string) *anthropic.Client {
	c := anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey("test-key"), aoption.WithMaxRetries(0))
	return &c
}

func TestOfficialClientsDecode(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	ctx := context.Background()

	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"chat completion", func(t *testing.T) {
			got, err := openAIClient(srv.URL).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    "gpt-4o-mini",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello there world")},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Model != "gpt-4o-mini" || got.Created == 0 {
				t.Errorf("got id %q object %q model %q created %d", got.ID, got.Object, got.Model, got.Created)
			}
			if len(got.Choices) != 1 {
				t.Fatalf("got %d choices, want 1", len(got.Choices))
			}
			c := got.Choices[0]
			if c.Message.Role != "assistant" || c.Message.Content != "echo: hello there world" || c.FinishReason != "stop" {
				t.Errorf("got choice %+v, want assistant %q stop", c.Message, "echo: hello there world")
			}
			// (2 words + 1) + (3 words + 1) in, "echo: hello there world" out.
			if u := got.Usage; u.PromptTokens != 7 || u.CompletionTokens != 4 || u.TotalTokens != 11 {
				t.Errorf("got usage %d/%d/%d, want 7/4/11", u.PromptTokens, u.CompletionTokens, u.TotalTokens)
			}
		}},
		{"embeddings", func(t *testing.T) {
			got, err := openAIClient(srv.URL).Embeddings.New(ctx, openai.EmbeddingNewParams{
				Model: "text-embedding-3-small",
				Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"two words", "three more words"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if got.Object != "list" || got.Model != "text-embedding-3-small" || len(got.Data) != 2 {
				t.Fatalf("got object %q model %q %d embeddings", got.Object, got.Model, len(got.Data))
			}
			for i, d := range got.Data {
				if d.Index != int64(i) || len(d.Embedding) != 8 {
					t.Errorf("embedding %d: got index %d, %d floats, want %d, 8", i, d.Index, len(d.Embedding), i)
				}
				var norm float64
				for _, x := range d.Embedding {
					norm += x * x
				}
				if math.Abs(norm-1) > 1e-5 {
					t.Errorf("embedding %d: got squared norm %v, want 1", i, norm)
				}
			}
			if slices.Equal(got.Data[0].Embedding, got.Data[1].Embedding) {
				t.Error("different inputs got the same vector")
			}
			if got.Usage.PromptTokens != 5 || got.Usage.TotalTokens != 5 {
				t.Errorf("got usage %d/%d, want 5/5", got.Usage.PromptTokens, got.Usage.TotalTokens)
			}
		}},
		{"responses", func(t *testing.T) {
			got, err := openAIClient(srv.URL).Responses.New(ctx, responses.ResponseNewParams{
				Model:        "gpt-4o-mini",
				Instructions: openai.String("answer"),
				Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hi you")},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.ID, "resp_") || got.Object != "response" || got.Status != "completed" || got.Model != "gpt-4o-mini" {
				t.Errorf("got id %q object %q status %q model %q", got.ID, got.Object, got.Status, got.Model)
			}
			if text := got.OutputText(); text != "echo: hi you" {
				t.Errorf("got output text %q, want %q", text, "echo: hi you")
			}
			// 1 instruction word + (2 words + 1).
			if u := got.Usage; u.InputTokens != 4 || u.OutputTokens != 3 || u.TotalTokens != 7 {
				t.Errorf("got usage %d/%d/%d, want 4/3/7", u.InputTokens, u.OutputTokens, u.TotalTokens)
			}
		}},
		{"completions", func(t *testing.T) {
			got, err := openAIClient(srv.URL).Completions.New(ctx, openai.CompletionNewParams{
				Model:  "gpt-3.5-turbo-instruct",
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("say this")},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.ID, "cmpl-") || got.Object != "text_completion" || got.Model != "gpt-3.5-turbo-instruct" {
				t.Errorf("got id %q object %q model %q", got.ID, got.Object, got.Model)
			}
			if len(got.Choices) != 1 || got.Choices[0].Text != "echo: say this" || got.Choices[0].FinishReason != "stop" {
				t.Errorf("got choices %+v, want one %q", got.Choices, "echo: say this")
			}
			if u := got.Usage; u.PromptTokens != 2 || u.CompletionTokens != 3 || u.TotalTokens != 5 {
				t.Errorf("got usage %d/%d/%d, want 2/3/5", u.PromptTokens, u.CompletionTokens, u.TotalTokens)
			}
		}},
		{"anthropic message", func(t *testing.T) {
			got, err := anthropicClient(srv.URL).Messages.New(ctx, anthropic.MessageNewParams{
				Model:     "claude-sonnet-4-5",
				MaxTokens: 64,
				System:    []anthropic.TextBlockParam{{Text: "be kind"}},
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello claude"))},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.ID, "msg_") || got.Type != "message" || got.Role != "assistant" || got.Model != "claude-sonnet-4-5" {
				t.Errorf("got id %q type %q role %q model %q", got.ID, got.Type, got.Role, got.Model)
			}
			if len(got.Content) != 1 || got.Content[0].Type != "text" || got.Content[0].Text != "echo: hello claude" {
				t.Errorf("got content %+v, want one text %q", got.Content, "echo: hello claude")
			}
			if got.StopReason != anthropic.StopReasonEndTurn {
				t.Errorf("got stop_reason %q, want end_turn", got.StopReason)
			}
			// 2 system words + (2 words + 1).
			if u := got.Usage; u.InputTokens != 5 || u.OutputTokens != 3 {
				t.Errorf("got usage %d/%d, want 5/3", u.InputTokens, u.OutputTokens)
			}
		}},
		{"moderation", func(t *testing.T) {
			got, err := openAIClient(srv.URL).Moderations.New(ctx, openai.ModerationNewParams{
				Model: "omni-moderation-latest",
				Input: openai.ModerationNewParamsInputUnion{OfStringArray: []string{"one", "two"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.ID, "modr-") || got.Model != "omni-moderation-latest" || len(got.Results) != 2 {
				t.Fatalf("got id %q model %q %d results, want modr-… and 2", got.ID, got.Model, len(got.Results))
			}
			if r := got.Results[0]; r.Flagged || r.Categories.Violence || !r.JSON.CategoryScores.Valid() {
				t.Errorf("got result %s, want nothing flagged", r.RawJSON())
			}
		}},
		{"image generation", func(t *testing.T) {
			got, err := openAIClient(srv.URL).Images.Generate(ctx, openai.ImageGenerateParams{
				Model: "gpt-image-1", Prompt: "a red fox", N: openai.Int(2),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Data) != 2 || got.Data[0].B64JSON == "" || got.Data[0].B64JSON == got.Data[1].B64JSON {
				t.Fatalf("got %s, want two distinct images", got.RawJSON())
			}
			if u := got.Usage; u.InputTokens != 3 || u.OutputTokens != 32 || u.TotalTokens != 35 {
				t.Errorf("got usage %d/%d/%d, want 3/32/35", u.InputTokens, u.OutputTokens, u.TotalTokens)
			}
		}},
		{"openai error", func(t *testing.T) {
			_, err := openAIClient(srv.URL).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    "gpt-4o-mini",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("[[mock:429]]")},
			})
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("got %v, want an *openai.Error", err)
			}
			if apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" || apiErr.Message == "" {
				t.Errorf("got status %d code %q message %q", apiErr.StatusCode, apiErr.Code, apiErr.Message)
			}
		}},
		{"anthropic error", func(t *testing.T) {
			_, err := anthropicClient(srv.URL).Messages.New(ctx, anthropic.MessageNewParams{
				Model:     "claude-broken",
				MaxTokens: 64,
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
			})
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("got %v, want an *anthropic.Error", err)
			}
			if apiErr.StatusCode != http.StatusInternalServerError || !strings.HasPrefix(apiErr.RequestID, "req_") {
				t.Errorf("got status %d request id %q, want 500 req_…", apiErr.StatusCode, apiErr.RequestID)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t)
		})
	}
}

// The SDK's own retries, waiting what retry-after-ms says, get through a
// row rate limited twice: the mock and the client agree on what a retry is.
func TestOfficialClientRetriesThroughFailures(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{RetryAfter: time.Millisecond})
	client := openAIClient(srv.URL, option.WithMaxRetries(2))

	got, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("[[mock:429x=2]] row 1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "echo: [[mock:429x=2]] row 1"; got.Choices[0].Message.Content != want {
		t.Errorf("got %q, want %q", got.Choices[0].Message.Content, want)
	}
	if got, want := m.Stats().ByStatus, map[int]int64{429: 2, 200: 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("got statuses %v, want %v", got, want)
	}
}

// The mock's batch listings, OpenAI's and Anthropic's, each list their
// own batches only, newest first, a page of limit after a cursor, as the
// SDKs read them.
func TestBatchListings(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{BatchDelay: time.Hour})
	ctx := t.Context()
	oc, ac := openAIClient(srv.URL), anthropicClient(srv.URL)
	row := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}` + "\n"
	if empty, err := oc.Batches.List(ctx, openai.BatchListParams{}); err != nil || !strings.Contains(empty.RawJSON(), `"data":[]`) {
		t.Errorf("list with no batches: %v %v, want an empty data list", empty, err)
	}
	var oai, anth []string
	for range 3 {
		f, err := oc.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(row), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
		if err != nil {
			t.Fatal(err)
		}
		b, err := oc.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
		if err != nil {
			t.Fatal(err)
		}
		oai = append(oai, b.ID)
		mb, err := ac.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{{CustomID: "a",
			Params: anthropic.MessageBatchNewParamsRequestParams{Model: "claude", MaxTokens: 1, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}}}})
		if err != nil {
			t.Fatal(err)
		}
		anth = append(anth, mb.ID)
	}

	page, err := oc.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	if got := batchIDs(page.Data, func(b openai.Batch) string { return b.ID }); !slices.Equal(got, []string{oai[2], oai[1]}) || !page.HasMore {
		t.Errorf("first page of /v1/batches: %v (has_more %v), want %v and more", got, page.HasMore, []string{oai[2], oai[1]})
	}
	page, err = oc.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(2), After: openai.String(oai[1])})
	if err != nil {
		t.Fatal(err)
	}
	if got := batchIDs(page.Data, func(b openai.Batch) string { return b.ID }); !slices.Equal(got, oai[:1]) || page.HasMore {
		t.Errorf("/v1/batches after %s: %v (has_more %v), want %v and no more", oai[1], got, page.HasMore, oai[:1])
	}

	mpage, err := ac.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(1)})
	if err != nil {
		t.Fatal(err)
	}
	if got := batchIDs(mpage.Data, func(b anthropic.MessageBatch) string { return b.ID }); !slices.Equal(got, anth[2:]) || !mpage.HasMore ||
		mpage.FirstID != anth[2] || mpage.LastID != anth[2] {
		t.Errorf("first page of /v1/messages/batches: %v (has_more %v, first %q, last %q), want %v and more", got, mpage.HasMore, mpage.FirstID, mpage.LastID, anth[2:])
	}
	mpage, err = ac.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{AfterID: anthropic.String(anth[2])})
	if err != nil {
		t.Fatal(err)
	}
	if got := batchIDs(mpage.Data, func(b anthropic.MessageBatch) string { return b.ID }); !slices.Equal(got, []string{anth[1], anth[0]}) || mpage.HasMore {
		t.Errorf("/v1/messages/batches after %s: %v (has_more %v), want %v and no more", anth[2], got, mpage.HasMore, []string{anth[1], anth[0]})
	}

	// Each API reads and cancels its own batches only, a 404 in its shape
	// for another.
	if b, err := oc.Batches.Get(ctx, oai[0]); err != nil || b.Status != openai.BatchStatusInProgress {
		t.Errorf("get %s: %+v, %v", oai[0], b, err)
	}
	var oerr *openai.Error
	if _, err := oc.Batches.Cancel(ctx, anth[0]); !errors.As(err, &oerr) || oerr.StatusCode != http.StatusNotFound || oerr.Message != "batch not found" {
		t.Errorf("cancel of a message batch on /v1/batches: %v, want a 404", err)
	}
	if mb, err := ac.Messages.Batches.Cancel(ctx, anth[0], anthropic.MessageBatchCancelParams{}); err != nil || mb.ProcessingStatus != anthropic.MessageBatchProcessingStatusCanceling {
		t.Errorf("cancel %s: %+v, %v", anth[0], mb, err)
	}
	var aerr *anthropic.Error
	if _, err := ac.Messages.Batches.Get(ctx, oai[0], anthropic.MessageBatchGetParams{}); !errors.As(err, &aerr) || aerr.StatusCode != http.StatusNotFound || !strings.Contains(aerr.RawJSON(), "message batch not found") {
		t.Errorf("get of an OpenAI batch on /v1/messages/batches: %v, want a 404", err)
	}
}

func batchIDs[T any](data []T, id func(T) string) []string {
	var ids []string
	for _, d := range data {
		ids = append(ids, id(d))
	}
	return ids
}

// A provider batch works through its rows evenly over its delay: one
// cancelled halfway keeps the answers of the rows it had finished (the
// first ones, in OpenAI's output file and as Anthropic's succeeded
// results) and gives the rest a cancelled result.
func TestCancelledBatchKeepsFinishedRows(t *testing.T) {
	t.Parallel()
	const n, delay = 20, time.Hour
	var clock atomic.Int64 // Unix nanoseconds: the batches' time stands until the test moves it
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	_, srv := newServer(t, mockup.Options{BatchDelay: delay, Clock: now})
	ctx := t.Context()
	oc, ac := openAIClient(srv.URL), anthropicClient(srv.URL)
	var in strings.Builder
	var reqs []anthropic.MessageBatchNewParamsRequest
	for i := range n {
		fmt.Fprintf(&in, `{"custom_id":"r%02d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`+"\n", i)
		reqs = append(reqs, anthropic.MessageBatchNewParamsRequest{CustomID: fmt.Sprintf("r%02d", i),
			Params: anthropic.MessageBatchNewParamsRequestParams{Model: "claude", MaxTokens: 1, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}})
	}
	f, err := oc.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(in.String()), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := oc.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := ac.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(delay / 2)) // half the rows of both batches are answered by then
	if _, err := oc.Batches.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Messages.Batches.Cancel(ctx, mb.ID, anthropic.MessageBatchCancelParams{}); err != nil {
		t.Fatal(err)
	}

	for b.Status != openai.BatchStatusCancelled {
		time.Sleep(50 * time.Millisecond)
		if b, err = oc.Batches.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	done := int(b.RequestCounts.Completed)
	if done != n/2 || b.RequestCounts.Failed != int64(n-done) {
		t.Fatalf("cancelled OpenAI batch: counts %+v, want %d of %d completed, the rest failed", b.RequestCounts, n/2, n)
	}
	for file, want := range map[string]string{b.OutputFileID: `"status_code":200`, b.ErrorFileID: `"code":"batch_cancelled"`} {
		res, err := oc.Files.Content(ctx, file)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for l := range strings.Lines(string(body)) {
			if !strings.Contains(l, want) {
				t.Errorf("line %s, want %s", l, want)
			}
		}
		if file == b.OutputFileID && !strings.Contains(string(body), `"custom_id":"r00"`) {
			t.Errorf("output file %s lacks the first row", body)
		}
	}

	for mb.ProcessingStatus != anthropic.MessageBatchProcessingStatusEnded {
		time.Sleep(50 * time.Millisecond)
		if mb, err = ac.Messages.Batches.Get(ctx, mb.ID, anthropic.MessageBatchGetParams{}); err != nil {
			t.Fatal(err)
		}
	}
	rc := mb.RequestCounts
	if rc.Succeeded != n/2 || rc.Canceled != n-rc.Succeeded {
		t.Fatalf("cancelled message batch: counts %s, want %d of %d succeeded, the rest canceled", rc.RawJSON(), n/2, n)
	}
	stream := ac.Messages.Batches.ResultsStreaming(ctx, mb.ID, anthropic.MessageBatchResultsParams{})
	for i := 0; stream.Next(); i++ {
		want := "succeeded"
		if i >= int(rc.Succeeded) {
			want = "canceled"
		}
		if r := stream.Current(); r.Result.Type != want {
			t.Errorf("result %d (%s): %s, want %s", i, r.CustomID, r.Result.Type, want)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
}
