// Package fanout is the one row fan-out (docs/design.md "Scheduling", rows
// stream): the rows of an executor's chunks and the requests of a workflow
// record's step reach the provider through Send, each request holding one
// slot of a Pool while it is in flight, so a chunk never has more requests
// in flight than the slots it holds.
package fanout

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/relaybatch/relay/internal/provider"
)

// Rows is one chunk's rows as Send sends them.
type Rows struct {
	// Ctx is the run's: a row still waiting for a slot when it ends is
	// never sent, and the requests in flight are cut short.
	Ctx    context.Context
	Bodies []json.RawMessage
	// Send sends one row's body upstream (the provider's Do).
	Send func(ctx context.Context, body json.RawMessage) provider.Result
	// Settle, if set, may answer row i without a request before it waits
	// for a slot (a cancel, the end of the window); it reports whether it
	// did.
	Settle func(i int) bool
	// Done gets the answer of every row Settle did not answer: in the
	// row's goroutine, before its slot is freed. sent is false (and res
	// empty) for a row Ctx stopped before it got a slot.
	Done func(i int, res provider.Result, sent bool)
}

// Send sends rows to the provider in order, each request in a goroutine of
// wg holding one of p's slots while it is in flight. It returns once every
// row was sent or answered without a request; wg.Wait waits for the
// answers of the others. Several chunks' rows may share one pool: rows of
// the next chunk start as soon as this one's tail leaves slots free.
func Send(p *Pool, wg *sync.WaitGroup, f Rows) {
	for i, body := range f.Bodies {
		if f.Settle != nil && f.Settle(i) {
			continue
		}
		if !p.Acquire(f.Ctx) {
			f.Done(i, provider.Result{}, false)
			continue
		}
		wg.Go(func() {
			defer p.Release()
			f.Done(i, f.Send(f.Ctx, body), true)
		})
	}
}

// SendAll sends rows through Send with at most slots (at least one) of
// them in flight, and returns once Done has every answer.
func SendAll(slots int, f Rows) {
	p := NewPool()
	p.Hold(max(slots, 1))
	var wg sync.WaitGroup
	Send(p, &wg, f)
	wg.Wait()
}

// Pool admits rows against the slots of the chunks an invocation holds. A
// chunk whose rows are done is finishing: its slots take no new row, and
// it hands them on only once the rows still in flight fit in the slots of
// the chunks that stay, so the invocation never has more requests in
// flight than the slots it holds, not even for an instant.
type Pool struct {
	mu                        sync.Mutex
	cond                      *sync.Cond
	held, finishing, inflight int
}

func NewPool() *Pool {
	p := &Pool{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Hold adds a chunk's slots.
func (p *Pool) Hold(slots int) {
	p.mu.Lock()
	p.held += slots
	p.mu.Unlock()
}

// Acquire waits for a free slot; false when ctx ended first.
func (p *Pool) Acquire(ctx context.Context) bool {
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

// Release frees the slot of a row that was answered.
func (p *Pool) Release() {
	p.mu.Lock()
	p.inflight--
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Finish marks a chunk's rows done and waits until its slots are free.
func (p *Pool) Finish(slots int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishing += slots
	for p.inflight > p.held-p.finishing {
		p.cond.Wait()
	}
}

// Leave drops a finished chunk's slots (handed on or given back).
func (p *Pool) Leave(slots int) {
	p.mu.Lock()
	p.held -= slots
	p.finishing -= slots
	p.cond.Broadcast()
	p.mu.Unlock()
}
