package config

import (
	"strings"
	"testing"
)

func TestRateBudgetsAndKeyPools(t *testing.T) {
	ms, err := ParseModels([]byte(`
models:
  - {name: a, provider: openai, base_url: https://api.openai.com/v1, api_key_envs: [K1, K2], rpm: 500, tpm: 200000}
  - {name: b, provider: anthropic, base_url: https://api.anthropic.com, api_key_env: K3, rpm: 50, itpm: 30000, otpm: 8000}
  - {name: c, provider: openai, base_url: https://api.openai.com/v1}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ms.Lookup("a")
	b, _ := ms.Lookup("b")
	c, _ := ms.Lookup("c")
	if got := strings.Join(a.KeyEnvs(), ","); got != "K1,K2" || a.RPM != 500 || a.TPM != 200000 {
		t.Fatalf("a: keys %s rpm %d tpm %d", got, a.RPM, a.TPM)
	}
	if got := strings.Join(b.KeyEnvs(), ","); got != "K3" || b.ITPM != 30000 || b.OTPM != 8000 {
		t.Fatalf("b: keys %s itpm %d otpm %d", got, b.ITPM, b.OTPM)
	}
	if got := c.KeyEnvs(); len(got) != 1 || got[0] != "" {
		t.Fatalf("c: keys %q, want one unnamed", got)
	}
	for yaml, want := range map[string]string{
		`{name: x, provider: openai, base_url: https://api.openai.com/v1, rpm: -1}`:                           "models[0].rpm must not be negative",
		`{name: x, provider: openai, base_url: https://api.openai.com/v1, itpm: 5}`:                           "itpm and otpm are Anthropic's limits",
		`{name: x, provider: openai, base_url: https://api.openai.com/v1, api_key_env: K, api_key_envs: [L]}`: "not both",
		`{name: x, provider: openai, base_url: https://api.openai.com/v1, api_key_envs: [K, K]}`:              "listed twice",
		`{name: x, provider: openai, base_url: https://api.openai.com/v1, api_key_envs: ["not a name"]}`:      "not a variable name",
	} {
		_, err := ParseModels([]byte("models:\n  - " + yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", yaml, err, want)
		}
	}
}
