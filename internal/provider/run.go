package provider

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// The headers every upstream request of a chunk run carries (WithRun): the
// run, and the end of its lease as the executor last wrote it, in unix
// milliseconds. A provider ignores them; the mock records them, so that
// `make chaos` can check that no row runs under two runs at once and none
// after its run's lease (docs/design.md "Scheduling").
const (
	HeaderRun        = "X-Relay-Run"
	HeaderLeaseUntil = "X-Relay-Lease-Until"
)

type runKey struct{}

type runInfo struct {
	run        string
	leaseUntil func() time.Time
}

// WithRun marks ctx as a chunk run's: the upstream requests made with it
// carry the run and leaseUntil() at the moment each is sent (left out when
// it is zero or leaseUntil nil).
func WithRun(ctx context.Context, run string, leaseUntil func() time.Time) context.Context {
	return context.WithValue(ctx, runKey{}, runInfo{run: run, leaseUntil: leaseUntil})
}

// setRunHeaders adds WithRun's headers to an upstream request.
func setRunHeaders(ctx context.Context, h http.Header) {
	info, ok := ctx.Value(runKey{}).(runInfo)
	if !ok || info.run == "" {
		return
	}
	h.Set(HeaderRun, info.run)
	if info.leaseUntil == nil {
		return
	}
	if until := info.leaseUntil(); !until.IsZero() {
		h.Set(HeaderLeaseUntil, strconv.FormatInt(until.UnixMilli(), 10))
	}
}
