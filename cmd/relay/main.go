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
	"syscall"
)

const usage = `relay — Relay Batch

Usage:
  relay dev                          run the whole service locally (make dev)
  relay keys create --tenant NAME [--scopes files,batches,admin]
  relay keys list
  relay keys disable KEY_ID|KEY
  relay keys webhook-secret --tenant NAME
  relay mock-upstream [--addr 127.0.0.1:8090] [--latency 0] [--error-rate 0] [--rate-limit-rate 0]
  relay batch submit FILE... [--model M] [--endpoint /v1/chat/completions] [--priority N]
        [--webhook-url URL] [--metadata k=v]... [--completion-window 24h] [--wait] [--json]
  relay batch status|cancel|retry ID [--json]
  relay batch list [--limit N] [--after ID] [--json]
  relay batch results ID [-o FILE] [--partial]
  relay batch wait ID... [--json]
  relay files upload FILE... [--json]
  relay files list [--json]
  relay files get|delete ID [--json]
  relay files content ID [-o FILE]

Environment: AWS_ENDPOINT_URL (LocalStack or moto), RELAY_PREFIX, RELAY_CONFIG,
RELAY_ADDR. See README.md.
The batch and files commands read RELAY_URL (else OPENAI_BASE_URL, else
http://127.0.0.1:8080/v1) and RELAY_API_KEY (else OPENAI_API_KEY); --url and
--key override them.

Exit codes: 0 success; 1 error; 2 usage or configuration error (a missing key);
3 batch submit --wait and batch wait: a batch failed, expired or was cancelled,
or has failed rows.
`

// exitError carries an exit code: 2 for usage errors, 1 otherwise.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }

func usageErr(format string, args ...any) error {
	return exitError{2, fmt.Errorf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "relay:", err)
	var ee exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	os.Exit(1)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageErr("no command")
	}
	switch args[0] {
	case "dev":
		return runDev(ctx, args[1:], stdout, stderr)
	case "keys":
		return runKeys(ctx, args[1:], stdout)
	case "mock-upstream":
		return runMock(ctx, args[1:], stderr)
	case "batch":
		return runBatch(ctx, args[1:], stdout, stderr)
	case "files":
		return runFiles(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageErr("unknown command %q", args[0])
}
