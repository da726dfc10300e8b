package engine

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/provider"
)

// One row fan-out (docs/design.md "Scheduling", rows stream): the rows of
// an executor's chunks and the requests of a workflow record's step reach
// the provider through fanOut, each request holding one slot of a
// slotPool while it is in flight, so a chunk never has more requests in
// flight than the slots it holds.

// rowFan is one chunk's rows as fanOut sends them.
type rowFan struct {
	// ctx is the run's: a row still waiting for a slot when it ends is
	// never sent, and the requests in flight are cut short.
	ctx    context.Context
	bodies []json.RawMessage
	// send sends one row's body upstream (Provider.Do).
	send func(ctx context.Context, body json.RawMessage) provider.Result
	// settle, if set, may answer row i without a request before it waits
	// for a slot (a cancel, the end of the window); it reports whether it
	// did.
	settle func(i int) bool
	// done gets the answer of every row settle did not answer: in the
	// row's goroutine, before its slot is freed. sent is false (and res
	// empty) for a row ctx stopped before it got a slot.
	done func(i int, res provider.Result, sent bool)
}

// fanOut sends rows to the provider in order, each request in a goroutine
// of wg holding one of p's slots while it is in flight. It returns once
// every row was sent or answered without a request; wg.Wait waits for the
// answers of the others. Several chunks' rows may share one pool: rows of
// the next chunk start as soon as this one's tail leaves slots free.
func fanOut(p *slotPool, wg *sync.WaitGroup, f rowFan) {
	for i, body := range f.bodies {
		if f.settle != nil && f.settle(i) {
			continue
		}
		if !p.acquire(f.ctx) {
			f.done(i, provider.Result{}, false)
			continue
		}
		wg.Go(func() {
			defer p.release()
			f.done(i, f.send(f.ctx, body), true)
		})
	}
}

// SendRows sends bodies to b's endpoint, with b's fallback model, through
// fanOut, at most slots (at least one) of them in flight, and returns once
// done has every answer (sent false, res empty, for a body ctx stopped
// before it got a slot). internal/wfhost runs a workflow step's requests
// with it, within the slots its record's chunk holds.
func (e *Engine) SendRows(ctx context.Context, b batch.Batch, slots int, bodies []json.RawMessage, done func(i int, res provider.Result, sent bool)) {
	p := newSlotPool()
	p.hold(max(slots, 1))
	ep, fallback := b.Endpoint, fallbackModel(b)
	var wg sync.WaitGroup
	fanOut(p, &wg, rowFan{
		ctx: ctx, bodies: bodies, done: done,
		send: func(ctx context.Context, body json.RawMessage) provider.Result {
			return e.Provider.Do(ctx, ep, body, fallback)
		},
	})
	wg.Wait()
}

// slotPool admits rows against the slots of the chunks an invocation
// holds. A chunk whose rows are done is finishing: its slots take no new
// row, and it hands them on only once the rows still in flight fit in the
// slots of the chunks that stay, so the invocation never has more requests
// in flight than the slots it holds, not even for an instant.
type slotPool struct {
	mu                        sync.Mutex
	cond                      *sync.Cond
	held, finishing, inflight int
	stop                      chan struct{}
}

func newSlotPool() *slotPool {
	p := &slotPool{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *slotPool) hold(slots int) {
	p.mu.Lock()
	p.held += slots
	p.mu.Unlock()
}

// acquire waits for a free slot; false when ctx ended first.
func (p *slotPool) acquire(ctx context.Context) bool {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.inflight >= p.held-p.finishing && ctx.Err() == nil {
		p.cond.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	p.inflight++
	return true
}

func (p *slotPool) release() {
	p.mu.Lock()
	p.inflight--
	p.cond.Broadcast()
	p.mu.Unlock()
}

// finish marks a chunk's rows done and waits until its slots are free.
func (p *slotPool) finish(slots int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishing += slots
	for p.inflight > p.held-p.finishing {
		p.cond.Wait()
	}
}

// leave drops a finished chunk's slots (handed on or given back).
func (p *slotPool) leave(slots int) {
	p.mu.Lock()
	p.held -= slots
	p.finishing -= slots
	p.cond.Broadcast()
	p.mu.Unlock()
}
