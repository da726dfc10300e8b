package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaybatch/relay/internal/config"
)

// Headroom is the share of a configured limit the pacers use: a provider
// counts in windows finer than a minute and sees requests a network hop
// later, so pacing at exactly its limit would be refused now and then.
const Headroom = 0.95

// Circuit and concurrency settings of every upstream (docs/design.md
// "Rate budgets").
const (
	circuitThreshold = 5
	circuitCooldown  = 5 * time.Second
	cutEvery         = time.Second
)

// ErrOpen is a row turned away by an open circuit when it has a fallback
// to go to instead.
var ErrOpen = errors.New("the upstream's circuit is open")

// Registry holds the pools of an executor's models, built on first use.
// Shared, if set, holds every key's budget across executors. Safe for
// concurrent use.
type Registry struct {
	Shared Shared
	Now    func() time.Time
	Log    *slog.Logger
	// OnDrop, if set, records a key dropped from model's pool (the store,
	// for relay admin models); it runs once per key, after the drop.
	OnDrop func(model, env string, status int)
	// OnOpen, if set, is told of a circuit of model's key env that
	// opened (a metric for its alarm).
	OnOpen func(model, env string)
	// Publish, if set, takes a model's key states, at most every
	// publishEvery while the executor sends the model's rows and at once
	// when a circuit opens: the store, so that relay admin models and the
	// panel read every executor's (docs/design.md "Rate budgets"). It is
	// called in a row's answer (Ticket.Done): it must not wait on a write.
	Publish func(model string, states []KeyState)

	mu    sync.Mutex
	pools map[string]*Pool
}

// For is model m's pool.
func (r *Registry) For(m config.Model) *Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pools == nil {
		r.pools = map[string]*Pool{}
	}
	p := r.pools[m.Name]
	if p == nil {
		p = r.newPool(m)
		r.pools[m.Name] = p
	}
	return p
}

func (r *Registry) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func (r *Registry) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// Pool is a model's keys in one executor.
type Pool struct {
	r     *Registry
	model string
	ups   []*Upstream
	next  atomic.Uint64
	// published is when the pool's states were last published (unix ns).
	published atomic.Int64
	// dropMu makes the check for another live key and the drop one step,
	// so two keys failing together cannot both be dropped.
	dropMu sync.Mutex
}

// Upstream is one key of a model: its pacers, circuit and concurrency.
type Upstream struct {
	Env string // the key's api_key_env name

	pool                         *Pool
	requests, tokens, input, out *Pacer
	sharedReq, sharedTok         *Blocks
	circuit                      *Circuit
	conc                         *Adaptive
	dropped                      atomic.Bool
	limited                      minuteCount // 429s answered to it
}

func (r *Registry) newPool(m config.Model) *Pool {
	p := &Pool{r: r, model: m.Name}
	perSecond := func(perMinute int) float64 { return float64(perMinute) / 60 * Headroom }
	// A second's worth of slack: what a pause (a chunk's hand-over) left
	// unused goes at once, which a minute's window (or any of 10 s or
	// more) takes within its limit.
	pacer := func(perMinute int) *Pacer { return NewPacer(perSecond(perMinute), perSecond(perMinute)) }
	for _, env := range m.KeyEnvs() {
		u := &Upstream{
			Env: env, pool: p,
			requests: pacer(m.RPM),
			tokens:   pacer(m.TPM),
			circuit:  &Circuit{Threshold: circuitThreshold, Cooldown: circuitCooldown},
			conc:     NewAdaptive(1, m.MaxConcurrency, cutEvery),
		}
		if m.ITPM > 0 {
			u.input = pacer(m.ITPM)
		}
		if m.OTPM > 0 {
			u.out = pacer(m.OTPM)
		}
		if r.Shared != nil && m.RPM > 0 {
			u.sharedReq = &Blocks{Shared: r.Shared, Bucket: m.Name + "#" + env + "#rpm", Capacity: sharedPerSecond(m.RPM)}
		}
		if r.Shared != nil && m.TPM > 0 {
			u.sharedTok = &Blocks{Shared: r.Shared, Bucket: m.Name + "#" + env + "#tpm", Capacity: sharedPerSecond(m.TPM)}
		}
		p.ups = append(p.ups, u)
	}
	return p
}

// sharedPerSecond is a shared budget's units a second for a limit of
// perMinute: with the pacers' Headroom, so executors whose clocks are up to
// 2 s apart, each spending the second its own clock reads, stay within the
// limit over every real minute (docs/design.md "Rate budgets").
func sharedPerSecond(perMinute int) int64 {
	return max(int64(float64(perMinute)*Headroom/60), 1)
}

// Cost is a row's estimated tokens before it is sent.
type Cost struct{ Input, Output int64 }

