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
	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/local/localrun"
)

func endpointSet() bool { return os.Getenv("AWS_ENDPOINT_URL") != "" }

// runDev runs the whole service locally until interrupted.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev", "[--addr HOST:PORT] [--tenant NAME] [--emulator-port N]\n"+
		"runs the whole service locally (make dev): on the emulator at AWS_ENDPOINT_URL, else on a moto it starts")
	addr := fs.String("addr", envOr("RELAY_ADDR", "127.0.0.1:8080"), "API listen address (RELAY_ADDR)")
	tenant := fs.String("tenant", "dev", "tenant of the printed key")
	emuPort := fs.Int("emulator-port", emulator.DefaultPort, "where to start the emulator when AWS_ENDPOINT_URL is unset")
	if pos, err := parseArgs(fs, args, stdout, stderr); err != nil {
		return helpIsSuccess(err)
	} else if len(pos) != 0 {
		return usageErr("dev takes no arguments (flags: --addr HOST:PORT --tenant NAME --emulator-port N)")
	}
	env, err := config.FromEnv()
	if err != nil {
		return err
	}
	env.S3PathStyle = true
	models, err := config.LoadModels(env.ModelsPath)
	if err != nil {
		return err
	}
	// An emulator of its own lives as long as this process (stopped on
	// Ctrl-C, SIGTERM and SIGHUP: main) and holds all the data, so nothing
	// survives a restart; one at AWS_ENDPOINT_URL is someone else's.
	ownEmulator := !endpointSet()
	endpoint, stopEmu, err := emulator.StartOn(ctx, *emuPort)
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
	wire := func(a *app.App) {
		if ownEmulator {
			a.UnknownKeyHint = "a key from an earlier run of the local service (make dev) went with that run, as all its data did: use the key this run printed at start-up"
		}
	}
	rt, err := localrun.Start(ctx, localrun.Options{Env: env, Models: models, AWS: cfg, Addr: *addr, Log: log, TickEvery: tick, Wire: wire})
	if err != nil {
		return err
	}
	defer rt.Close()
	key, err := rt.Key(ctx, *tenant)
	if err != nil {
		return fmt.Errorf("create a key: %w", err)
	}
	fmt.Fprintf(stdout, `Relay Batch is running.

  API URL:   %s/v1
  API key:   %s   (tenant %q)
  AWS:       %s
             (table %s, bucket %s)
  models:    %s

  export OPENAI_BASE_URL=%s/v1 OPENAI_API_KEY=%s
  export AWS_ENDPOINT_URL=%s   # for relay keys … in another shell

Ctrl-C stops it.
`, rt.URL, key, *tenant, aws, env.Table, env.Bucket, env.ModelsPath, rt.URL, key, endpoint)
	<-ctx.Done()
	fmt.Fprintln(stderr, "stopping")
	return nil
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
