// Package localstack holds the integration tests: the real handlers in the
// local runtime, over real AWS SDK clients, against the emulator at
// AWS_ENDPOINT_URL (LocalStack, or moto_server, started here when none is set).
// The kinds that need more than the emulator build only with their tag
// (README "Tests"): browser, nodesdk and deploy, which make test sets, and
// loadtest, chaos and bench, which their make targets set.
package localstack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// The emulator (emutest) is started by the first test that needs it; under
// -short every such test is skipped.
func TestMain(m *testing.M) {
	code := emutest.Run(m)
	if relayCLI.dir != "" {
		os.RemoveAll(relayCLI.dir)
	}
	os.Exit(code)
}

// relayCLI is the relay CLI (cmd/relay) of the tests that run it, built by
// the first of them.
var relayCLI struct {
	once     sync.Once
	dir, bin string
	out      []byte
	err      error
}

// relayBinary is the path of the relay CLI, built once per test binary.
// Every test that runs it needs the emulator: under -short (make unit) t
// is skipped before anything is built or linked.
func relayBinary(t *testing.T) string {
	t.Helper()
	emutest.Require(t)
	relayCLI.once.Do(func() {
		if relayCLI.dir, relayCLI.err = os.MkdirTemp("", "relay-cli"); relayCLI.err != nil {
			return
		}
		relayCLI.bin = filepath.Join(relayCLI.dir, "relay")
		relayCLI.out, relayCLI.err = exec.Command("go", "build", "-o", relayCLI.bin, "../cmd/relay").CombinedOutput()
	})
	if relayCLI.err != nil {
		t.Fatalf("build relay: %v\n%s", relayCLI.err, relayCLI.out)
	}
	return relayCLI.bin
}

// testModels points every model at a mock provider on a free port; quotes
// and reservations count their tokens as the mock does (tokenizer: words,
// as relay.yaml's).
const testModels = `
models:
  - {name: gpt-4o-mini, provider: openai, tokenizer: words, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, fallback: gpt-4o-mini-backup, max_concurrency: 8, timeout: 5s}
  - {name: gpt-4o-mini-backup, provider: openai, tokenizer: words, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, upstream_model: backup-upstream, max_concurrency: 4, timeout: 5s}
  - {name: text-embedding-3-small, provider: openai, tokenizer: words, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 8}
  - {name: claude-haiku-4-5, provider: anthropic, tokenizer: words, base_url: http://MOCK, api_key_env: RELAY_TEST_KEY, max_concurrency: 8}
  - {name: flaky-broken, provider: openai, tokenizer: words, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, fallback: gpt-4o-mini, max_concurrency: 8, timeout: 5s}
  - {name: storm-ratelimited, provider: openai, tokenizer: words, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 8, timeout: 5s}
`

// runtime starts a local runtime of its own (uniquely named resources) for t.
func runtime(t *testing.T, tune ...func(*localrun.Options)) *localrun.Runtime {
	t.Helper()
	cfg := emutest.Config(t)
	ctx := context.Background()
	mockAddr := freeAddr(t)
	models, err := config.ParseModels([]byte(replaceMock(testModels, mockAddr)))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("rt%d", time.Now().UnixNano())
	env := config.Env{Prefix: prefix, Table: prefix, Bucket: prefix + "-data", ChunkRows: 10, S3PathStyle: true}
	o := localrun.Options{
		Env: env, Models: models, AWS: cfg, Addr: "127.0.0.1:0", MockAddr: mockAddr, TickEvery: time.Second,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, f := range tune {
		f(&o)
	}
	rt, err := localrun.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt
}

// client is an official OpenAI client for tenant on rt.
// withModels runs a runtime on the models of yaml, its http://MOCK
// base URLs the runtime's mock provider.
func withModels(t *testing.T, yaml string) func(*localrun.Options) {
	return func(o *localrun.Options) {
		ms, err := config.ParseModels([]byte(replaceMock(yaml, o.MockAddr)))
		if err != nil {
			t.Fatal(err)
		}
		o.Models = ms
	}
}

func client(t testing.TB, rt *localrun.Runtime, tenant string) (openai.Client, string) {
	t.Helper()
	key, err := rt.Key(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return clientWithKey(rt, key), key
}

func clientWithKey(rt *localrun.Runtime, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(rt.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}
