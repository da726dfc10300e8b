package provider

import (
	"bytes"
	"context"
	"net/http"
	"strings"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/inference"
)

// openAIAPI is OpenAI's API and any upstream that copies it: a base URL
// ending in /v1 (internal/config) and a bearer key.
type openAIAPI struct{}

func (openAIAPI) request(ctx context.Context, m config.Model, ep string, payload []byte) (*http.Request, error) {
	url := strings.TrimSuffix(m.BaseURL, "/") + strings.TrimPrefix(ep, "/v1")
	return jsonRequest(ctx, url, payload)
}

func (openAIAPI) authenticate(_ context.Context, req *http.Request, _ config.Model, key string) error {
	// A bearer with no token is malformed; an upstream that needs no key
	// (the local mock) is better served by no header at all.
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return nil
}

func (openAIAPI) classify(_ config.Model, _ string, status int, _ http.Header, body []byte) ([]byte, bool) {
	return body, Transient(status, nil)
}

func (openAIAPI) usage(ep string, _ http.Header, body []byte) inference.Usage {
	return UsageOf(ep, body)
}

// jsonRequest is a POST of a JSON payload to url.
func jsonRequest(ctx context.Context, url string, payload []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	return req, nil
}