// Pick is the live key with the most headroom (the soonest its pacers
// would let a row of cost go), taking turns among equals; false when
// every key was dropped. A key whose circuit would hold the row (open, or
// its one probe in flight) is picked only when every live key's would: a
// row waits out a cooldown, or leaves for a fallback, only when no key
// could take it.
func (p *Pool) Pick(cost Cost) (*Upstream, bool) {
	now := p.r.now()
	start := int(p.next.Add(1))
	var best *Upstream
	var bestAt time.Time
	bestAdmits := false
	for i := range p.ups {
		u := p.ups[(start+i)%len(p.ups)]
		if u.dropped.Load() {
			continue
		}
		at := u.requests.Next(now, 1)
		if t := u.tokens.Next(now, float64(cost.Input+cost.Output)); t.After(at) {
			at = t
		}
		admits := u.circuit.Admits(now)
		if best == nil || admits && !bestAdmits || admits == bestAdmits && at.Before(bestAt) {
			best, bestAt, bestAdmits = u, at, admits
		}
	}
	return best, best != nil
}

// Drop takes key u out of the pool for good (it answered 401/403) while
// another key is live, and reports whether one is: the rows move to the
// others. The last key is kept, so its rows get the provider's answer.
// The log line is what the alarm counts (docs/design.md "Rate budgets").
func (p *Pool) Drop(u *Upstream, status int) bool {
	p.dropMu.Lock()
	defer p.dropMu.Unlock()
	live := 0
	for _, o := range p.ups {
		if o != u && !o.dropped.Load() {
			live++
		}
	}
	if live == 0 {
		return false
	}
	if u.dropped.CompareAndSwap(false, true) {
		p.r.log().Error("upstream key dropped", "model", p.model, "key_env", u.Env, "status", status)
		if p.r.OnDrop != nil {
			p.r.OnDrop(p.model, u.Env, status)
		}
	}
	return true
}

// KeyState is one key's state as `relay models` shows it.
type KeyState struct {
	Env         string       `json:"key_env"`
	State       string       `json:"state"` // live or dropped
	Circuit     CircuitState `json:"circuit"`
	Concurrency int          `json:"concurrency"`
	// LimitedPerMinute is the 429s the key answered in the last minute.
	LimitedPerMinute int64 `json:"rate_limited_per_minute"`
	// RPM and TPM are the pace now (the configured one, or lower after
	// 429s); 0 is unpaced.
	RPM float64 `json:"rpm"`
	TPM float64 `json:"tpm"`
}

// States are the pool's keys' states.
func (p *Pool) States() []KeyState {
	now := p.r.now()
	out := make([]KeyState, 0, len(p.ups))
	for _, u := range p.ups {
		st := "live"
		if u.dropped.Load() {
			st = "dropped"
		}
		out = append(out, KeyState{Env: u.Env, State: st, Circuit: u.circuit.State(now), Concurrency: u.conc.Limit(), LimitedPerMinute: u.limited.Sum(now),
			RPM: u.requests.Rate() * 60, TPM: u.tokens.Rate() * 60})
	}
	return out
}

// Ticket is a request a key let go; Done must follow it.
type Ticket struct {
	u     *Upstream
	cost  Cost
	probe bool // the circuit's one probe
}

// Wait holds a row until key u may send it: its circuit allows it (or,
// with fallback, ErrOpen at once when it is open), its concurrency has
// room, its pacers' time has come and its shared budget has the units.
// It spends none of the row's retries. ctx ending first returns its error.
func (u *Upstream) Wait(ctx context.Context, cost Cost, fallback bool) (*Ticket, error) {
	now := u.pool.r.now
	for {
		probe, err := u.allow(ctx, fallback)
		if err != nil {
			return nil, err
		}
		if !u.conc.Acquire(ctx) {
			if probe {
				u.circuit.Abandon()
			}
			return nil, ctx.Err()
		}
		t := &Ticket{u: u, cost: cost, probe: probe}
		at := u.requests.Reserve(now(), 1)
		for _, r := range []struct {
			p *Pacer
			n int64
		}{{u.tokens, cost.Input + cost.Output}, {u.input, cost.Input}, {u.out, cost.Output}} {
			if r.p != nil {
				if t := r.p.Reserve(now(), float64(r.n)); t.After(at) {
					at = t
				}
			}
		}
		err = sleep(ctx, at.Sub(now()))
		if err == nil && u.sharedReq != nil {
			err = u.sharedReq.Take(ctx, now, 1)
		}
		if err == nil && u.sharedTok != nil {
			err = u.sharedTok.Take(ctx, now, max(cost.Input+cost.Output, 1))
		}
		if err != nil {
			t.Cancel()
			return nil, err
		}
		if u.circuit.Still(probe) && !u.requests.Paused(now()) {
			return t, nil
		}
		// The upstream failed, or refused another row with a Retry-After,
		// while the row waited for its turn: back to the circuit and the
		// pacer, the turn lost.
		t.Cancel()
	}
}

// allow waits for the circuit to let a request through, and reports
// whether it goes as the probe; with a fallback, an open circuit is
// ErrOpen at once.
func (u *Upstream) allow(ctx context.Context, fallback bool) (bool, error) {
	now := u.pool.r.now
	for {
		ok, probe, wait := u.circuit.Allow(now())
		if ok {
			return probe, nil
		}
		if fallback && u.circuit.State(now()) != Closed {
			return false, ErrOpen
		}
		if err := sleep(ctx, wait); err != nil {
			return false, err
		}
	}
}

