package provider

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/tidwall/gjson"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/mockup"
)

// bedrockClient calls Bedrock models at base, signing with static
// credentials; claude-key is the same Claude model with an API key.
func bedrockClient(t *testing.T, base string, s *sleeps) *Client {
	t.Helper()
	ms, err := config.ParseModels([]byte(strings.ReplaceAll(`
models:
  - {name: claude, provider: bedrock, shape: anthropic, region: us-east-1, base_url: BASE, upstream_model: "anthropic.claude-haiku-4-5-20251001-v1:0"}
  - {name: claude-key, provider: bedrock, shape: anthropic, region: us-east-1, base_url: BASE, upstream_model: "anthropic.claude-haiku-4-5-20251001-v1:0", api_key_env: BEDROCK_KEY}
  - {name: gpt-oss, provider: bedrock, shape: openai, region: us-east-1, base_url: BASE, upstream_model: "openai.gpt-oss-120b-1:0"}
  - {name: claude-eu, provider: bedrock, shape: anthropic, region: eu-west-1, base_url: BASE, upstream_model: "eu.anthropic.claude-haiku-4-5-20251001-v1:0", regions: [eu-west-1, eu-central-1]}
`, "BASE", base)))
	if err != nil {
		t.Fatal(err)
	}
	return &Client{
		Models:      ms,
		Keys:        mapKeys{"BEDROCK_KEY": "bedrock-api-key"},
		Policy:      Policy{Sleep: s.Sleep},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "session"),
	}
}

const (
	claudeRow = `{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":"%s"}]}`
	chatRow   = `{"model":"gpt-oss","messages":[{"role":"user","content":"%s"}]}`
)

func row(format, text string) json.RawMessage {
	return json.RawMessage(strings.Replace(format, "%s", text, 1))
}

// Rows keep their shape on Bedrock: a Claude row goes to InvokeModel, a
// chat row to Bedrock's Chat Completions, both signed (the mock refuses
// them otherwise), with usage counted and throttling retried.
func TestBedrock(t *testing.T) {
	t.Parallel()
	mock := mockup.New(mockup.Options{})
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)

	tests := []struct {
		name, endpoint string
		body           json.RawMessage
		wantStatus     int
		wantAttempts   int
		wantUsage      inference.Usage
		wantBody       string // a substring
	}{
		{"claude", "/v1/messages", row(claudeRow, "two words"), 200, 1, inference.Usage{InputTokens: 3, OutputTokens: 3, TotalTokens: 6}, `"model":"anthropic.claude-haiku-4-5-20251001-v1:0"`},
		{"claude with an API key", "/v1/messages", json.RawMessage(strings.Replace(string(row(claudeRow, "key")), `"claude"`, `"claude-key"`, 1)), 200, 1, inference.Usage{InputTokens: 2, OutputTokens: 2, TotalTokens: 4}, `"type":"message"`},
		{"chat", "/v1/chat/completions", row(chatRow, "two words"), 200, 1, inference.Usage{InputTokens: 3, OutputTokens: 3, TotalTokens: 6, CachedTokens: 1, ReasoningTokens: 1}, `"model":"openai.gpt-oss-120b-1:0"`},
		{"throttled, retried", "/v1/messages", row(claudeRow, "[[mock:429x=2]] claude"), 200, 3, inference.Usage{InputTokens: 3, OutputTokens: 3, TotalTokens: 6}, `"type":"message"`},
		{"unavailable, retried", "/v1/chat/completions", row(chatRow, "[[mock:fail=1]] chat"), 200, 2, inference.Usage{InputTokens: 3, OutputTokens: 3, TotalTokens: 6, CachedTokens: 1, ReasoningTokens: 1}, `"chat.completion"`},
		{"validation is the row's 400", "/v1/messages", row(claudeRow, "[[mock:400]]"), 400, 1, inference.Usage{}, `"message":"ValidationException: `},
		{"access denied names the permission", "/v1/messages", row(claudeRow, "[[mock:403]]"), 403, 1, inference.Usage{}, `bedrock:InvokeModel on arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0`},
		{"chat error in OpenAI's shape", "/v1/chat/completions", row(chatRow, "[[mock:400]]"), 400, 1, inference.Usage{}, `"code":"ValidationException"`},
		{"signed for another region", "/v1/messages", json.RawMessage(strings.Replace(string(row(claudeRow, "eu")), `"claude"`, `"claude-eu"`, 1)), 403, 1, inference.Usage{}, `InvalidSignatureException: Credential should be scoped to a valid region`},
		{"embeddings are not served", "/v1/embeddings", json.RawMessage(`{"model":"gpt-oss","input":"x"}`), 0, 0, inference.Usage{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := bedrockClient(t, srv.URL, &sleeps{})
			got := c.Do(context.Background(), tt.endpoint, tt.body, Route{})
			if got.StatusCode != tt.wantStatus || got.Attempts != tt.wantAttempts || got.Usage != tt.wantUsage || !strings.Contains(string(got.Body), tt.wantBody) {
				t.Errorf("got %d after %d attempts, usage %+v, body %s (%s %s);\nwant %d after %d, usage %+v, body with %s",
					got.StatusCode, got.Attempts, got.Usage, got.Body, got.ErrCode, got.ErrMessage, tt.wantStatus, tt.wantAttempts, tt.wantUsage, tt.wantBody)
			}
			if tt.endpoint == "/v1/messages" && got.StatusCode >= 400 && gjson.GetBytes(got.Body, "type").Str != "error" {
				t.Errorf("got %s, want an error in Anthropic's shape", got.Body)
			}
			if tt.wantStatus == 0 && got.ErrCode != inference.CodeCrossShapeDispatch {
				t.Errorf("got code %q, want %s", got.ErrCode, inference.CodeCrossShapeDispatch)
			}
		})
	}
}

