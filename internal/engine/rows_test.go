package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/provider"
)

func TestFanOutStaysWithinTheSlotsHeld(t *testing.T) {
	t.Parallel()
	p := newSlotPool()
	p.hold(3)
	var inflight, peak atomic.Int32
	bodies := make([]json.RawMessage, 20)
	for i := range bodies {
		bodies[i] = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
	}
	res := make([]string, len(bodies))
	var wg sync.WaitGroup
	fanOut(p, &wg, rowFan{
		ctx: context.Background(), bodies: bodies,
		send: func(_ context.Context, body json.RawMessage) provider.Result {
			n := inflight.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			inflight.Add(-1)
			return provider.Result{StatusCode: 200, Body: body}
		},
		settle: func(i int) bool {
			if i%5 == 4 {
				res[i] = "settled"
				return true
			}
			return false
		},
		done: func(i int, r provider.Result, sent bool) {
			if sent {
				res[i] = string(r.Body)
			}
		},
	})
	wg.Wait()
	if peak.Load() > 3 || peak.Load() == 0 {
		t.Fatalf("peak in flight %d with 3 slots", peak.Load())
	}
	for i, got := range res {
		want := fmt.Sprintf(`{"n":%d}`, i)
		if i%5 == 4 {
			want = "settled"
		}
		if got != want {
			t.Errorf("row %d: got %q, want %q", i, got, want)
		}
	}
}

func TestFanOutStopsRowsWaitingWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	p := newSlotPool()
	p.hold(1)
	ctx, cancel := context.WithCancel(context.Background())
	var sent, stopped atomic.Int32
	var wg sync.WaitGroup
	fanOut(p, &wg, rowFan{
		ctx: ctx, bodies: make([]json.RawMessage, 5),
		send: func(context.Context, json.RawMessage) provider.Result {
			cancel() // the run loses its lease while its first row is in flight
			return provider.Result{}
		},
		done: func(_ int, _ provider.Result, ok bool) {
			if ok {
				sent.Add(1)
			} else {
				stopped.Add(1)
			}
		},
	})
	wg.Wait()
	if sent.Load() != 1 || stopped.Load() != 4 {
		t.Fatalf("sent %d, stopped %d: want 1 and 4", sent.Load(), stopped.Load())
	}
}
