package mockup_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
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

	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/mockup"
)

func newServer(t *testing.T, opts mockup.Options) (*mockup.Server, *httptest.Server) {
	t.Helper()
	m := mockup.New(opts)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

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

type reply struct {
	status int
	header http.Header
	body   []byte
}

func send(t *testing.T, base, method, path, body string, header http.Header) reply {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s %s: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// post sends body with the credentials the route's API expects.
func post(t *testing.T, base, path, body string) reply {
	t.Helper()
	return send(t, base, http.MethodPost, path, body, authFor(path))
}

func authFor(path string) http.Header {
	if path == "/v1/messages" {
		return http.Header{"X-Api-Key": {"test-key"}}
	}
	return http.Header{"Authorization": {"Bearer test-key"}}
}

// bodyFor is the smallest valid body for path that carries text where a
// real client would put the prompt.
func bodyFor(path, model, text string) string {
	b := map[string]any{"model": model}
	switch path {
	case "/v1/embeddings", "/v1/responses":
		b["input"] = text
	case "/v1/completions":
		b["prompt"] = text
	case "/v1/messages":
		b["max_tokens"] = 16
		b["messages"] = []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text}}}}
	default:
		b["messages"] = []any{map[string]any{"role": "user", "content": text}}
	}
	return mustJSON(b)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// errorType checks that body is an error in the shape of path's API and
// returns its error.type.
func errorType(t *testing.T, path string, body []byte) string {
	t.Helper()
	if path == "/v1/messages" {
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Message == "" {
			t.Errorf("body %s is not an Anthropic error (err %v)", body, err)
		}
		return e.Error.Type
	}
	var e struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("body %s is not JSON: %v", body, err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[k]; !ok {
			t.Errorf("OpenAI error %s lacks error.%s", body, k)
		}
	}
	typ, _ := e.Error["type"].(string)
	return typ
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

func TestForcedFailures(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})

	tests := []struct {
		name       string
		path       string
		model      string
		text       string
		header     http.Header
		wantStatus int
		wantType   string
	}{
		{"429 marker", "/v1/chat/completions", "m", "please [[mock:429]] now", nil, 429, "requests"},
		{"500 marker", "/v1/chat/completions", "m", "[[mock:500]]", nil, 500, "server_error"},
		{"400 marker", "/v1/chat/completions", "m", "[[mock:400]]", nil, 400, "invalid_request_error"},
		{"any status marker", "/v1/embeddings", "m", "[[mock:503]]", nil, 503, "server_error"},
		{"highest status wins", "/v1/chat/completions", "m", "[[mock:429]] [[mock:500]]", nil, 500, "server_error"},
		{"marker in responses input", "/v1/responses", "m", "[[mock:400]]", nil, 400, "invalid_request_error"},
		{"marker in completions prompt", "/v1/completions", "m", "[[mock:500]]", nil, 500, "server_error"},
		{"anthropic 429", "/v1/messages", "m", "[[mock:429]]", nil, 429, "rate_limit_error"},
		{"anthropic 500", "/v1/messages", "m", "[[mock:500]]", nil, 500, "api_error"},
		{"anthropic 400", "/v1/messages", "m", "[[mock:400]]", nil, 400, "invalid_request_error"},
		{"sleep then success", "/v1/chat/completions", "m", "[[mock:sleep=1ms]]", nil, 200, ""},
		{"unknown marker", "/v1/chat/completions", "m", "[[mock:teapot]]", nil, 400, "invalid_request_error"},
		{"bad sleep", "/v1/messages", "m", "[[mock:sleep=soon]]", nil, 400, "invalid_request_error"},
		{"bad count", "/v1/chat/completions", "m", "[[mock:fail=-1]]", nil, 400, "invalid_request_error"},
		{"ratelimited model", "/v1/chat/completions", "gpt-4o-ratelimited", "hi", nil, 429, "requests"},
		{"broken model", "/v1/messages", "claude-broken", "hi", nil, 500, "api_error"},
		{"suffix mid-name is a name", "/v1/chat/completions", "gpt-broken-not", "hi", nil, 200, ""},
		{"status header", "/v1/completions", "m", "hi", http.Header{"X-Mock-Status": {"503"}}, 503, "server_error"},
		{"status header anthropic", "/v1/messages", "m", "hi", http.Header{"X-Mock-Status": {"529"}}, 529, "overloaded_error"},
		{"bad status header", "/v1/chat/completions", "m", "hi", http.Header{"X-Mock-Status": {"200"}}, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			header := authFor(tt.path)
			for k, v := range tt.header {
				header[k] = v
			}
			got := send(t, srv.URL, http.MethodPost, tt.path, bodyFor(tt.path, tt.model, tt.text), header)
			if got.status != tt.wantStatus {
				t.Fatalf("got status %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantStatus >= 400 {
				if typ := errorType(t, tt.path, got.body); typ != tt.wantType {
					t.Errorf("got error type %q, want %q", typ, tt.wantType)
				}
			}
			if ra := got.header.Get("Retry-After"); (got.status == 429) != (ra == "1") {
				t.Errorf("status %d got Retry-After %q, want \"1\" on 429s only", got.status, ra)
			}
			if !strings.HasPrefix(got.header.Get("x-request-id"), "req_") {
				t.Errorf("got x-request-id %q, want req_…", got.header.Get("x-request-id"))
			}
		})
	}
}

