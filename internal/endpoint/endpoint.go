// Package endpoint is the one registry of the upstream APIs a batch row may
// call: each path with the request shape it takes and how its answers
// report token usage. Validation (internal/jsonl, internal/batches),
// routing and usage (internal/provider) read it; adding an endpoint is one
// line here (docs/api.md "Batches").
package endpoint

import (
	"net/http"
	"slices"

	"github.com/relaybatch/relay/internal/config"
)

// Usage is how an endpoint's answers report tokens.
type Usage int

const (
	// PromptCompletion: usage.prompt_tokens and usage.completion_tokens.
	PromptCompletion Usage = iota
	// InputOutput: usage.input_tokens and usage.output_tokens.
	InputOutput
	// AnthropicUsage: input_tokens plus the cache's creation and read
	// tokens (which Anthropic leaves out of input_tokens), output_tokens.
	AnthropicUsage
	// NoUsage: the answers carry no token usage (moderations).
	NoUsage
)

// Endpoint is one upstream API.
type Endpoint struct {
	Path  string
	Shape config.Provider // the request shape it takes
	Usage Usage
	// OpenAIBatch: an OpenAI batch may name it; /v1/messages rows come
	// from Anthropic message batches (and from input files naming it).
	OpenAIBatch bool
	// Upstreams are the providers that serve it (internal/provider has
	// one adapter each): Bedrock takes chat completions and messages only.
	Upstreams []config.Provider
}

// Serves reports whether provider p serves the endpoint.
func (e Endpoint) Serves(p config.Provider) bool { return slices.Contains(e.Upstreams, p) }

var (
	openAIOnly  = []config.Provider{config.OpenAI}
	withBedrock = func(p config.Provider) []config.Provider { return []config.Provider{p, config.Bedrock} }
)

// Chat is the chat completions endpoint, the one workflow steps call.
const Chat = "/v1/chat/completions"

// Moderations is the endpoint whose rows may leave out body.model
// (DefaultModel).
const Moderations = "/v1/moderations"

// DefaultModel is the model a row of the endpoint at path gets when its
// body names none: the models file's moderation_model for /v1/moderations,
// as OpenAI's moderations API defaults it; "" for every other endpoint, or
// when none is configured (docs/api.md "Batches").
func DefaultModel(ms *config.Models, path string) string {
	if path == Moderations {
		return ms.ModerationModel
	}
	return ""
}

// Messages is the endpoint of Anthropic Message Batches (docs/api.md
// "Anthropic Message Batches"): their input has Anthropic's limits, and
// internal/anthropic writes it as the url of their rows.
const Messages = "/v1/messages"

// All is every endpoint, in the order messages list them. The OpenAI ones
// are the batch endpoints of OpenAI's API that take a JSON body; its
// /v1/images/edits and /v1/videos take multipart forms upstream and are
// not among them (docs/api.md "Known gaps").
var All = []Endpoint{
	{Path: Chat, Shape: config.OpenAI, Usage: PromptCompletion, OpenAIBatch: true, Upstreams: withBedrock(config.OpenAI)},
	{Path: "/v1/embeddings", Shape: config.OpenAI, Usage: PromptCompletion, OpenAIBatch: true, Upstreams: openAIOnly},
	{Path: "/v1/responses", Shape: config.OpenAI, Usage: InputOutput, OpenAIBatch: true, Upstreams: openAIOnly},
	{Path: "/v1/completions", Shape: config.OpenAI, Usage: PromptCompletion, OpenAIBatch: true, Upstreams: openAIOnly},
	{Path: Moderations, Shape: config.OpenAI, Usage: NoUsage, OpenAIBatch: true, Upstreams: openAIOnly},
	{Path: "/v1/images/generations", Shape: config.OpenAI, Usage: InputOutput, OpenAIBatch: true, Upstreams: openAIOnly},
	{Path: Messages, Shape: config.Anthropic, Usage: AnthropicUsage, Upstreams: withBedrock(config.Anthropic)},
}

// Lookup returns the endpoint at path.
func Lookup(path string) (Endpoint, bool) {
	i := slices.IndexFunc(All, func(e Endpoint) bool { return e.Path == path })
	if i < 0 {
		return Endpoint{}, false
	}
	return All[i], true
}

// Paths lists the paths of every endpoint, or of those keep accepts.
func Paths(keep func(Endpoint) bool) []string {
	var out []string
	for _, e := range All {
		if keep == nil || keep(e) {
			out = append(out, e.Path)
		}
	}
	return out
}

// OpenAIErrorType is the type of an OpenAI error body for an HTTP status,
// as OpenAI's API sends it: the provider gives it to an error it translates
// into OpenAI's shape (a Bedrock answer), and internal/mockup answers with it.
func OpenAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}
