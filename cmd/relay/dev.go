package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/deployed"
	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/local/rie"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/resources"
)

func endpointSet() bool { return os.Getenv("AWS_ENDPOINT_URL") != "" }

// devFlags are relay dev's flags (make dev's variables: the Makefile).
type devFlags struct {
	addr, tenant, stack, mockAddr string
	emuPort                       int
	mock                          mockup.Options
	lambda                        bool
}

func parseDevFlags(args []string, stdout, stderr io.Writer) (devFlags, error) {
	fs := newFlagSet("dev", "[--addr HOST:PORT] [--tenant NAME] [--emulator-port N] [--stack NAME] [--mock-addr HOST:PORT] [--mock-latency D] [--mock-error-rate F] [--lambda]\n"+
		"runs the whole service locally (make dev): on the emulator at AWS_ENDPOINT_URL, else on a moto it starts;\n"+
		"with --stack, on the resources of a stack make deploy-emulator deployed there;\n"+
		"with --lambda too, each function as its bootstrap under the Lambda Runtime Interface Emulator (README \"Lambda mode\")")
	var f devFlags
	fs.StringVar(&f.addr, "addr", envOr("RELAY_ADDR", "127.0.0.1:8080"), "API listen address (RELAY_ADDR)")
	fs.StringVar(&f.tenant, "tenant", "dev", "tenant of the printed key")
	fs.IntVar(&f.emuPort, "emulator-port", emulator.DefaultPort, "where to start the emulator when AWS_ENDPOINT_URL is unset")
	fs.StringVar(&f.stack, "stack", "", "run on the table, bucket and queues of this CloudFormation stack at AWS_ENDPOINT_URL (make deploy-emulator's is relay) instead of creating them")
	fs.StringVar(&f.mockAddr, "mock-addr", "127.0.0.1:8090", "where the mock provider listens, for the models of the models file whose base_url points there")
	fs.DurationVar(&f.mock.Latency, "mock-latency", 0, "added to every request of the mock provider (make dev MOCK_LATENCY=200ms)")
	fs.BoolVar(&f.lambda, "lambda", false, "run each function as its real bootstrap under the Lambda Runtime Interface Emulator, with the stack's environment (needs --stack and make synth's cdk.out; make dev RUNTIME=lambda)")
	fs.Float64Var(&f.mock.ErrorRate, "mock-error-rate", 0, "fraction of the mock provider's requests answered 500 (make dev MOCK_ERROR_RATE=0.1)")
	pos, err := parseArgs(fs, args, stdout, stderr)
	switch {
	case err != nil:
		return f, err
	case len(pos) != 0:
		return f, usageErr("dev takes no arguments (flags: --addr HOST:PORT --tenant NAME --emulator-port N --stack NAME --mock-addr HOST:PORT --mock-latency D --mock-error-rate F --lambda)")
	case f.mock.ErrorRate < 0 || f.mock.ErrorRate > 1 || f.mock.Latency < 0:
		return f, usageErr("dev: --mock-error-rate is a fraction from 0 to 1 and --mock-latency a non-negative duration")
	case f.stack != "" && !endpointSet():
		return f, usageErr("dev --stack %s: set AWS_ENDPOINT_URL to the emulator the stack is deployed on (make deploy-emulator prints it)", f.stack)
	case f.lambda && f.stack == "":
		return f, usageErr("dev --lambda runs the functions with a deployed stack's environment: make deploy-emulator, then make dev STACK=relay RUNTIME=lambda")
	}
	return f, nil
}

// runDev runs the whole service locally until interrupted.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseDevFlags(args, stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	env, err := config.FromEnv()
	if err != nil {
		return err
	}
	models, err := config.LoadModels(env.ModelsPath)
	if err != nil {
		return err
	}
	// An emulator of its own lives as long as this process (stopped on
	// Ctrl-C, SIGTERM and SIGHUP: main) and holds all the data, so nothing
	// survives a restart; one at AWS_ENDPOINT_URL is someone else's.
	ownEmulator := !endpointSet()
	endpoint, stopEmu, err := emulator.StartOn(ctx, f.emuPort)
	if err != nil {
		return err
	}
	defer stopEmu()
	aws := fmt.Sprintf("the emulator at AWS_ENDPOINT_URL=%s: data and keys stay there after this stops", endpoint)
	if ownEmulator {
		aws = fmt.Sprintf("moto_server on %s, started for this run: data and keys go when this stops", endpoint)
	}
	cfg, err := emulator.Config(ctx, endpoint)
	if err != nil {
		return err
	}
	// RELAY_TICK shortens the dispatcher's tick (a minute, as deployed).
	tick, err := time.ParseDuration(envOr("RELAY_TICK", "1m"))
	if err != nil || tick <= 0 {
		return fmt.Errorf("RELAY_TICK: %q is not a positive duration (like 1m or 5s)", os.Getenv("RELAY_TICK"))
	}
	log := slog.New(noMetrics{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})})
	o := localrun.Options{Env: env, Models: models, AWS: cfg, Addr: f.addr, Log: log, TickEvery: tick, MockAddr: f.mockAddr, MockOptions: f.mock}
	o.Env.S3PathStyle = true
	if ownEmulator {
		o.Wire = func(a *app.App) {
			a.UnknownKeyHint = "a key from an earlier run of the local service (make dev) went with that run, as all its data did: use the key this run printed at start-up"
		}
	}
	applied, err := onStack(ctx, &o, f.stack, !ownEmulator)
	if err != nil {
		return err
	}
	if f.lambda {
		if o.Lambda, err = lambdaFunctions(ctx, o, f.stack, stderr); err != nil {
			return err
		}
		defer func() {
			for _, fn := range o.Lambda {
				fn.Close()
			}
		}()
	}
	rt, err := localrun.Start(ctx, o)
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := applied(); err != nil {
		return err
	}
	key, err := rt.Key(ctx, f.tenant)
	if err != nil {
		return fmt.Errorf("create a key: %w", err)
	}
	where := ""
	if f.stack != "" {
		where = ", the stack " + f.stack + "'s"
	}
	fmt.Fprintf(stdout, `Relay Batch is running.

  API URL:   %s/v1
  API key:   %s   (tenant %q)
  AWS:       %s
             (table %s, bucket %s%s)
  models:    %s

  export OPENAI_BASE_URL=%s/v1 OPENAI_API_KEY=%s
  export AWS_ENDPOINT_URL=%s   # for relay keys … in another shell

Ctrl-C stops it.
`, rt.URL, key, f.tenant, aws, o.Env.Table, o.Env.Bucket, where, env.ModelsPath, rt.URL, key, endpoint)
	<-ctx.Done()
	fmt.Fprintln(stderr, "stopping")
	return nil
}