// A marker deep inside a content-part array counts like one in a plain string.
func TestMarkerInContentParts(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"ok"},{"type":"text","text":"[[mock:500]]"}]}]}`
	if got := post(t, srv.URL, "/v1/chat/completions", body); got.status != 500 {
		t.Errorf("got status %d, want 500", got.status)
	}
}

// Hangs, sleeps and latency end when the client gives up, and are
// counted as 499.
func TestWaitsEndWithTheClient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts mockup.Options
		text string
	}{
		{"hang", mockup.Options{}, "[[mock:hang]]"},
		{"sleep", mockup.Options{}, "[[mock:sleep=1h]]"},
		{"latency", mockup.Options{Latency: time.Hour}, "hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, srv := newServer(t, tt.opts)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
				strings.NewReader(bodyFor("/v1/chat/completions", "m", tt.text)))
			req.Header = authFor("/v1/chat/completions")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("got status %d, want no answer", resp.StatusCode)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want the client's deadline", err)
			}
			srv.Close() // waits for the handler to return
			if got := m.Stats().ByStatus; !reflect.DeepEqual(got, map[int]int64{499: 1}) {
				t.Errorf("got statuses %v, want one 499", got)
			}
		})
	}
}

func TestFailuresPerRow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		text   string
		models []string // one request per model, in order
		want   []int
	}{
		{"fail=2", "[[mock:fail=2]] row", []string{"a", "a", "a", "a"}, []int{500, 500, 200, 200}},
		{"429x=2", "[[mock:429x=2]] row", []string{"a", "a", "a"}, []int{429, 429, 200}},
		{"fail=0", "[[mock:fail=0]] row", []string{"a"}, []int{200}},
		{"fallback model is the same row", "[[mock:fail=2]] row", []string{"primary", "fallback", "primary"}, []int{500, 500, 200}},
		{"suffix failures still count", "[[mock:fail=2]] row", []string{"x-broken", "x-broken", "y"}, []int{500, 500, 200}},
		{"fail before 429x", "[[mock:fail=1]] [[mock:429x=2]] row", []string{"a", "a", "a"}, []int{500, 429, 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, srv := newServer(t, mockup.Options{})
			var got []int
			for _, model := range tt.models {
				got = append(got, post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", model, tt.text)).status)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got statuses %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRowsAreCountedApartAndReset(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	chat := func(text string) int {
		return post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "m", text)).status
	}
	var got []int
	got = append(got, chat("[[mock:fail=1]] row 1"), chat("[[mock:fail=1]] row 2"), chat("[[mock:fail=1]] row 1"))
	if r := send(t, srv.URL, http.MethodPost, "/mock/reset", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("reset: got status %d, want 204", r.status)
	}
	got = append(got, chat("[[mock:fail=1]] row 1"))
	if want := []int{500, 500, 200, 500}; !slices.Equal(got, want) {
		t.Errorf("got statuses %v, want %v", got, want)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{})
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "gpt", "one"))
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "gpt", "two"))
	post(t, srv.URL, "/v1/embeddings", bodyFor("/v1/embeddings", "emb", "three"))
	post(t, srv.URL, "/v1/messages", bodyFor("/v1/messages", "claude-ratelimited", "four"))
	send(t, srv.URL, http.MethodPost, "/v1/chat/completions", bodyFor("/v1/chat/completions", "gpt", "five"), nil)
	send(t, srv.URL, http.MethodGet, "/v1/chat/completions", "", authFor("/v1/chat/completions"))
	post(t, srv.URL, "/v1/nope", "{}")
	send(t, srv.URL, http.MethodGet, "/mock/options", "", nil) // control requests are not counted

	want := mockup.Stats{
		Requests: 7,
		ByModel:  map[string]int64{"gpt": 3, "emb": 1, "claude-ratelimited": 1},
		ByPath:   map[string]int64{"/v1/chat/completions": 4, "/v1/embeddings": 1, "/v1/messages": 1, "/v1/nope": 1},
		ByStatus: map[int]int64{200: 3, 429: 1, 401: 1, 405: 1, 404: 1},
		// One request at a time: each model peaked at one in flight.
		PeakInFlight: map[string]int64{"gpt": 1, "emb": 1, "claude-ratelimited": 1},
		BatchRows:    map[string]int64{},
		// The requests that reached the model checks, by their key.
		ByKey: map[string]int64{"test-key": 4}, LimitedByKey: map[string]int64{},
	}
	if got := m.Stats(); !reflect.DeepEqual(got, want) {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	r := send(t, srv.URL, http.MethodGet, "/mock/stats", "", nil)
	var got mockup.Stats
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 {
		t.Fatalf("GET /mock/stats: status %d, %v: %s", r.status, err, r.body)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /mock/stats = %+v, want %+v", got, want)
	}

	m.Reset()
	if got, want := m.Stats(), (mockup.Stats{ByModel: map[string]int64{}, ByPath: map[string]int64{}, ByStatus: map[int]int64{}, PeakInFlight: map[string]int64{}, BatchRows: map[string]int64{},
		ByKey: map[string]int64{}, LimitedByKey: map[string]int64{}}); !reflect.DeepEqual(got, want) {
		t.Errorf("after Reset, Stats() = %+v, want zero", got)
	}
}

// PeakInFlight is the most requests of one model answered at once, not a
// count of arrivals: capacity checks (the benchmark's max_concurrency bar)
// read it, so it must see overlap, forget nothing that ended, and keep
// models apart.
func TestPeakInFlight(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	held := map[string]int{"a": 5, "b": 2}
	done := make(chan struct{}, 7)
	for model, n := range held {
		for range n {
			go func() {
				defer func() { done <- struct{}{} }()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
					strings.NewReader(bodyFor("/v1/chat/completions", model, "[[mock:hang]]")))
				req.Header = authFor("/v1/chat/completions")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
	}
	waitStats(t, m, "7 held requests to arrive", func(s mockup.Stats) bool { return s.Requests == 7 })
	if got, want := m.Stats().PeakInFlight, map[string]int64{"a": 5, "b": 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("with 5 and 2 requests held: PeakInFlight = %v, want %v", got, want)
	}

	cancel()
	for range 7 {
		<-done
	}
	waitStats(t, m, "the held requests to end", func(s mockup.Stats) bool { return s.ByStatus[499] == 7 })
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "a", "one more"))
	if got := m.Stats().PeakInFlight["a"]; got != 5 {
		t.Errorf("after the held requests ended: PeakInFlight[a] = %d, want the peak of 5 kept", got)
	}

	// After a Reset, one request at a time peaks at one: the ended requests
	// left the in-flight count.
	m.Reset()
	post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "a", "alone"))
	if got, want := m.Stats().PeakInFlight, map[string]int64{"a": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("after Reset and one request: PeakInFlight = %v, want %v", got, want)
	}
}

// waitStats waits until the server's stats satisfy cond: requests are
// counted by the server's goroutines, after the client has sent them.
func waitStats(t *testing.T, m *mockup.Server, what string, cond func(mockup.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond(m.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s; stats %+v", what, m.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSameRequestSameAnswer(t *testing.T) {
	t.Parallel()
	_, srv1 := newServer(t, mockup.Options{})
	_, srv2 := newServer(t, mockup.Options{})
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/completions", "/v1/messages"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			body := bodyFor(path, "m", "same words")
			first := post(t, srv1.URL, path, body)
			again := post(t, srv1.URL, path, body)
			elsewhere := post(t, srv2.URL, path, body)
			other := post(t, srv1.URL, path, bodyFor(path, "m", "other words"))
			if first.status != 200 {
				t.Fatalf("got status %d: %s", first.status, first.body)
			}
			for _, r := range []reply{again, elsewhere} {
				if !bytes.Equal(r.body, first.body) || r.header.Get("x-request-id") != first.header.Get("x-request-id") {
					t.Errorf("got %s (%s), want %s (%s)", r.body, r.header.Get("x-request-id"), first.body, first.header.Get("x-request-id"))
				}
			}
			if bytes.Equal(other.body, first.body) || other.header.Get("x-request-id") == first.header.Get("x-request-id") {
				t.Errorf("a different request got the same answer %s", other.body)
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{RevokedKeys: []string{"placeholder"}})
	tests := []struct {
		name       string
		path       string
		header     http.Header
		wantStatus int
		wantType   string
	}{
		{"openai without key", "/v1/chat/completions", nil, 401, "invalid_request_error"},
		{"openai refused key", "/v1/chat/completions", http.Header{"Authorization": {"Bearer placeholder"}}, 401, "invalid_request_error"},
		{"anthropic refused key", "/v1/messages", http.Header{"X-Api-Key": {"placeholder"}}, 401, "authentication_error"},
		{"openai basic auth", "/v1/embeddings", http.Header{"Authorization": {"Basic dTpw"}}, 401, "invalid_request_error"},
		{"openai empty bearer", "/v1/responses", http.Header{"Authorization": {"Bearer "}}, 401, "invalid_request_error"},
		{"openai x-api-key is not enough", "/v1/completions", http.Header{"X-Api-Key": {"k"}}, 401, "invalid_request_error"},
		{"openai any bearer", "/v1/completions", http.Header{"Authorization": {"Bearer anything"}}, 200, ""},
		{"anthropic without key", "/v1/messages", nil, 401, "authentication_error"},
		{"anthropic empty key", "/v1/messages", http.Header{"X-Api-Key": {" "}}, 401, "authentication_error"},
		{"anthropic basic auth", "/v1/messages", http.Header{"Authorization": {"Basic dTpw"}}, 401, "authentication_error"},
		{"anthropic any key", "/v1/messages", http.Header{"X-Api-Key": {"anything"}}, 200, ""},
		{"anthropic any bearer", "/v1/messages", http.Header{"Authorization": {"Bearer anything"}}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := send(t, srv.URL, http.MethodPost, tt.path, bodyFor(tt.path, "m", "hi"), tt.header)
			if got.status != tt.wantStatus {
				t.Fatalf("got status %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantStatus != 200 {
				if typ := errorType(t, tt.path, got.body); typ != tt.wantType {
					t.Errorf("got error type %q, want %q", typ, tt.wantType)
				}
			}
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantParam  string
	}{
		{"bad JSON", "POST", "/v1/chat/completions", `{"model":`, 400, ""},
		{"bad JSON anthropic", "POST", "/v1/messages", `not json`, 400, ""},
		{"array body", "POST", "/v1/embeddings", `[]`, 400, ""},
		{"null body", "POST", "/v1/responses", `null`, 400, ""},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "model"},
		{"model not a string", "POST", "/v1/completions", `{"model":5,"prompt":"x"}`, 400, "model"},
		{"missing model anthropic", "POST", "/v1/messages", `{"max_tokens":1,"messages":[]}`, 400, ""},
		{"stream", "POST", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, 400, "stream"},
		{"stream anthropic", "POST", "/v1/messages", `{"model":"m","stream":true,"messages":[]}`, 400, ""},
		{"stream false is fine", "POST", "/v1/chat/completions", `{"model":"m","stream":false,"messages":[]}`, 200, ""},
		{"unknown path", "POST", "/v1/nope", `{"model":"m"}`, 404, ""},
		{"no /v1 prefix", "POST", "/chat/completions", `{"model":"m"}`, 404, ""},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := send(t, srv.URL, tt.method, tt.path, tt.body, authFor(tt.path))
			if got.status != tt.wantStatus {
				t.Fatalf("got status %d, want %d: %s", got.status, tt.wantStatus, got.body)
			}
			if tt.wantStatus == 200 {
				return
			}
			if typ := errorType(t, tt.path, got.body); typ != "invalid_request_error" {
				t.Errorf("got error type %q, want invalid_request_error", typ)
			}
			if tt.path == "/v1/messages" {
				return
			}
			var e struct {
				Error struct {
					Param *string `json:"param"`
				} `json:"error"`
			}
			_ = json.Unmarshal(got.body, &e)
			if gotParam := ptrString(e.Error.Param); gotParam != tt.wantParam {
				t.Errorf("got param %q, want %q", gotParam, tt.wantParam)
			}
		})
	}
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func TestEmbeddingEncodings(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	// embed returns the raw "embedding" of a string input and a token input.
	embed := func(encoding string) []json.RawMessage {
		body := map[string]any{"model": "m", "input": []any{"some text", []any{1, 2, 3}}, "encoding_format": encoding}
		r := post(t, srv.URL, "/v1/embeddings", mustJSON(body))
		var got struct {
			Data []struct {
				Embedding json.RawMessage `json:"embedding"`
			} `json:"data"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 || len(got.Data) != 2 {
			t.Fatalf("got status %d, %v: %s", r.status, err, r.body)
		}
		if got.Usage.PromptTokens != 5 { // 2 words + 3 tokens
			t.Errorf("got prompt_tokens %d, want 5", got.Usage.PromptTokens)
		}
		var out []json.RawMessage
		for _, d := range got.Data {
			out = append(out, d.Embedding)
		}
		return out
	}

	floats, encoded := embed("float"), embed("base64")
	for i := range floats {
		var want []float32
		var b64 string
		if err := json.Unmarshal(floats[i], &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(encoded[i], &b64); err != nil {
			t.Fatalf("base64 embedding %s: %v", encoded[i], err)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(raw)/4)
		for j := range got {
			got[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
		if !slices.Equal(got, want) {
			t.Errorf("input %d: base64 decodes to %v, want %v", i, got, want)
		}
	}
}

func TestRandomRates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts mockup.Options
		want int
	}{
		{"no failures", mockup.Options{}, 200},
		{"all errors", mockup.Options{ErrorRate: 1}, 500},
		{"all rate limited", mockup.Options{RateLimitRate: 1}, 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, srv := newServer(t, tt.opts)
			for i := range 5 {
				got := post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "m", "hi"))
				if got.status != tt.want {
					t.Fatalf("request %d: got status %d, want %d", i, got.status, tt.want)
				}
			}
		})
	}
}

