package config

import (
	"slices"
	"strings"
	"testing"
)

func TestBedrockModels(t *testing.T) {
	t.Parallel()
	const fm = "anthropic.claude-haiku-4-5-20251001-v1:0"
	tests := []struct {
		name    string
		model   string
		wantErr string
		wantARN []string
	}{
		{"foundation model", `{name: a, provider: bedrock, shape: anthropic, region: us-east-1, upstream_model: "` + fm + `"}`, "",
			[]string{"arn:aws:bedrock:us-east-1::foundation-model/" + fm}},
		{"geographic profile", `{name: a, provider: bedrock, shape: anthropic, region: us-east-1, upstream_model: "us.` + fm + `", regions: [us-east-1, us-east-2, us-west-2]}`, "",
			[]string{"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us." + fm, "arn:aws:bedrock:us-east-1::foundation-model/" + fm,
				"arn:aws:bedrock:us-east-2::foundation-model/" + fm, "arn:aws:bedrock:us-west-2::foundation-model/" + fm}},
		{"global profile", `{name: a, provider: bedrock, shape: anthropic, region: eu-west-1, upstream_model: "global.` + fm + `"}`, "",
			[]string{"arn:aws:bedrock:eu-west-1:123456789012:inference-profile/global." + fm, "arn:aws:bedrock:*::foundation-model/" + fm}},
		{"openai shape", `{name: a, provider: bedrock, shape: openai, region: us-west-2, upstream_model: openai.gpt-oss-120b-1:0}`, "",
			[]string{"arn:aws:bedrock:us-west-2::foundation-model/openai.gpt-oss-120b-1:0"}},
		{"no shape", `{name: a, provider: bedrock, region: us-east-1, upstream_model: x.y}`, "models[0].shape", nil},
		{"no region", `{name: a, provider: bedrock, shape: openai, upstream_model: x.y}`, "models[0].region", nil},
		{"no model id", `{name: a, provider: bedrock, shape: openai, region: us-east-1}`, "models[0].upstream_model", nil},
		{"an ARN", `{name: a, provider: bedrock, shape: openai, region: us-east-1, upstream_model: "arn:aws:bedrock:us-east-1::foundation-model/x"}`, "not an ARN", nil},
		{"profile without regions", `{name: a, provider: bedrock, shape: anthropic, region: us-east-1, upstream_model: "us.` + fm + `"}`, "models[0].regions", nil},
		{"profile not from its region", `{name: a, provider: bedrock, shape: anthropic, region: eu-west-1, upstream_model: "us.` + fm + `", regions: [us-east-1]}`, "eu-west-1 among them", nil},
		{"regions without a profile", `{name: a, provider: bedrock, shape: anthropic, region: us-east-1, upstream_model: "` + fm + `", regions: [us-east-2]}`, "only an inference profile", nil},
		{"base_url with a path", `{name: a, provider: bedrock, shape: openai, region: us-east-1, upstream_model: x.y, base_url: "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1"}`, "runtime endpoint alone", nil},
		{"shape on openai", `{name: a, provider: openai, shape: anthropic, base_url: "http://x/v1"}`, "shape is for bedrock", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms, err := ParseModels([]byte("models:\n- " + tt.model + "\n"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := ms.Models[0]
			if got := m.BedrockARNs("aws", "123456789012"); !slices.Equal(got, tt.wantARN) {
				t.Errorf("ARNs %q, want %q", got, tt.wantARN)
			}
			if !strings.HasPrefix(m.BaseURL, "https://bedrock-runtime."+m.Region+".amazonaws.com") {
				t.Errorf("base URL %s, want the region's runtime endpoint", m.BaseURL)
			}
		})
	}
}
