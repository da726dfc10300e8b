// Command relay is the Relay Batch CLI: the local runtime (dev), API keys,
// the mock model provider, and client commands for batches and files.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

const usage = `relay — Relay Batch

Usage:
  relay dev                          run the whole service locally (make dev)
  relay keys create --tenant NAME [--scopes files,batches,admin] [--models a,b] [--expires-in 30d]
  relay keys list
  relay keys disable KEY_ID|KEY
  relay keys rotate KEY_ID [--overlap 24h]
  relay keys webhook-secret --tenant NAME
  relay tenants budget set --tenant NAME [--monthly-tokens N] [--monthly-usd X]
  relay tenants budget show --tenant NAME
  relay tenants disable|enable NAME
  relay admin batch inspect ID [--tenant NAME]   a batch's chunks, leases, ready entries and problems
  relay admin batch requeue ID [--tenant NAME]   send its plan, drain or finalize again
  relay admin models                 each model's capacity in use per shard and the batches waiting
  relay admin dlq list|redrive dispatch|work|finalize|webhook [--batch ID]
  relay admin tick                   run the scheduler's tick once now (docs/runbook.md)
  relay admin audit verify [--from YYYY-MM-DD] [--to YYYY-MM-DD] | query --batch ID | --key KEY_ID
  relay mock-upstream [--addr 127.0.0.1:8090] [--latency 0] [--error-rate 0] [--rate-limit-rate 0] [--batch-delay 1s]
  relay batch submit FILE... [--model M] [--endpoint /v1/chat/completions] [--priority N]
        [--webhook-url URL] [--metadata k=v]... [--completion-window 24h] [--wait] [--json]
  relay batch quote FILE [--model M] [--endpoint /v1/chat/completions] [--completion-window 24h] [--json]
  relay batch status|cancel|retry ID [--json]
  relay batch list [--limit N] [--after ID] [--json]
  relay batch results ID [-o FILE] [--partial]
  relay batch wait ID... [--json]
  relay batch rows ID [--custom-id ID] [--failed] [--json]
  relay files upload FILE... [--json]
  relay files list [--json]
  relay files get|delete ID [--json]
  relay files content ID [-o FILE]
  relay version                      the version and VCS revision of this build (also relay --version)
  relay help [GROUP [COMMAND]]       this text, or a group's commands, or a command's flags
                                     (also relay GROUP --help, relay GROUP COMMAND --help)

Environment: AWS_ENDPOINT_URL (LocalStack or moto), RELAY_PREFIX, RELAY_CONFIG,
RELAY_ADDR. See README.md.
The batch and files commands read RELAY_URL (else OPENAI_BASE_URL, else
http://127.0.0.1:8080/v1) and RELAY_API_KEY (else OPENAI_API_KEY); --url and
--key override them.

Exit codes:
  0  success, help and version included
  1  any other error (the API, the network, a file, AWS), or a wait
     interrupted with Ctrl-C (the batches go on)
  2  usage or configuration error: an unknown command or flag, a missing
     argument, no API key, a bad RELAY_URL
  3  batch submit --wait and batch wait: a batch failed, expired or was
     cancelled, or has failed rows; batch results: the batch failed, so it
     has no results (its errors go to stderr)
These are the built binary's (make build/relay, or go install ./cmd/relay):
go run ./cmd/relay exits 1 whatever the code.
`

// exitError carries an exit code: 2 for usage errors, 3 for batches that
// did not succeed (exitBatchUnsuccessful); any other error exits 1.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }

func usageErr(format string, args ...any) error {
	return exitError{2, fmt.Errorf(format, args...)}
}

func main() {
	// SIGHUP too: closing the terminal of make dev must stop it as Ctrl-C
	// does, emulator included (the emulator is in a process group of its own).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// runMain runs one command line and returns its exit code, having written
// any error to stderr.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout, stderr)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "relay:", err)
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// group is the first word of a command line. A group with commands takes
// one of them as its second word; one without (dev, mock-upstream) is a
// command itself. run, the help texts and the tests go by this table.
type group struct {
	name     string
	commands []string
	run      func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var groups = []group{
	{"dev", nil, runDev},
	{"keys", keysCommands, runKeys},
	{"tenants", tenantsCommands, runTenants},
	{"admin", adminCommands, runAdmin},
	{"mock-upstream", nil, runMock},
	{"batch", batchCommands, runBatch},
	{"files", filesCommands, runFiles},
	{"version", nil, runVersion},
}

// isHelp says whether a word asks for help rather than naming a command.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageErr("no command")
	}
	if isHelp(args[0]) {
		if len(args) == 1 || isHelp(args[1]) {
			fmt.Fprint(stdout, usage)
			return nil
		}
		// relay help GROUP [COMMAND] is relay GROUP [COMMAND] --help.
		return run(ctx, slices.Concat(args[1:], []string{"--help"}), stdout, stderr)
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = slices.Concat([]string{"version"}, args[1:])
	}
	i := slices.IndexFunc(groups, func(g group) bool { return g.name == args[0] })
	if i < 0 {
		fmt.Fprint(stderr, usage)
		return usageErr("unknown command %q", args[0])
	}
	g, rest := groups[i], args[1:]
	if len(rest) > 0 && isHelp(rest[0]) {
		switch {
		case g.commands == nil:
			// The group is one command: its flags.
			rest = []string{"--help"}
		case rest[0] == "help" && len(rest) > 1 && !isHelp(rest[1]):
			// relay GROUP help COMMAND is relay GROUP COMMAND --help.
			rest = []string{rest[1], "--help"}
		default:
			fmt.Fprint(stdout, groupUsage(g))
			return nil
		}
	}
	return g.run(ctx, rest, stdout, stderr)
}

// oneOf lists words as "a, b or c".
func oneOf(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// groupUsage is the part of usage about one group's commands.
func groupUsage(g group) string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	in := false
	for line := range strings.Lines(usage) {
		switch {
		case strings.HasPrefix(line, "  relay "+g.name+" "), line == "  relay "+g.name+"\n":
			in = true
		case !strings.HasPrefix(line, "        "): // not a continuation line
			in = false
		}
		if in {
			b.WriteString(line)
		}
	}
	fmt.Fprintf(&b, "\nrelay %s COMMAND --help describes a command and its flags; relay help, the environment and exit codes.\n", g.name)
	return b.String()
}
