package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/relaybatch/relay/internal/mockup"
)

func runMock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("mock-upstream", "[flags]\nruns the mock model provider alone (make dev starts one on 127.0.0.1:8090)")
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	var o mockup.Options
	fs.DurationVar(&o.Latency, "latency", 0, "added to every request")
	fs.Float64Var(&o.ErrorRate, "error-rate", 0, "fraction of requests answered 500")
	fs.Float64Var(&o.RateLimitRate, "rate-limit-rate", 0, "fraction of requests answered 429")
	fs.DurationVar(&o.RetryAfter, "retry-after", time.Second, "Retry-After of 429 answers")
	fs.Int64Var(&o.Seed, "seed", 1, "seed of the random knobs")
	fs.DurationVar(&o.BatchDelay, "batch-delay", time.Second, "how long a provider batch (OpenAI Batch, Anthropic Message Batches) runs before it ends")
	if pos, err := parseArgs(fs, args, stdout, stderr); err != nil {
		return helpIsSuccess(err)
	} else if len(pos) != 0 {
		return usageErr("mock-upstream takes no arguments, only flags")
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("mock-upstream: %w", err)
	}
	srv := &http.Server{Handler: mockup.New(o), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "mock provider on http://%s/v1 (control: /mock/stats, /mock/options, /mock/reset)\n", l.Addr())
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
