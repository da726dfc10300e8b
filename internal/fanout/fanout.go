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

	"github.com/relaybatch/relay/internal/inference"
)

// Rows is one chunk's rows as Send sends them.
type Rows struct {
	// Model names the account of the Pool the rows take their slots from.
	Model string
	// Ctx is the run's: a row still waiting for a slot when it ends is
	// never sent, and the requests in flight are cut short.
	Ctx    context.Context
	Bodies []json.RawMessage
	// Send sends one row's body upstream (the provider's Do).
	Send func(ctx context.Context, body json.RawMessage) inference.Result
	// Settle, if set, may answer row i without a request before it waits
	// for a slot (a cancel, the end of the window); it reports whether it
	// did.
	Settle func(i int) bool
	// Done gets the answer of every row Settle did not answer: in the
	// row's goroutine, before its slot is freed. sent is false (and res
	// empty) for a row Ctx stopped before it got a slot.
	Done func(i int, res inference.Result, sent bool)
}

// Send sends rows to the provider in order, each request in a goroutine of
// wg holding one of p's slots while it is in flight. It returns once every
// row was sent or answered without a request; wg.Wait waits for the
// answers of the others. Several chunks' rows may share one pool: rows of
// the next chunk of the same model start as soon as this one's tail leaves
// slots free.
func Send(p *Pool, wg *sync.WaitGroup, f Rows) {
	for i, body := range f.Bodies {
		if f.Settle != nil && f.Settle(i) {
			continue
		}
		if !p.Acquire(f.Ctx, f.Model) {
			f.Done(i, inference.Result{}, false)
			continue
		}
		wg.Go(func() {
			defer p.Release(f.Model)
			f.Done(i, f.Send(f.Ctx, body), true)
		})
	}
}

// SendAll sends rows through Send with at most slots (at least one) of
// them in flight, and returns once Done has every answer.
func SendAll(slots int, f Rows) {
	p := NewPool()
	p.Hold(f.Model, max(slots, 1))
	var wg sync.WaitGroup
	Send(p, &wg, f)
	wg.Wait()
}

// Pool admits rows against the slots of the chunks an invocation holds,
// one account per model (docs/design.md "Scheduling", per-model slots): a
// row of model m takes only a slot a chunk of m holds. A chunk whose rows
// are done is finishing: its slots take no new row, and it hands them on
// only once the rows of its model still in flight fit in the slots of the
// model's chunks that stay, so no model ever has more requests in flight
// than the slots its chunks hold, not even for an instant. A chunk whose
// slots a chunk of the same model in the same pool takes over does not
// finish: they stay in its model's use (internal/engine, heldSlots).
type Pool struct {
	mu       sync.Mutex
	cond     *sync.Cond
	accounts map[string]*account
}

// account is one model's slots in a Pool.
type account struct{ held, finishing, inflight int }

// free is how many more rows the account admits.
func (a *account) free() int { return a.held - a.finishing - a.inflight }

func NewPool() *Pool {
	p := &Pool{accounts: map[string]*account{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// of is model's account; p.mu is held.
func (p *Pool) of(model string) *account {
	a := p.accounts[model]
	if a == nil {
		a = &account{}
		p.accounts[model] = a
	}
	return a
}

// Hold adds a chunk's slots to its model's account.
func (p *Pool) Hold(model string, slots int) {
	p.mu.Lock()
	p.of(model).held += slots
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Acquire waits for a free slot of model; false when ctx ended first.
func (p *Pool) Acquire(ctx context.Context, model string) bool {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.of(model)
	for a.free() <= 0 && ctx.Err() == nil {
		p.cond.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	a.inflight++
	return true
}

// Release frees the slot of a row of model that was answered.
func (p *Pool) Release(model string) {
	p.mu.Lock()
	p.of(model).inflight--
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Finish marks a chunk's rows done and waits until its slots are free:
// its model's rows in flight fit in the slots of the model's other chunks.
func (p *Pool) Finish(model string, slots int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.of(model)
	a.finishing += slots
	for a.inflight > a.held-a.finishing {
		p.cond.Wait()
	}
}

// Fits reports whether model's rows in flight fit in its slots less
// slots: whether a chunk's slots are out of use.
func (p *Pool) Fits(model string, slots int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.of(model)
	return a.inflight <= a.held-a.finishing-slots
}

// Leave drops a finished chunk's slots (handed on or given back).
func (p *Pool) Leave(model string, slots int) {
	p.mu.Lock()
	a := p.of(model)
	a.held -= slots
	a.finishing -= slots
	p.cond.Broadcast()
	p.mu.Unlock()
}
