package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/inference"
)

// bedrock is Amazon Bedrock's runtime (README "Amazon Bedrock"). Rows keep
// their shape: anthropic-shaped rows go to InvokeModel with the Anthropic
// body Bedrock takes, openai-shaped ones to Bedrock's Chat Completions.
// Requests are signed with SigV4 by the SDK's signer from the function's
// own credentials, or carry a Bedrock API key as a bearer token when the
// model has an api_key_env.
type bedrock struct {
	credentials aws.CredentialsProvider
}

const (
	// bedrockService is the SigV4 signing name of bedrock-runtime.
	bedrockService = "bedrock"
	// bedrockAnthropicVersion is the anthropic_version InvokeModel takes
	// in place of the anthropic-version header.
	bedrockAnthropicVersion = "bedrock-2023-05-31"
)

// signer is safe for concurrent use; it caches derived signing keys.
var signer = v4.NewSigner()

func (bedrock) request(ctx context.Context, m config.Model, ep string, payload []byte) (*http.Request, error) {
	base := strings.TrimSuffix(m.BaseURL, "/")
	if m.Shape == config.OpenAI {
		return jsonRequest(ctx, base+"/openai"+ep, payload)
	}
	// InvokeModel names the model in its path and refuses it in the body.
	body, err := sjson.DeleteBytes(payload, "model")
	if err == nil {
		body, err = sjson.SetBytes(body, "anthropic_version", bedrockAnthropicVersion)
	}
	if betas := AnthropicOf(ctx).Betas; err == nil && len(betas) > 0 {
		// Bedrock takes a batch's betas in the body.
		body, err = sjson.SetBytes(body, "anthropic_beta", betas)
	}
	if err != nil {
		return nil, err
	}
	// A model id has a colon (…-v1:0), which the SDK sends escaped.
	id := strings.ReplaceAll(url.PathEscape(m.Upstream()), ":", "%3A")
	return jsonRequest(ctx, base+"/model/"+id+"/invoke", body)
}

func (b bedrock) authenticate(ctx context.Context, req *http.Request, m config.Model, key string) error {
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
		return nil
	}
	if b.credentials == nil {
		return errors.New("no AWS credentials to sign the request with")
	}
	creds, err := b.credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("retrieve AWS credentials: %w", err)
	}
	body, err := req.GetBody()
	if err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(h, body); err != nil {
		return err
	}
	return signer.SignHTTP(ctx, creds, req, hex.EncodeToString(h.Sum(nil)), bedrockService, m.Region, time.Now())
}

// bedrockTransient are Bedrock's exceptions that clear on retry, whatever
// status they come with.
var bedrockTransient = []string{
	"ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException",
	"InternalServerException", "ModelTimeoutException",
}

func (bedrock) classify(m config.Model, _ string, status int, header http.Header, body []byte) ([]byte, bool) {
	if status >= 200 && status < 300 {
		return body, false
	}
	typ := bedrockErrorType(header, body)
	transient := Transient(status, nil) || slices.Contains(bedrockTransient, typ)
	msg := firstString(body, "message", "Message", "error.message")
	if msg == "" {
		msg = http.StatusText(status)
	}
	if typ == "AccessDeniedException" {
		msg = fmt.Sprintf("%s (the function's role needs bedrock:InvokeModel on %s, and the model needs access granted in the Bedrock console)",
			msg, strings.Join(m.BedrockARNs(config.Partition(m.Region), "<account>"), ", "))
	}
	if typ != "" {
		msg = typ + ": " + msg
	}
	if m.Shape == config.Anthropic {
		b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": wire.ErrorType(status), "message": msg}})
		return b, transient
	}
	if gjson.GetBytes(body, "error.message").Exists() {
		return body, transient // already OpenAI's error shape
	}
	var code any
	if typ != "" {
		code = typ
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": endpoint.OpenAIErrorType(status), "param": nil, "code": code}})
	return b, transient
}

// bedrockErrorType is the exception name of an error answer: AWS's
// x-amzn-ErrorType header ("ThrottlingException:http://…"), else the
// body's __type.
func bedrockErrorType(header http.Header, body []byte) string {
	v := header.Get("x-amzn-ErrorType")
	if v == "" {
		v = gjson.GetBytes(body, "__type").Str
	}
	v, _, _ = strings.Cut(v, ":")
	if i := strings.LastIndexByte(v, '#'); i >= 0 {
		v = v[i+1:]
	}
	return v
}

func firstString(body []byte, paths ...string) string {
	for _, p := range paths {
		if v := gjson.GetBytes(body, p); v.Type == gjson.String && v.Str != "" {
			return v.Str
		}
	}
	return ""
}

// usage reads the body's usage; an answer without one (a model whose body
// has none) is counted from Bedrock's token count headers.
func (bedrock) usage(ep string, header http.Header, body []byte) inference.Usage {
	u := UsageOf(ep, body)
	if u.InputTokens != 0 || u.OutputTokens != 0 {
		return u
	}
	in, _ := strconv.ParseInt(header.Get("X-Amzn-Bedrock-Input-Token-Count"), 10, 64)
	out, _ := strconv.ParseInt(header.Get("X-Amzn-Bedrock-Output-Token-Count"), 10, 64)
	return inference.Usage{InputTokens: in, OutputTokens: out, TotalTokens: in + out}
}