// onStack points o at the resources of the stack named stack, read back
// from the emulator (internal/local/deployed): its functions' environment
// (table, bucket, queues) and their mappings. Without --stack, on an
// emulator someone else started (shared), a stack named as o's prefix is
// an error: make dev would run beside it on a bucket of its own
// (<prefix>-data, the stack's is <prefix>-data-<account>-<region>).
// applied says, once the runtime started, whether the stack's functions
// fitted its resource definitions.
func onStack(ctx context.Context, o *localrun.Options, stack string, shared bool) (applied func() error, err error) {
	applied = func() error { return nil }
	if stack == "" {
		if !shared {
			return applied, nil
		}
		if _, err := deployed.Read(ctx, o.AWS, o.Env.Prefix); err == nil {
			return nil, fmt.Errorf("the stack %s is deployed at AWS_ENDPOINT_URL (make deploy-emulator): run relay dev --stack %s "+
				"(make dev STACK=%s) to run on its table, bucket and queues; without it the service would share its table and "+
				"write to a second bucket, %s; or RELAY_PREFIX=… for resources of its own", o.Env.Prefix, o.Env.Prefix, o.Env.Prefix, o.Env.Bucket)
		}
		return applied, nil
	}
	st, err := deployed.Read(ctx, o.AWS, stack)
	if err != nil {
		return nil, fmt.Errorf("dev --stack %s: %w (make deploy-emulator deploys it)", stack, err)
	}
	env, err := st.Env()
	if err != nil {
		return nil, fmt.Errorf("dev --stack %s: %w", stack, err)
	}
	env.ModelsPath, env.S3PathStyle = o.Env.ModelsPath, true
	o.Env, o.Existing = env, true
	var applyErr error
	o.Tune = func(set *resources.Set) { applyErr = st.Apply(set) }
	return func() error { return applyErr }, nil
}

// lambdaFunctions builds the functions' bootstraps for this machine and the
// Lambda Runtime Interface Emulator (cached under build/), and stages them
// with the stack's environments and cdk.out's bundles (rie.Prepare). The
// webhook policy is the local runtime's, as in-process.
func lambdaFunctions(ctx context.Context, o localrun.Options, stack string, out io.Writer) (map[string]*rie.Function, error) {
	st, err := deployed.Read(ctx, o.AWS, stack)
	if err != nil {
		return nil, fmt.Errorf("dev --lambda: %w", err)
	}
	var names []string
	for _, f := range resources.Define(o.Env.Prefix).Functions {
		names = append(names, f.Name)
	}
	fmt.Fprintln(out, "building the functions' bootstraps and the Lambda Runtime Interface Emulator (build/)")
	fns, err := rie.Prepare(ctx, rie.Setup{
		Root: ".", CdkOut: "cdk.out", BuildDir: "build", Stack: st, Prefix: o.Env.Prefix, Names: names, AWS: o.AWS,
		Extra:  map[string]string{"RELAY_ALLOW_PRIVATE_WEBHOOKS": "true", "RELAY_ALLOW_HTTP_WEBHOOKS": "true"},
		Output: out,
	})
	if err != nil {
		return nil, fmt.Errorf("dev --lambda: %w", err)
	}
	return fns, nil
}

// noMetrics leaves out the lines that only carry a CloudWatch embedded
// metric (an "_aws" attribute: the tick's age of the oldest batch, every
// minute), which mean nothing on a console.
type noMetrics struct{ slog.Handler }

func (h noMetrics) Handle(ctx context.Context, r slog.Record) error {
	metric := false
	r.Attrs(func(a slog.Attr) bool {
		metric = a.Key == "_aws"
		return !metric
	})
	if metric {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h noMetrics) WithAttrs(as []slog.Attr) slog.Handler { return noMetrics{h.Handler.WithAttrs(as)} }
func (h noMetrics) WithGroup(name string) slog.Handler    { return noMetrics{h.Handler.WithGroup(name)} }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
