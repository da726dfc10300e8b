package provider

import (
	"context"
	"net/http"
	"strings"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/inference"
)

// anthropicAPI is Anthropic's API: a base URL without /v1
// (internal/config), anthropic-version and x-api-key.
type anthropicAPI struct{}

func (anthropicAPI) request(ctx context.Context, m config.Model, ep string, payload []byte) (*http.Request, error) {
	req, err := jsonRequest(ctx, strings.TrimSuffix(m.BaseURL, "/")+ep, payload)
	if err == nil {
		req.Header.Set("anthropic-version", anthropicVersion)
		AnthropicOf(ctx).SetHeaders(req.Header)
	}
	return req, err
}

// Anthropic is what a message batch's create asked of its rows' upstream
// calls (docs/api.md "Anthropic Message Batches"): the betas of its
// anthropic-beta header and its anthropic-user-profile-id.
type Anthropic struct {
	Betas       []string
	UserProfile string
}

type anthropicKey struct{}

// WithAnthropic marks ctx as a message batch's: the Anthropic-shaped
// upstream requests made with it carry a's betas and user profile.
func WithAnthropic(ctx context.Context, a Anthropic) context.Context {
	if len(a.Betas) == 0 && a.UserProfile == "" {
		return ctx
	}
	return context.WithValue(ctx, anthropicKey{}, a)
}

// AnthropicOf is what WithAnthropic put in ctx.
func AnthropicOf(ctx context.Context) Anthropic {
	a, _ := ctx.Value(anthropicKey{}).(Anthropic)
	return a
}

// SetHeaders sets a's headers on a request to Anthropic's API.
func (a Anthropic) SetHeaders(h http.Header) {
	if len(a.Betas) > 0 {
		h.Set("anthropic-beta", strings.Join(a.Betas, ","))
	}
	if a.UserProfile != "" {
		h.Set("anthropic-user-profile-id", a.UserProfile)
	}
}

func (anthropicAPI) authenticate(_ context.Context, req *http.Request, _ config.Model, key string) error {
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	return nil
}

func (anthropicAPI) classify(_ config.Model, _ string, status int, _ http.Header, body []byte) ([]byte, bool) {
	return body, Transient(status, nil)
}

func (anthropicAPI) usage(ep string, _ http.Header, body []byte) inference.Usage {
	return UsageOf(ep, body)
}