// Without credentials and without a key, a Bedrock row cannot be signed:
// it fails at once, never sent unsigned.
func TestBedrockWithoutCredentials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("an unsigned request was sent: %s %s", r.Method, r.URL)
	}))
	t.Cleanup(srv.Close)
	c := bedrockClient(t, srv.URL, &sleeps{})
	c.Credentials = nil
	got := c.Do(context.Background(), "/v1/messages", row(claudeRow, "hi"), Route{})
	if got.ErrCode != inference.CodeAPIKeyUnavailable || got.Attempts != 1 {
		t.Errorf("got %q %q after %d attempts, want %s after 1", got.ErrCode, got.ErrMessage, got.Attempts, inference.CodeAPIKeyUnavailable)
	}
}

// A Bedrock answer whose body has no usage is counted from Bedrock's token
// count headers; the row's request id is Bedrock's.
func TestBedrockUsageFromHeaders(t *testing.T) {
	t.Parallel()
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.EscapedPath()
		w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", "11")
		w.Header().Set("X-Amzn-Bedrock-Output-Token-Count", "7")
		w.Header().Set("x-amzn-RequestId", "bedrock-req")
		w.Write([]byte(`{"id":"msg_1","type":"message","content":[]}`))
	}))
	t.Cleanup(srv.Close)
	got := bedrockClient(t, srv.URL, &sleeps{}).Do(context.Background(), "/v1/messages", row(claudeRow, "hi"), Route{})
	if want := (inference.Usage{InputTokens: 11, OutputTokens: 7, TotalTokens: 18}); got.Usage != want || got.RequestID != "bedrock-req" {
		t.Errorf("got usage %+v, request id %q; want %+v, bedrock-req", got.Usage, got.RequestID, want)
	}
	if want := "/model/anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke"; path != want {
		t.Errorf("got path %s, want %s", path, want)
	}
}

// InvokeModel's body is the row's without the model, with Bedrock's
// anthropic_version.
func TestBedrockInvokeBody(t *testing.T) {
	t.Parallel()
	m, _ := bedrockClient(t, "http://x", &sleeps{}).Models.Lookup("claude")
	req, err := bedrock{}.request(context.Background(), m, "/v1/messages", []byte(`{"model":"anthropic.x","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := req.GetBody()
	var buf strings.Builder
	_, _ = io.Copy(&buf, b)
	if got := buf.String(); gjson.Get(got, "model").Exists() || gjson.Get(got, "anthropic_version").Str != "bedrock-2023-05-31" {
		t.Errorf("got body %s", got)
	}
	var _ aws.CredentialsProvider = credentials.StaticCredentialsProvider{}
}

// TestAnthropicBetasUpstream: a message batch's betas go to Anthropic's API
// as its anthropic-beta header (with the user profile's header) and to
// Bedrock as anthropic_beta in the body, as each takes them.
func TestAnthropicBetasUpstream(t *testing.T) {
	t.Parallel()
	ctx := WithAnthropic(context.Background(), Anthropic{Betas: []string{"a-1", "b-2"}, UserProfile: "up_1"})
	m, _ := bedrockClient(t, "http://x", &sleeps{}).Models.Lookup("claude")
	req, err := bedrock{}.request(ctx, m, "/v1/messages", []byte(`{"model":"anthropic.x","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := req.GetBody()
	var buf strings.Builder
	_, _ = io.Copy(&buf, b)
	if got := gjson.Get(buf.String(), "anthropic_beta").Raw; got != `["a-1","b-2"]` {
		t.Errorf("bedrock body's anthropic_beta %s, want [\"a-1\",\"b-2\"]", got)
	}
	req, err = anthropicAPI{}.request(ctx, config.Model{BaseURL: "http://x"}, "/v1/messages", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Header.Get("anthropic-beta") != "a-1,b-2" || req.Header.Get("anthropic-user-profile-id") != "up_1" {
		t.Errorf("anthropic headers %v", req.Header)
	}
}