// The same seed gives the same failures, on another server, after
// SetOptions and after Reset.
func TestSeedRepeats(t *testing.T) {
	t.Parallel()
	opts := mockup.Options{ErrorRate: 0.3, RateLimitRate: 0.3, Seed: 42}
	run := func(srv *httptest.Server) []int {
		var got []int
		for range 30 {
			got = append(got, post(t, srv.URL, "/v1/embeddings", bodyFor("/v1/embeddings", "m", "hi")).status)
		}
		return got
	}
	m, srv := newServer(t, opts)
	first := run(srv)
	for _, status := range []int{200, 429, 500} {
		if !slices.Contains(first, status) {
			t.Fatalf("got %v, want a mix of 200, 429 and 500", first)
		}
	}

	_, other := newServer(t, opts)
	if got := run(other); !slices.Equal(got, first) {
		t.Errorf("another server: got %v, want %v", got, first)
	}
	m.SetOptions(opts)
	if got := run(srv); !slices.Equal(got, first) {
		t.Errorf("after SetOptions: got %v, want %v", got, first)
	}
	m.Reset()
	if got := run(srv); !slices.Equal(got, first) {
		t.Errorf("after Reset: got %v, want %v", got, first)
	}
}

func TestOptionsEndpoint(t *testing.T) {
	t.Parallel()
	m, srv := newServer(t, mockup.Options{Seed: 7})

	r := send(t, srv.URL, http.MethodPost, "/mock/options", `{"rate_limit_rate":1,"retry_after":"1.5s"}`, nil)
	want := `{"latency":"0s","error_rate":0,"rate_limit_rate":1,"retry_after":"1.5s","seed":7,"region":"us-east-1","batch_delay":"0s","record":false,"rpm":0,"tpm":0,"rate_window":"1m0s","revoked_keys":null}`
	if r.status != 200 || strings.TrimSpace(string(r.body)) != want {
		t.Errorf("POST /mock/options: got %d %s, want 200 %s", r.status, r.body, want)
	}
	if got := send(t, srv.URL, http.MethodGet, "/mock/options", "", nil); strings.TrimSpace(string(got.body)) != want {
		t.Errorf("GET /mock/options: got %s, want %s", got.body, want)
	}

	got := post(t, srv.URL, "/v1/chat/completions", bodyFor("/v1/chat/completions", "m", "hi"))
	if got.status != 429 || got.header.Get("Retry-After") != "1.5" || got.header.Get("retry-after-ms") != "1500" {
		t.Errorf("got status %d Retry-After %q retry-after-ms %q, want 429 1.5 1500",
			got.status, got.header.Get("Retry-After"), got.header.Get("retry-after-ms"))
	}

	for _, bad := range []string{
		`{"error_rate":2}`,
		`{"rate_limit_rate":-0.1}`,
		`{"latency":"fast"}`,
		`{"latency":250}`,
		`{"retry_after":"-1s"}`,
		`{"rpm":-1}`,
		`{"rate_window":"1"}`,
		`{"errorRate":0.1}`,
		`not json`,
	} {
		r := send(t, srv.URL, http.MethodPost, "/mock/options", bad, nil)
		if r.status != 400 {
			t.Errorf("POST /mock/options %s: got status %d, want 400", bad, r.status)
		}
	}
	if got, want := m.Stats().ByStatus, map[int]int64{429: 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("got statuses %v, want %v", got, want)
	}
	if got := send(t, srv.URL, http.MethodGet, "/mock/options", "", nil); strings.TrimSpace(string(got.body)) != want {
		t.Errorf("after rejected updates, GET /mock/options: got %s, want %s", got.body, want)
	}
}

func TestControlRoutes(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	tests := []struct {
		method, path string
		want         int
	}{
		{"GET", "/mock/stats", 200},
		{"POST", "/mock/stats", 405},
		{"GET", "/mock/reset", 405},
		{"GET", "/mock/nope", 404},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			if got := send(t, srv.URL, tt.method, tt.path, "", nil); got.status != tt.want {
				t.Errorf("got status %d, want %d", got.status, tt.want)
			}
		})
	}
}

// Every endpoint a batch row may name has a route in the mock, so a batch
// of any endpoint runs locally.
func TestEveryEndpointAnswered(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	for _, e := range endpoint.All {
		t.Run(e.Path, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest("POST", srv.URL+e.Path, strings.NewReader(`{"model":"m","input":"hi","prompt":"hi","messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer k")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("got %d %s, want 200", res.StatusCode, body)
			}
		})
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