// Outcome is what a request a Ticket let go came back with.
type Outcome struct {
	Status int         // 0: no answer
	Failed bool        // a 5xx, a timeout, a connection error: the circuit's
	Header http.Header // the answer's, for the provider's rate headers
	// Input and Output are the answer's usage (0: unknown).
	Input, Output int64
	// RetryAfter is how long a 429 asked to wait: the key pauses for it.
	RetryAfter time.Duration
}

// Cancel ends a ticket whose request was never sent or was cut short by
// its caller: it counts for nothing.
func (t *Ticket) Cancel() {
	t.u.conc.Release(t.u.pool.r.now(), false)
	if t.probe {
		t.u.circuit.Abandon()
	}
}

// Done records the outcome of the ticket's request.
func (t *Ticket) Done(o Outcome) {
	u, now := t.u, t.u.pool.r.now()
	overloaded := o.Status == http.StatusTooManyRequests || o.Status == 529 || o.Status == http.StatusServiceUnavailable
	u.conc.Release(now, overloaded)
	opened := u.circuit.Record(now, t.probe, o.Failed)
	if opened && u.pool.r.OnOpen != nil {
		u.pool.r.OnOpen(u.pool.model, u.Env)
	}
	if o.Status == http.StatusTooManyRequests {
		u.limited.Add(now)
		if o.RetryAfter > 0 {
			u.requests.Pause(now.Add(o.RetryAfter))
		}
		// Which limit it was, the answer may not say: both follow.
		u.requests.Cut(now)
		u.tokens.Cut(now)
	}
	if o.Input+o.Output > 0 {
		// Providers count max_tokens when they admit a request, whatever
		// it then writes: the output is corrected up, never below it.
		out := max(o.Output, t.cost.Output)
		delta := o.Input + out - t.cost.Input - t.cost.Output
		u.tokens.Adjust(float64(delta))
		if u.sharedTok != nil {
			u.sharedTok.Adjust(now, delta)
		}
		if u.input != nil {
			u.input.Adjust(float64(o.Input - t.cost.Input))
		}
		if u.out != nil {
			u.out.Adjust(float64(out - t.cost.Output))
		}
	}
	u.readHeaders(now, o.Header, o.Status != 0 && o.Status != http.StatusTooManyRequests)
	u.pool.publish(now, opened)
}

// readHeaders keeps the pacers to the limit the provider states (-limit:
// a minute's) and tightens them to what it says remains: OpenAI's
// x-ratelimit-limit/remaining/reset-* (reset as "1s", "6m0s") and
// Anthropic's anthropic-ratelimit-*-limit/-remaining/-reset (an RFC 3339
// time).
// With climb (an answer that was not a 429) each pace climbs back a step,
// unless the provider says less than 1 - Headroom of its limit remains:
// the pace then holds where the provider's limit is, rather than climbing
// past it into the next 429.
func (u *Upstream) readHeaders(now time.Time, h http.Header, climb bool) {
	for _, d := range []struct {
		p                 *Pacer
		openai, anthropic string
	}{{u.requests, "requests", "requests"}, {u.tokens, "tokens", "tokens"}, {u.input, "", "input-tokens"}, {u.out, "", "output-tokens"}} {
		if d.p == nil {
			continue
		}
		rem, limit, reset, ok := rateHeaders(h, now, d.openai, d.anthropic)
		if ok && limit > 0 {
			d.p.Learn(limit / 60) // both providers state a minute's limit
		}
		if ok {
			d.p.Tighten(now, rem, limit, reset)
		}
		if climb && !(ok && rem < limit*(1-Headroom)) {
			d.p.Climb(now)
		}
	}
}

// rateHeaders reads one limit's remaining, limit (0: not said) and reset
// from h; false when h does not say them.
func rateHeaders(h http.Header, now time.Time, openai, anthropic string) (remaining, limit float64, reset time.Duration, ok bool) {
	if openai != "" {
		if rem, ok := number(h.Get("x-ratelimit-remaining-" + openai)); ok {
			if reset, err := time.ParseDuration(h.Get("x-ratelimit-reset-" + openai)); err == nil {
				limit, _ := number(h.Get("x-ratelimit-limit-" + openai))
				return rem, limit, reset, true
			}
		}
	}
	if rem, ok := number(h.Get("anthropic-ratelimit-" + anthropic + "-remaining")); ok {
		if at, err := time.Parse(time.RFC3339, h.Get("anthropic-ratelimit-"+anthropic+"-reset")); err == nil {
			limit, _ := number(h.Get("anthropic-ratelimit-" + anthropic + "-limit"))
			return rem, limit, at.Sub(now), true
		}
	}
	return 0, 0, 0, false
}

func number(s string) (float64, bool) {
	n, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return n, err == nil && s != ""
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
