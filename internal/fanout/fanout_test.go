package fanout

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
	p := NewPool()
	p.Hold(3)
	var inflight, peak atomic.Int32
	bodies := make([]json.RawMessage, 20)
	for i := range bodies {
		bodies[i] = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
	}
	res := make([]string, len(bodies))
	var wg sync.WaitGroup
	Send(p, &wg, Rows{
		Ctx: context.Background(), Bodies: bodies,
		Send: func(_ context.Context, body json.RawMessage) provider.Result {
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
		Settle: func(i int) bool {
			if i%5 == 4 {
				res[i] = "settled"
				return true
			}
			return false
		},
		Done: func(i int, r provider.Result, sent bool) {
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
	p := NewPool()
	p.Hold(1)
	ctx, cancel := context.WithCancel(context.Background())
	var sent, stopped atomic.Int32
	var wg sync.WaitGroup
	Send(p, &wg, Rows{
		Ctx: ctx, Bodies: make([]json.RawMessage, 5),
		Send: func(context.Context, json.RawMessage) provider.Result {
			cancel() // the run loses its lease while its first row is in flight
			return provider.Result{}
		},
		Done: func(_ int, _ provider.Result, ok bool) {
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

func TestSlotPoolNeverExceedsHeldSlots(t *testing.T) {
	t.Parallel()
	p := NewPool()
	slots := []int{3, 5, 2}
	for _, s := range slots {
		p.Hold(s)
	}
	var inflight, peak, held atomic.Int64
	held.Store(10)
	check := func() {
		n := inflight.Load()
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		if n > held.Load() {
			t.Errorf("%d rows in flight with %d slots held", n, held.Load())
		}
	}
	rows := []int{7, 20, 4}
	var wg sync.WaitGroup
	var commits sync.WaitGroup
	for ci, n := range rows {
		left := atomic.Int64{}
		left.Store(int64(n))
		for r := 0; r < n; r++ {
			if !p.Acquire(context.Background()) {
				t.Fatal("acquire failed")
			}
			inflight.Add(1)
			check()
			wg.Go(func() {
				time.Sleep(time.Duration(1+r%3) * time.Millisecond)
				inflight.Add(-1)
				p.Release()
				if left.Add(-1) == 0 {
					commits.Go(func() {
						p.Finish(slots[ci])
						// Handing the slots on: what is in flight must fit
						// in the slots that stay.
						held.Add(-int64(slots[ci]))
						check()
						p.Leave(slots[ci])
					})
				}
			})
		}
	}
	wg.Wait()
	commits.Wait()
	if peak.Load() < 5 {
		t.Errorf("peak in flight %d: the pool did not share slots across chunks", peak.Load())
	}
}

func TestSlotPoolAcquireStopsWithContext(t *testing.T) {
	t.Parallel()
	p := NewPool()
	p.Hold(1)
	if !p.Acquire(context.Background()) {
		t.Fatal("first acquire failed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan bool)
	go func() { got <- p.Acquire(ctx) }()
	cancel()
	if <-got {
		t.Fatal("acquire succeeded with no slot free and its context done")
	}
}
