package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// relay tenants budget refuses what it cannot set with exit 2, before it
// looks for a table.
func TestTenantsBudgetUsage(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1") // nothing listens: these must not call AWS
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"tenants", "budget", "set", "--monthly-tokens", "5"}, "--tenant NAME is required"},
		{[]string{"tenants", "budget", "set", "--tenant", "acme"}, "give --monthly-tokens N, --monthly-usd X or both"},
		{[]string{"tenants", "budget", "set", "--tenant", "acme", "--monthly-usd", "-1"}, "cannot be negative"},
		{[]string{"tenants", "budget", "raise", "--tenant", "acme"}, "want set or show"},
		{[]string{"tenants", "quota"}, "unknown command"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runLine(t, tt.args...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

// relay keys create --expires-in, keys rotate and tenants disable|enable
// refuse what they cannot do with exit 2, before they look for a table.
func TestKeysLifecycleUsage(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1") // nothing listens: these must not call AWS
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "create", "--tenant", "acme", "--expires-in", "soon"}, "want a positive duration"},
		{[]string{"keys", "create", "--tenant", "acme", "--expires-in", "-1d"}, "want a positive duration"},
		{[]string{"keys", "rotate"}, "give one KEY_ID"},
		{[]string{"keys", "rotate", "0123456789ab", "--overlap", "-1h"}, "--overlap"},
		{[]string{"tenants", "disable"}, "give one tenant NAME"},
		{[]string{"tenants", "enable", "../x"}, "give one tenant NAME"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runLine(t, tt.args...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

// A USD limit is warned about when no model of the models file has a
// price, or the file cannot be read to tell; not when one has.
func TestUnpricedWarning(t *testing.T) {
	dir := t.TempDir()
	write := func(name, yaml string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const model = "models:\n  - {name: m, provider: openai, base_url: http://127.0.0.1:1/v1, api_key_env: K%s}\n"
	for _, tt := range []struct {
		path, want string
	}{
		{write("unpriced.yaml", fmt.Sprintf(model, "")), "has a price, so the USD limit counts nothing"},
		{write("priced.yaml", fmt.Sprintf(model, ", price: {input_per_mtok: 1, output_per_mtok: 2}")), ""},
		{filepath.Join(dir, "missing.yaml"), "could not be read to check"},
	} {
		if got := unpricedWarning(tt.path); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: warning %q, want %q", filepath.Base(tt.path), got, tt.want)
		}
	}
}
