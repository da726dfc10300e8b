package config

import (
	"os"
	"strings"
	"testing"
)

func TestParseModels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"ok", "models:\n- {name: a, provider: openai, base_url: http://x/v1}\n", ""},
		{"no models", "models: []\n", "at least one model"},
		{"bad provider", "models:\n- {name: a, provider: foo, base_url: http://x/v1}\n", "models[0].provider"},
		{"bad url", "models:\n- {name: a, provider: openai, base_url: ftp://x}\n", "models[0].base_url"},
		{"dup", "models:\n- {name: a, provider: openai, base_url: http://x/v1}\n- {name: a, provider: openai, base_url: http://x/v1}\n", "defined twice"},
		{"unknown fallback", "models:\n- {name: a, provider: openai, base_url: http://x/v1, fallback: b}\n", "models[0].fallback"},
		{"unknown field", "models:\n- {name: a, provider: openai, base_url: http://x/v1, colour: red}\n", "colour"},
		// Base URLs as each provider's SDKs take them; the other form is
		// refused with the URL to write instead.
		{"anthropic as its SDK takes it", "models:\n- {name: a, provider: anthropic, base_url: https://api.anthropic.com}\n", ""},
		{"anthropic with a path", "models:\n- {name: a, provider: anthropic, base_url: https://bedrock-runtime.us-east-1.amazonaws.com/anthropic/}\n", ""},
		{"anthropic with /v1", "models:\n- {name: a, provider: anthropic, base_url: https://api.anthropic.com/v1}\n", `write "https://api.anthropic.com"`},
		{"anthropic with /v1/", "models:\n- {name: a, provider: anthropic, base_url: http://x/v1/}\n", `write "http://x"`},
		{"anthropic with /v1/messages", "models:\n- {name: a, provider: anthropic, base_url: http://x/v1/messages}\n", `write "http://x"`},
		{"openai without /v1", "models:\n- {name: a, provider: openai, base_url: https://api.openai.com}\n", `write "https://api.openai.com/v1"`},
		{"openai with an endpoint", "models:\n- {name: a, provider: openai, base_url: http://x/v1/chat/completions}\n", `write "http://x/v1"`},
		{"native openai", "models:\n- {name: a, provider: openai, base_url: http://x/v1, batch: native}\n", ""},
		{"native anthropic", "models:\n- {name: a, provider: anthropic, base_url: http://x, batch: native}\n", ""},
		{"bad batch", "models:\n- {name: a, provider: openai, base_url: http://x/v1, batch: half}\n", "models[0].batch"},
		{"native bedrock", "models:\n- {name: a, provider: bedrock, base_url: http://x, batch: native}\n", "provider \"bedrock\" has none yet"},
		// A quote's tokenizer and latency (docs/api.md "Quotes").
		{"tokenizer", "models:\n- {name: a, provider: openai, base_url: http://x/v1, tokenizer: cl100k_base, latency: 1s}\n", ""},
		{"bad tokenizer", "models:\n- {name: a, provider: openai, base_url: http://x/v1, tokenizer: gpt2}\n", "models[0].tokenizer"},
		{"bad latency", "models:\n- {name: a, provider: openai, base_url: http://x/v1, latency: -1s}\n", "models[0].latency"},
		{"openai with a query", "models:\n- {name: a, provider: openai, base_url: http://x/v1?a=b}\n", "query"},
		// The model /v1/moderations rows without body.model get
		// (docs/api.md "Batches"): a configured OpenAI model.
		{"moderation model", "moderation_model: m\nmodels:\n- {name: m, provider: openai, base_url: http://x/v1}\n", ""},
		{"unknown moderation model", "moderation_model: b\nmodels:\n- {name: a, provider: openai, base_url: http://x/v1}\n", "moderation_model: \"b\" is not a configured model"},
		{"anthropic moderation model", "moderation_model: a\nmodels:\n- {name: a, provider: anthropic, base_url: http://x}\n", "moderation_model: \"a\" has provider anthropic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseModels([]byte(tt.yaml))
			if tt.wantErr == "" && err != nil {
				t.Fatalf("got %v, want no error", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRepoModelsFile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := ParseModels(data)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := ms.Lookup("gpt-4o-mini")
	if !ok || m.MaxConcurrency != 32 || m.Fallback == "" {
		t.Fatalf("gpt-4o-mini: got %+v", m)
	}
}

// The default models file is all on this machine (the mock provider); the
// example for AWS is not, and parses.
func TestModelsOnThisMachine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file string
		want int // models on this machine; -1: all of them
	}{{"../../relay.yaml", -1}, {"../../relay.aws.example.yaml", 0}} {
		ms, err := LoadModels(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		want := tt.want
		if want < 0 {
			want = len(ms.Models)
		}
		if got := ms.OnThisMachine(); len(got) != want {
			t.Errorf("%s: on this machine %q, want %d of %d models", tt.file, got, want, len(ms.Models))
		}
	}
	ms, err := ParseModels([]byte("models:\n" +
		"- {name: a, provider: openai, base_url: http://localhost:8090/v1}\n" +
		"- {name: b, provider: openai, base_url: 'http://[::1]/v1'}\n" +
		"- {name: c, provider: openai, base_url: http://127.1.2.3/v1}\n" +
		"- {name: d, provider: openai, base_url: https://api.openai.com/v1}\n" +
		"- {name: e, provider: openai, base_url: http://10.0.0.5/v1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := ms.OnThisMachine(); strings.Join(got, ",") != "a,b,c" {
		t.Errorf("on this machine: %q, want a, b and c", got)
	}
}

// A model without a tokenizer counts with OpenAI's BPE when it takes
// OpenAI's shape and with the bytes estimate otherwise.
func TestDefaultTokenizer(t *testing.T) {
	t.Parallel()
	ms, err := ParseModels([]byte("models:\n- {name: a, provider: openai, base_url: http://x/v1}\n- {name: b, provider: anthropic, base_url: http://x}\n" +
		"- {name: c, provider: bedrock, shape: openai, region: us-east-1, upstream_model: openai.gpt-oss-120b-1:0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]Tokenizer{"a": TokensO200k, "b": TokensBytes, "c": TokensO200k} {
		if m, _ := ms.Lookup(name); m.Tokenizer != want {
			t.Errorf("%s: tokenizer %q, want %q", name, m.Tokenizer, want)
		}
	}
}
