package engine

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/fanout"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/provider"
)

// calledFrom reports whether fn is on the caller's stack.
func calledFrom(fn string) bool {
	pc := make([]uintptr, 32)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}

// afterStop is a provider that counts the requests sent, on a live run,
// after stopped was set.
type afterStop struct {
	stopped atomic.Bool
	late    atomic.Int32
}

func (f *afterStop) Do(ctx context.Context, _ string, _ json.RawMessage, _ provider.Route) inference.Result {
	if f.stopped.Load() && ctx.Err() == nil {
		f.late.Add(1)
	}
	return inference.Result{StatusCode: 200, Body: json.RawMessage(`{"id":"chatcmpl-1"}`)}
}

// TestRunStartingBesideStopModelIsStopped: a run of model x whose start
// (its load done, its rows about to go on the pool) meets the stop of x
// in the invocation (another run of x lost its lease: stopModel) sends no
// row after that stop, whichever came first (docs/design.md "Scheduling",
// lease rule): its rows would run on the stopped run's slots, which the
// takeover hands to another invocation. The stop comes as the run's lease
// keeping starts, beside the rest of its start. Before, a run that joined
// the invocation's runs only once started could miss it: checked before
// the stop, not yet among the runs the stop cuts.
func TestRunStartingBesideStopModelIsStopped(t *testing.T) {
	t.Parallel()
	const runs = 2000
	missed := 0
	for range runs {
		e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 20, 1})
		p := &afterStop{}
		e.Provider = p
		ctx, cancel := context.WithCancel(context.Background())
		in := &invocation{e: e, ctx: ctx, runCtx: ctx, pool: fanout.NewPool(),
			batches: map[string]*cachedBatch{}, statuses: map[string]*atomic.Value{}, sending: map[string]chan struct{}{},
			stopped: map[string]bool{}}
		var once sync.Once
		e.Now = func() time.Time {
			if calledFrom("keepLease") {
				once.Do(func() {
					in.stopModel("x")
					p.stopped.Store(true)
				})
			}
			return time.Now()
		}
		c := table.chunkAt(0)
		in.start(&chunkRun{msg: msg.Message{Type: msg.Chunk, Tenant: c.Tenant, Batch: c.Batch, Chunk: c.Index, Run: c.Run, Attempt: 1},
			done: make(chan struct{})}, nil)
		in.work.Wait()
		if p.late.Load() > 0 {
			missed++
		}
		cancel()
		in.keepers.Wait()
	}
	if missed > 0 {
		t.Errorf("%d of %d runs sent rows after their model was stopped as they started", missed, runs)
	}
}
