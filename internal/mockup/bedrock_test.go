package mockup_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/relaybatch/relay/internal/mockup"
)

const (
	invokePath   = "/model/anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke"
	invokeBody   = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":10,"messages":[{"role":"user","content":"hello there"}]}`
	bedrockChat  = "/openai/v1/chat/completions"
	bedrockChatB = `{"model":"openai.gpt-oss-120b-1:0","messages":[{"role":"user","content":"hello there"}]}`
)

// signed sends body to path signed by the SDK's SigV4 signer for service
// in region, after edit (if any) has changed the signed request.
func signed(t *testing.T, base, path, body, service, region string, edit func(*http.Request)) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", SessionToken: "session"}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), service, region, time.Now()); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// The Bedrock routes answer requests signed for the mock's region and
// service bedrock, or carrying an API key, and refuse anything else the
// way Bedrock does: 403 with the exception in x-amzn-ErrorType.
func TestBedrockAuthentication(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{Region: "eu-west-1"})
	tests := []struct {
		name     string
		send     func() reply
		want     int
		wantType string
	}{
		{"unsigned", func() reply { return send(t, srv.URL, "POST", invokePath, invokeBody, nil) }, 403, "MissingAuthenticationTokenException"},
		{"unsigned chat", func() reply { return send(t, srv.URL, "POST", bedrockChat, bedrockChatB, nil) }, 403, "MissingAuthenticationTokenException"},
		{"signed", func() reply { return signed(t, srv.URL, invokePath, invokeBody, "bedrock", "eu-west-1", nil) }, 200, ""},
		{"signed chat", func() reply { return signed(t, srv.URL, bedrockChat, bedrockChatB, "bedrock", "eu-west-1", nil) }, 200, ""},
		{"api key", func() reply {
			return send(t, srv.URL, "POST", invokePath, invokeBody, http.Header{"Authorization": {"Bearer bedrock-api-key"}})
		}, 200, ""},
		{"another region", func() reply { return signed(t, srv.URL, invokePath, invokeBody, "bedrock", "us-east-1", nil) }, 403, "InvalidSignatureException"},
		{"another service", func() reply { return signed(t, srv.URL, invokePath, invokeBody, "s3", "eu-west-1", nil) }, 403, "InvalidSignatureException"},
		{"unsigned header", func() reply {
			return signed(t, srv.URL, invokePath, invokeBody, "bedrock", "eu-west-1", func(r *http.Request) { r.Header.Set("X-Amz-Target", "x") })
		}, 403, "IncompleteSignatureException"},
		{"date not signed", func() reply {
			return signed(t, srv.URL, invokePath, invokeBody, "bedrock", "eu-west-1", func(r *http.Request) {
				r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), ";x-amz-date", "", 1))
			})
		}, 403, "IncompleteSignatureException"},
		{"old", func() reply {
			return signed(t, srv.URL, invokePath, invokeBody, "bedrock", "eu-west-1", func(r *http.Request) {
				r.Header.Set("X-Amz-Date", time.Now().Add(-time.Hour).UTC().Format("20060102T150405Z"))
			})
		}, 403, "InvalidSignatureException"},
		{"bad signature", func() reply {
			return signed(t, srv.URL, invokePath, invokeBody, "bedrock", "eu-west-1", func(r *http.Request) {
				a := r.Header.Get("Authorization")
				r.Header.Set("Authorization", a[:strings.Index(a, "Signature=")]+"Signature=abc")
			})
		}, 403, "IncompleteSignatureException"},
		{"basic scheme", func() reply {
			return send(t, srv.URL, "POST", invokePath, invokeBody, http.Header{"Authorization": {"Basic eDp5"}})
		}, 403, "IncompleteSignatureException"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := tt.send()
			typ, _, _ := strings.Cut(r.header.Get("x-amzn-ErrorType"), ":")
			if r.status != tt.want || typ != tt.wantType {
				t.Errorf("got %d %q %s, want %d %q", r.status, typ, r.body, tt.want, tt.wantType)
			}
		})
	}
}

// InvokeModel answers a Claude message for the model in its path, with
// Bedrock's token count headers; Bedrock's own rules on the body are 400s.
func TestBedrockInvoke(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, mockup.Options{})
	r := signed(t, srv.URL, invokePath, invokeBody, "bedrock", "us-east-1", nil)
	var msg struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(r.body, &msg); err != nil || r.status != 200 || msg.Model != "anthropic.claude-haiku-4-5-20251001-v1:0" {
		t.Fatalf("got %d %s (%v), want a message from the model in the path", r.status, r.body, err)
	}
	if in, out := r.header.Get("X-Amzn-Bedrock-Input-Token-Count"), r.header.Get("X-Amzn-Bedrock-Output-Token-Count"); in != "3" || out != "3" {
		t.Errorf("token count headers %q/%q, want 3/3 (words plus one per message, words of the reply)", in, out)
	}
	for _, bad := range []string{
		`{"model":"x","anthropic_version":"bedrock-2023-05-31","max_tokens":1,"messages":[]}`,
		`{"anthropic_version":"2023-06-01","max_tokens":1,"messages":[]}`,
	} {
		r := signed(t, srv.URL, invokePath, bad, "bedrock", "us-east-1", nil)
		if typ := r.header.Get("x-amzn-ErrorType"); r.status != 400 || !strings.HasPrefix(typ, "ValidationException") || !strings.Contains(string(r.body), `"message"`) {
			t.Errorf("%s: got %d %q %s, want a 400 ValidationException", bad, r.status, typ, r.body)
		}
	}
	r = signed(t, srv.URL, bedrockChat, strings.Replace(bedrockChatB, "hello there", "[[mock:429]]", 1), "bedrock", "us-east-1", nil)
	if typ := r.header.Get("x-amzn-ErrorType"); r.status != 429 || !strings.HasPrefix(typ, "ThrottlingException") || r.header.Get("Retry-After") != "" {
		t.Errorf("got %d %q Retry-After %q, want a 429 ThrottlingException without Retry-After", r.status, typ, r.header.Get("Retry-After"))
	}
}
