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
		{"openai with a query", "models:\n- {name: a, provider: openai, base_url: http://x/v1?a=b}\n", "query"},
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
