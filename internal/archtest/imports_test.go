package archtest

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/relaybatch/relay/internal/"

// The rules of docs/architecture.md "Packages": the domain imports no
// adapter, and the store (an adapter) no service.
var rules = []struct {
	pkgs      []string // checked with every package they import, directly or not
	forbidden []string
}{
	{
		pkgs:      []string{"plan", "part", "batch", "msg", "fanout", "workflow", "sched", "inference", "apikey", "file", "egress", "spool"},
		forbidden: []string{"store", "blob", "queue", "webhook", "provider"},
	},
	{
		pkgs:      []string{"store"},
		forbidden: []string{"auth", "files"},
	},
}

func TestDomainImportsNoAdapter(t *testing.T) {
	t.Parallel()
	for _, r := range rules {
		deps := depsOf(t, r.pkgs)
		for _, p := range r.pkgs {
			for _, f := range r.forbidden {
				if slices.Contains(deps[module+p], module+f) {
					t.Errorf("internal/%s depends on internal/%s (go list -deps ./internal/%s)", p, f, p)
				}
			}
		}
	}
}

// depsOf is, for each of pkgs (under internal/), every package it imports,
// directly or not, tests left out: go list's Deps.
func depsOf(t *testing.T, pkgs []string) map[string][]string {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}"}
	for _, p := range pkgs {
		args = append(args, module+p)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	deps := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	if len(deps) != len(pkgs) {
		t.Fatalf("go list answered for %d packages of %d: %s", len(deps), len(pkgs), out)
	}
	return deps
}
