package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/inference"
)

func TestFanOutStaysWithinTheSlotsHeld(t *testing.T) {
	t.Parallel()
	p := NewPool()
	p.Hold("", 3)
	var inflight, peak atomic.Int32
	bodies := make([]json.RawMessage, 20)
	for i := range bodies {
		bodies[i] = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
	}
	res := make([]string, len(bodies))
	var wg sync.WaitGroup
	Send(p, &wg, Rows{
		Ctx: context.Background(), Bodies: bodies,
		Send: func(_ context.Context, body json.RawMessage) inference.Result {
			n := inflight.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			inflight.Add(-1)
			return inference.Result{StatusCode: 200, Body: body}
		},
		Settle: func(i int) bool {
			if i%5 == 4 {
				res[i] = "settled"
				return true
			}
			return false
		},
		Done: func(i int, r inference.Result, sent bool) {
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
	p.Hold("", 1)
	ctx, cancel := context.WithCancel(context.Background())
	var sent, stopped atomic.Int32
	var wg sync.WaitGroup
	Send(p, &wg, Rows{
		Ctx: ctx, Bodies: make([]json.RawMessage, 5),
		Send: func(context.Context, json.RawMessage) inference.Result {
			cancel() // the run loses its lease while its first row is in flight
			return inference.Result{}
		},
		Done: func(_ int, _ inference.Result, ok bool) {
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
		p.Hold("", s)
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
			if !p.Acquire(context.Background(), "") {
				t.Fatal("acquire failed")
			}
			inflight.Add(1)
			check()
			wg.Go(func() {
				time.Sleep(time.Duration(1+r%3) * time.Millisecond)
				inflight.Add(-1)
				p.Release("")
				if left.Add(-1) == 0 {
					commits.Go(func() {
						p.Finish("", slots[ci])
						// Handing the slots on: what is in flight must fit
						// in the slots that stay.
						held.Add(-int64(slots[ci]))
						check()
						p.Leave("", slots[ci])
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
	p.Hold("", 1)
	if !p.Acquire(context.Background(), "") {
		t.Fatal("first acquire failed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan bool)
	go func() { got <- p.Acquire(ctx, "") }()
	cancel()
	if <-got {
		t.Fatal("acquire succeeded with no slot free and its context done")
	}
}

// TestSlotPoolAccountsPerModel: chunks of several models in one pool; each
// model's rows in flight stay within the slots its own chunks hold, while
// its chunks finish and hand their slots on, and a model with slots to
// spare lends none to another.
func TestSlotPoolAccountsPerModel(t *testing.T) {
	t.Parallel()
	type chunk struct {
		model       string
		slots, rows int
	}
	tests := []struct {
		name   string
		chunks []chunk
	}{
		{"one model", []chunk{{"x", 3, 9}}},
		{"a wide and a narrow model", []chunk{{"x", 4, 24}, {"y", 1, 12}}},
		{"two chunks of one model beside another", []chunk{{"x", 2, 8}, {"y", 3, 5}, {"x", 1, 6}}},
		{"three models", []chunk{{"x", 5, 10}, {"y", 1, 3}, {"z", 2, 20}, {"y", 2, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := NewPool()
			var mu sync.Mutex
			held, inflight, peak := map[string]int{}, map[string]int{}, map[string]int{}
			for _, c := range tt.chunks {
				p.Hold(c.model, c.slots)
				held[c.model] += c.slots
			}
			var rows, commits, senders sync.WaitGroup
			byModel := map[string][]chunk{}
			for _, c := range tt.chunks {
				byModel[c.model] = append(byModel[c.model], c)
			}
			for model, cs := range byModel {
				senders.Go(func() {
					for _, c := range cs {
						var left atomic.Int64
						left.Store(int64(c.rows))
						Send(p, &rows, Rows{
							Model: model, Ctx: context.Background(), Bodies: make([]json.RawMessage, c.rows),
							Send: func(context.Context, json.RawMessage) inference.Result {
								mu.Lock()
								inflight[model]++
								peak[model] = max(peak[model], inflight[model])
								if inflight[model] > held[model] {
									t.Errorf("model %s: %d in flight with %d slots held", model, inflight[model], held[model])
								}
								mu.Unlock()
								time.Sleep(time.Millisecond)
								mu.Lock()
								inflight[model]--
								mu.Unlock()
								return inference.Result{}
							},
							Done: func(int, inference.Result, bool) {
								if left.Add(-1) == 0 {
									commits.Go(func() {
										p.Finish(model, c.slots)
										mu.Lock()
										held[model] -= c.slots
										if inflight[model] > held[model] {
											t.Errorf("model %s: %d in flight as a chunk hands on its slots, %d stay", model, inflight[model], held[model])
										}
										mu.Unlock()
										p.Leave(model, c.slots)
									})
								}
							},
						})
					}
				})
			}
			senders.Wait()
			rows.Wait()
			commits.Wait()
			for model, cs := range byModel {
				if peak[model] == 0 {
					t.Errorf("model %s (%d chunks) sent no row", model, len(cs))
				}
			}
		})
	}
}
