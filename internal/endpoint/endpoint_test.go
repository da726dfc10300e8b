package endpoint

import (
	"slices"
	"testing"

	"github.com/relaybatch/relay/internal/config"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	if e, ok := Lookup("/v1/messages"); !ok || e.Shape != config.Anthropic || e.Usage != AnthropicUsage || e.OpenAIBatch {
		t.Fatalf("/v1/messages = %+v, %v", e, ok)
	}
	if e, ok := Lookup(Chat); !ok || e.Shape != config.OpenAI || e.Usage != PromptCompletion {
		t.Fatalf("%s = %+v, %v", Chat, e, ok)
	}
	if _, ok := Lookup("/v1/nope"); ok {
		t.Fatal("an unknown path was found")
	}
	openAI := Paths(func(e Endpoint) bool { return e.OpenAIBatch })
	want := []string{Chat, "/v1/embeddings", "/v1/responses", "/v1/completions", "/v1/moderations", "/v1/images/generations"}
	if !slices.Equal(openAI, want) {
		t.Fatalf("OpenAI batch endpoints = %v, want %v", openAI, want)
	}
	if len(Paths(nil)) != len(All) {
		t.Fatal("Paths(nil) must list every endpoint")
	}
}

func TestOpenAIErrorType(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]string{400: "invalid_request_error", 404: "invalid_request_error", 429: "requests", 500: "server_error", 503: "server_error"} {
		if got := OpenAIErrorType(status); got != want {
			t.Errorf("OpenAIErrorType(%d) = %q, want %q", status, got, want)
		}
	}
}
