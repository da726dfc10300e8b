package provider

import (
	"context"
	"net/http"
	"strings"

	"github.com/relaybatch/relay/internal/config"
)

// anthropicAPI is Anthropic's API: a base URL without /v1
// (internal/config), anthropic-version and x-api-key.
type anthropicAPI struct{}

func (anthropicAPI) request(ctx context.Context, m config.Model, ep string, payload []byte) (*http.Request, error) {
	req, err := jsonRequest(ctx, strings.TrimSuffix(m.BaseURL, "/")+ep, payload)
	if err == nil {
		req.Header.Set("anthropic-version", anthropicVersion)
	}
	return req, err
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

func (anthropicAPI) usage(ep string, _ http.Header, body []byte) Usage { return UsageOf(ep, body) }
