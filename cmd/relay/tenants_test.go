package main

import (
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
