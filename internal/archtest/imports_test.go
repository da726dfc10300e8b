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
// adapter, the store (an adapter) no service, and no service but the
// served Message Batches API an HTTP API's wire objects.
var rules = []struct {
	pkgs      []string // checked with every package they import, directly or not
	forbidden []string
	// direct checks only what pkgs import themselves: an adapter they use
	// may speak the wire.
	direct bool
}{
	{
		pkgs:      []string{"plan", "part", "batch", "msg", "fanout", "workflow", "sched", "inference", "apikey", "file", "egress", "spool", "metrics", "ratelimit"},
		forbidden: []string{"store", "blob", "queue", "webhook", "provider"},
	},
	{
		pkgs:      []string{"store"},
		forbidden: []string{"auth", "files"},
	},
	{
		pkgs:      []string{"native", "engine", "wfhost", "batches", "govern", "files", "auth", "webhook/delivery"},
		forbidden: []string{"anthropic/wire"},
		direct:    true,
	},
}

func TestDomainImportsNoAdapter(t *testing.T) {
	t.Parallel()
	for _, r := range rules {
		deps := depsOf(t, r.pkgs, r.direct)
		for _, p := range r.pkgs {
			for _, f := range r.forbidden {
				if slices.Contains(deps[module+p], module+f) {
					t.Errorf("internal/%s %s internal/%s (go list -f '{{.%s}}' ./internal/%s)", p, map[bool]string{false: "depends on", true: "imports"}[r.direct], f, listed(r.direct), p)
				}
			}
		}
	}
}

// listed is the field of go list that depsOf reads: Imports (direct) or
// Deps.
func listed(direct bool) string {
	if direct {
		return "Imports"
	}
	return "Deps"
}

// depsOf is, for each of pkgs (under internal/), every package it imports,
// directly or not (only directly with direct), tests left out: go list's
// Deps (Imports).
func depsOf(t *testing.T, pkgs []string, direct bool) map[string][]string {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}} {{join ." + listed(direct) + " \" \"}}"}
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
