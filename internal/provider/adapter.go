package provider

import (
	"context"
	"net/http"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/inference"
)

// adapter is one kind of upstream (a model's provider). The Client owns
// routing, retries and fallback; an adapter owns what differs between
// upstreams. Which endpoints each one serves is in the endpoint registry
// (internal/endpoint); adding an upstream is one adapter and a config value.
type adapter interface {
	// request builds the call for a row of ep on m; payload is the row's
	// body naming the upstream model.
	request(ctx context.Context, m config.Model, ep string, payload []byte) (*http.Request, error)
	// authenticate adds credentials to req: key is the model's api_key_env
	// value, "" when it has none.
	authenticate(ctx context.Context, req *http.Request, m config.Model, key string) error
	// classify reads an answer: the body to report, in the row's shape,
	// and whether the failure it reports is worth retrying.
	classify(m config.Model, ep string, status int, header http.Header, body []byte) (out []byte, transient bool)
	// usage reads the token usage of an answer's (classified) body.
	usage(ep string, header http.Header, body []byte) inference.Usage
}

// adapterFor is the adapter of m's provider.
func (c *Client) adapterFor(m config.Model) adapter {
	switch m.Provider {
	case config.Anthropic:
		return anthropicAPI{}
	case config.Bedrock:
		return bedrock{credentials: c.Credentials}
	}
	return openAIAPI{}
}

// served reports whether m's provider serves ep.
func served(m config.Model, ep string) bool {
	e, ok := endpoint.Lookup(ep)
	return ok && e.Serves(m.Provider)
}
