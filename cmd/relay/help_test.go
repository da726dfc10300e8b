package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runLine runs one command line in-process as main does and returns its
// exit code and what it wrote.
func runLine(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// Help never gets as far as the network or AWS; a short deadline makes
	// a command that wrongly does fail fast instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = runMain(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestHelp runs every group and every command with each way of asking for
// help: each prints its usage on stdout, nothing on stderr, and exits 0.
func TestHelp(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1") // nothing listens: help must not call AWS
	type helpCase struct {
		args []string
		want string // the usage says this
	}
	tests := []helpCase{
		{[]string{"--help"}, "Exit codes:"},
		{[]string{"-h"}, "Exit codes:"},
		{[]string{"help"}, "Exit codes:"},
		{[]string{"help", "help"}, "Exit codes:"},
	}
	for _, g := range groups {
		want := "relay " + g.name
		if g.commands == nil {
			want = "usage: relay " + g.name + " "
		}
		for _, h := range []string{"--help", "-h", "-help", "help"} {
			tests = append(tests, helpCase{[]string{g.name, h}, want})
		}
		tests = append(tests, helpCase{[]string{"help", g.name}, want})
		for _, c := range g.commands {
			want := "usage: relay " + g.name + " " + c
			for _, h := range []string{"--help", "-h"} {
				tests = append(tests, helpCase{[]string{g.name, c, h}, want})
			}
			tests = append(tests,
				helpCase{[]string{"help", g.name, c}, want},
				helpCase{[]string{g.name, "help", c}, want},
				// after an argument, too
				helpCase{[]string{g.name, c, "x", "--help"}, want},
			)
		}
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runLine(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
			}
			if strings.TrimSpace(stdout) == "" || !strings.Contains(stdout, tt.want) {
				t.Errorf("stdout does not say %q:\n%s", tt.want, stdout)
			}
			if stderr != "" {
				t.Errorf("stderr is not empty:\n%s", stderr)
			}
		})
	}
}

// TestHelpUnknown: unknown groups and commands, with or without --help,
// exit 2 with a message on stderr and nothing on stdout.
func TestHelpUnknown(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "no command"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"nope", "--help"}, `unknown command "nope"`},
		{[]string{"help", "nope"}, `unknown command "nope"`},
		{[]string{"batch", "nope"}, `unknown command "nope"`},
		{[]string{"batch", "nope", "--help"}, `unknown command "nope"`},
		{[]string{"batch", "help", "nope"}, `unknown command "nope"`},
		{[]string{"files", "nope", "-h"}, `unknown command "nope"`},
		{[]string{"keys", "nope", "--help"}, `unknown command "nope"`},
		{[]string{"batch", "list", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"keys", "list", "--tenant", "x"}, "flag provided but not defined: -tenant"},
		{[]string{"dev", "extra"}, "dev takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runLine(t, tt.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr does not say %q:\n%s", tt.want, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout is not empty:\n%s", stdout)
			}
		})
	}
}

// TestHelpCoversUsage: the groups table (which run dispatches by and
// TestHelp walks) and the usage text name the same groups and commands.
func TestHelpCoversUsage(t *testing.T) {
	var inTable, inUsage []string
	for _, g := range groups {
		if g.commands == nil {
			inTable = append(inTable, g.name)
		}
		for _, c := range g.commands {
			inTable = append(inTable, g.name+" "+c)
		}
	}
	for line := range strings.Lines(usage) {
		f := strings.Fields(line)
		if !strings.HasPrefix(line, "  relay ") || f[1] == "help" {
			continue
		}
		if slices.ContainsFunc(groups, func(g group) bool { return g.name == f[1] && g.commands == nil }) {
			inUsage = append(inUsage, f[1])
			continue
		}
		if len(f) < 3 {
			t.Errorf("usage line %q names no command", line)
			continue
		}
		for _, c := range strings.Split(f[2], "|") {
			inUsage = append(inUsage, f[1]+" "+c)
		}
	}
	slices.Sort(inTable)
	slices.Sort(inUsage)
	inUsage = slices.Compact(inUsage)
	if !slices.Equal(inTable, inUsage) {
		t.Errorf("commands in the groups table:\n  %v\nin the usage text:\n  %v", inTable, inUsage)
	}
}

// TestExitCodesDocumented: the usage and the README list the same exit
// codes, the ones the CLI returns, and say that go run loses them.
func TestExitCodesDocumented(t *testing.T) {
	want := []string{"0", "1", "2", strconv.Itoa(exitBatchUnsuccessful)}
	var inUsage []string
	for line := range strings.Lines(usage) {
		if f := strings.Fields(line); strings.HasPrefix(line, "  ") && len(f) > 1 && len(f[0]) == 1 && f[0] >= "0" && f[0] <= "9" {
			inUsage = append(inUsage, f[0])
		}
	}
	if !slices.Equal(inUsage, want) {
		t.Errorf("usage lists exit codes %v, want %v", inUsage, want)
	}
	if !strings.Contains(usage, "go run ./cmd/relay exits 1") {
		t.Error("usage does not say that go run loses the exit code")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var inREADME []string
	for line := range strings.Lines(string(readme)) {
		if f := strings.Split(line, "|"); len(f) > 2 && len(strings.TrimSpace(f[1])) == 1 && strings.Contains("0123456789", strings.TrimSpace(f[1])) {
			inREADME = append(inREADME, strings.TrimSpace(f[1]))
		}
	}
	if !slices.Equal(inREADME, want) {
		t.Errorf("README's exit code table lists %v, want %v", inREADME, want)
	}
	for _, w := range []string{"make build/relay", "build/relay batch submit", "go install ./cmd/relay"} {
		if !bytes.Contains(readme, []byte(w)) {
			t.Errorf("README does not say %q", w)
		}
	}
}
