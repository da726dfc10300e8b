package ratelimit

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/config"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestPacerSpacesReservations(t *testing.T) {
	p := NewPacer(10, 0) // 10 a second: one every 100 ms
	for i := range 5 {
		if at := p.Reserve(t0, 1); !at.Equal(t0.Add(time.Duration(i) * 100 * time.Millisecond)) {
			t.Fatalf("reservation %d at %s, want %s", i, at.Sub(t0), time.Duration(i)*100*time.Millisecond)
		}
	}
	// A cost of 5 books half a second.
	if at := p.Reserve(t0, 5); !at.Equal(t0.Add(500 * time.Millisecond)) {
		t.Fatalf("cost 5 at %s, want 500ms", at.Sub(t0))
	}
	if at := p.Reserve(t0, 1); !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("after it: %s, want 1s", at.Sub(t0))
	}
	// Usage below the estimate gives time back.
	p.Adjust(-5)
	if at := p.Reserve(t0, 1); !at.Equal(t0.Add(600 * time.Millisecond)) {
		t.Fatalf("after a refund of 5: %s, want 600ms", at.Sub(t0))
	}
}

func TestPacerSlackAfterIdleButNotAtStart(t *testing.T) {
	p := NewPacer(10, 3)
	if at := p.Reserve(t0, 1); !at.Equal(t0) {
		t.Fatalf("first at %s", at.Sub(t0))
	}
	if at := p.Reserve(t0, 1); !at.Equal(t0.Add(100 * time.Millisecond)) {
		t.Fatalf("no slack at the start: second at %s, want 100ms", at.Sub(t0))
	}
	// Ten seconds idle: three go at once, then the pace.
	later := t0.Add(10 * time.Second)
	for i, want := range []time.Duration{0, 0, 0, 0, 100 * time.Millisecond} {
		if at := p.Reserve(later, 1); !at.Equal(later.Add(want)) {
			t.Fatalf("after idle, reservation %d at %s, want %s", i, at.Sub(later), want)
		}
	}
}

func TestPacerPauseAndProviderHeaders(t *testing.T) {
	p := NewPacer(0, 0) // no rate: only pauses hold
	if at := p.Reserve(t0, 1); !at.Equal(t0) {
		t.Fatalf("unlimited: %s", at.Sub(t0))
	}
	p.Pause(t0.Add(2 * time.Second))
	if at := p.Reserve(t0, 1); !at.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("paused: %s, want 2s", at.Sub(t0))
	}
	q := NewPacer(0, 0)
	q.Tighten(t0, 5, 100, time.Second) // some left: nothing changes
	if at := q.Reserve(t0, 1); !at.Equal(t0) {
		t.Fatalf("remaining 5: %s", at.Sub(t0))
	}
	q.Tighten(t0, 0, 6000, time.Second) // none left of 6,000 a minute: one comes back in 10 ms
	if at := q.Reserve(t0, 1); !at.Equal(t0.Add(10 * time.Millisecond)) {
		t.Fatalf("remaining 0 of 6,000 a minute: %s, want 10ms", at.Sub(t0))
	}
	q.Tighten(t0, 0, 0, time.Second) // limit not said: the whole reset
	if at := q.Reserve(t0, 1); !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("remaining 0, no limit: %s, want 1s", at.Sub(t0))
	}
}

func TestCircuitOpensProbesAndCloses(t *testing.T) {
	c := &Circuit{Threshold: 3, Cooldown: 5 * time.Second}
	now := t0
	if ok, probe, _ := c.Allow(now); !ok || probe {
		t.Fatal("a closed circuit lets requests through, none as a probe")
	}
	if c.Record(now, false, true) {
		t.Fatal("the first failure opened the circuit")
	}
	// Suspect: one at a time.
	ok, probe, _ := c.Allow(now)
	if !ok || !probe {
		t.Fatal("after a failure, one request goes as a probe")
	}
	if ok, _, _ := c.Allow(now); ok {
		t.Fatal("a second request while the probe is out")
	}
	c.Record(now, true, true)
	if c.Still(false) {
		t.Fatal("a request let through before the failure may not go now")
	}
	_, probe, _ = c.Allow(now)
	if !c.Record(now, probe, true) { // the third failure in a row
		t.Fatal("the third failure did not report the circuit opened (its metric, its alarm)")
	}
	if st := c.State(now); st != Open {
		t.Fatalf("after 3 failures: %s", st)
	}
	if ok, _, wait := c.Allow(now.Add(time.Second)); ok || wait != 4*time.Second {
		t.Fatalf("open: ok %v wait %s, want false 4s", ok, wait)
	}
	now = now.Add(5 * time.Second)
	if st := c.State(now); st != HalfOpen {
		t.Fatalf("after the cooldown: %s", st)
	}
	ok, probe, _ = c.Allow(now)
	if !ok || !probe {
		t.Fatal("half-open lets one probe through")
	}
	if c.Record(now, probe, true) { // the probe fails: open again
		t.Fatal("a failed probe reported an opening: one outage, one count")
	}
	if ok, _, _ := c.Allow(now.Add(time.Second)); ok || c.State(now) != Open {
		t.Fatal("a failed probe opens the circuit again")
	}
	now = now.Add(5 * time.Second)
	_, probe, _ = c.Allow(now)
	c.Abandon() // a probe never sent gives its turn back
	ok, probe, _ = c.Allow(now)
	if !ok || !probe {
		t.Fatal("after an abandoned probe, another")
	}
	c.Record(now, probe, false)
	if st := c.State(now); st != Closed {
		t.Fatalf("after a good probe: %s", st)
	}
	if ok, probe, _ := c.Allow(now); !ok || probe {
		t.Fatal("closed again: requests go freely")
	}
}

func TestAdaptiveHalvesOnOverloadAndClimbsBack(t *testing.T) {
	a := NewAdaptive(2, 16, time.Second)
	ctx := context.Background()
	for range 16 {
		if !a.Acquire(ctx) {
			t.Fatal("acquire")
		}
	}
	for range 16 {
		a.Release(t0, true) // one burst of 429s cuts once
	}
	if got := a.Limit(); got != 8 {
		t.Fatalf("after a burst of 429s: %d, want 8", got)
	}
	for i := range 4 {
		a.Acquire(ctx)
		a.Release(t0.Add(time.Duration(i+1)*time.Second), true)
	}
	if got := a.Limit(); got != 2 {
		t.Fatalf("floor: %d, want 2", got)
	}
	// Full: the next waits.
	a.Acquire(ctx)
	a.Acquire(ctx)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if a.Acquire(short) {
		t.Fatal("acquired over the limit")
	}
	a.Release(t0, false)
	a.Release(t0, false)
	for range 200 {
		a.Acquire(ctx)
		a.Release(t0, false)
	}
	if got := a.Limit(); got != 16 {
		t.Fatalf("after successes: %d, want back at the ceiling 16", got)
	}
}

// memShared is a Shared in memory, counting its leases.
type memShared struct {
	mu     sync.Mutex
	used   map[int64]int64
	leases int
}

func (m *memShared) Lease(_ context.Context, _ string, second, n, capacity int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leases++
	if m.used[second]+n > capacity {
		return false, nil
	}
	m.used[second] += n
	return true, nil
}

func TestBlocksShareASecondAcrossExecutors(t *testing.T) {
	shared := &memShared{used: map[int64]int64{}}
	now := t0
	clock := func() time.Time { return now }
	// Two executors of one bucket of 100 a second.
	a := &Blocks{Shared: shared, Bucket: "m", Capacity: 100}
	b := &Blocks{Shared: shared, Bucket: "m", Capacity: 100}
	ctx := context.Background()
	taken := 0
	for range 50 {
		for _, ex := range []*Blocks{a, b} {
			ok, err := ex.take(ctx, clock().Unix(), 1)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				taken++
			}
		}
	}
	if taken != 100 || shared.used[t0.Unix()] != 100 {
		t.Fatalf("took %d (%d leased) of a second of 100", taken, shared.used[t0.Unix()])
	}
	// Blocks of 10: 10 leases for 100 units, not 100.
	if shared.leases != 10 {
		t.Fatalf("%d leases for 100 units, want 10", shared.leases)
	}
	if ok, _ := a.take(ctx, t0.Unix(), 1); ok {
		t.Fatal("took over the second's capacity")
	}
	// The next second starts afresh; a Take waits for it.
	ctx2, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	now = time.Now()
	a.second, a.have = now.Unix(), 0
	shared.used[now.Unix()] = 100
	if err := a.Take(ctx2, time.Now, 1); err != nil {
		t.Fatalf("Take in the next second: %v", err)
	}
}

func TestPoolSpreadsOverKeysAndDropsARefusedOne(t *testing.T) {
	r := &Registry{}
	p := r.For(config.Model{Name: "m", APIKeyEnvs: []string{"K1", "K2", "K3"}, RPM: 600, MaxConcurrency: 4})
	seen := map[string]int{}
	ctx := context.Background()
	for range 6 {
		u, ok := p.Pick(Cost{})
		if !ok {
			t.Fatal("no key")
		}
		tk, err := u.Wait(ctx, Cost{}, false)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(Outcome{Status: 200})
		seen[u.Env]++
	}
	if seen["K1"] != 2 || seen["K2"] != 2 || seen["K3"] != 2 {
		t.Fatalf("rows by key %v, want two each", seen)
	}
	k2 := p.ups[1]
	if !p.Drop(k2, http.StatusUnauthorized) {
		t.Fatal("drop with two keys left")
	}
	for range 6 {
		if u, _ := p.Pick(Cost{}); u == k2 {
			t.Fatal("picked a dropped key")
		}
	}
	p.Drop(p.ups[0], http.StatusUnauthorized)
	if p.Drop(p.ups[2], http.StatusUnauthorized) {
		t.Fatal("dropped the last key")
	}
	states := p.States()
	if states[0].State != "dropped" || states[1].State != "dropped" || states[2].State != "live" {
		t.Fatalf("states %+v", states)
	}
}

func TestRetryAfterPausesTheKey(t *testing.T) {
	r := &Registry{}
	p := r.For(config.Model{Name: "m", MaxConcurrency: 4})
	u, _ := p.Pick(Cost{})
	tk, _ := u.Wait(context.Background(), Cost{}, false)
	start := time.Now()
	tk.Done(Outcome{Status: http.StatusTooManyRequests, RetryAfter: 200 * time.Millisecond})
	// Another row on the key waits out the pause, though its own retry
	// never saw the 429.
	tk, err := u.Wait(context.Background(), Cost{}, false)
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(Outcome{Status: 200})
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Fatalf("the next row went after %s, want the 200ms pause", d)
	}
}

func TestHeadersTightenBeforeA429(t *testing.T) {
	now := t0
	r := &Registry{Now: func() time.Time { return now }}
	u := r.For(config.Model{Name: "m", MaxConcurrency: 4}).ups[0]
	tk, err := u.Wait(context.Background(), Cost{}, false)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "300")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "1s")
	tk.Done(Outcome{Status: 200, Header: h})
	// None left of 300 a minute: the next one is back in 200 ms.
	if at := u.requests.Next(now, 1); !at.Equal(now.Add(200 * time.Millisecond)) {
		t.Fatalf("the next row may go after %s, want a minute / 300", at.Sub(now))
	}
}

func TestOpenCircuitSendsToTheFallbackAtOnce(t *testing.T) {
	r := &Registry{}
	p := r.For(config.Model{Name: "m", MaxConcurrency: 4})
	u, _ := p.Pick(Cost{})
	for range circuitThreshold {
		tk, err := u.Wait(context.Background(), Cost{}, false)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(Outcome{Status: 500, Failed: true})
	}
	if _, err := u.Wait(context.Background(), Cost{}, true); err != ErrOpen {
		t.Fatalf("with a fallback: %v, want ErrOpen", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := u.Wait(ctx, Cost{}, false); err != context.DeadlineExceeded {
		t.Fatalf("without one the row waits: %v", err)
	}
}

func TestPacerFollowsALoweredLimitAndClimbsBack(t *testing.T) {
	p := NewPacer(100, 0)
	p.Cut(t0)
	p.Cut(t0.Add(100 * time.Millisecond)) // the same burst of 429s
	if got := p.Rate(); got != 70 {
		t.Fatalf("after a burst of 429s: %v, want 70", got)
	}
	for i := range 20 {
		p.Cut(t0.Add(time.Duration(i+1) * time.Second))
	}
	if got := p.Rate(); got != 5 {
		t.Fatalf("floor: %v, want 5", got)
	}
	// Answers climb it by 3% of the ceiling a second, however many.
	at := t0.Add(20 * time.Second) // the last cut
	for range 100 {
		at = at.Add(10 * time.Millisecond)
		p.Climb(at)
	}
	if got := p.Rate(); got < 7.99 || got > 8.01 {
		t.Fatalf("a second of answers: %v, want 8", got)
	}
	p.Climb(at.Add(time.Minute)) // an idle minute counts as one second
	if got := p.Rate(); got < 10.99 || got > 11.01 {
		t.Fatalf("after an idle minute: %v, want 11", got)
	}
	for range 200 {
		at = at.Add(time.Second)
		p.Climb(at)
	}
	if got := p.Rate(); got != 100 {
		t.Fatalf("after minutes of answers: %v, want back at 100", got)
	}
	u := NewPacer(0, 0)
	u.Cut(t0)
	if u.Rate() != 0 {
		t.Fatal("an unpaced key stays unpaced")
	}
}

func TestUsageCorrectsTheTokenEstimate(t *testing.T) {
	r := &Registry{}
	p := r.For(config.Model{Name: "m", TPM: 378948, MaxConcurrency: 4}) // 6,000 tokens a second after the headroom
	u, _ := p.Pick(Cost{})
	before := time.Now()
	tk, _ := u.Wait(context.Background(), Cost{Input: 3000, Output: 600}, false)
	// The prompt was 1,000 tokens, not 3,000; the reply 100 of a max of
	// 600, which the provider counted: 1,600 of the 3,600 booked.
	tk.Done(Outcome{Status: 200, Input: 1000, Output: 100})
	booked := u.tokens.tat.Sub(before)
	if booked < 250*time.Millisecond || booked > 290*time.Millisecond {
		t.Fatalf("booked %s of the pace after usage, want about 1,600/6,000 s", booked)
	}
}

func TestBlocksTakeUsageCorrections(t *testing.T) {
	shared := &memShared{used: map[int64]int64{}}
	b := &Blocks{Shared: shared, Bucket: "m", Capacity: 100}
	ctx := context.Background()
	sec := t0.Unix()
	if ok, _ := b.take(ctx, sec, 40); !ok {
		t.Fatal("take 40")
	}
	// The row used 10 of its estimated 40: 30 go back to this second.
	b.Adjust(t0, -30)
	for range 6 {
		if ok, _ := b.take(ctx, sec, 10); !ok {
			t.Fatal("take 10")
		}
	}
	// 40 + 60 - 30: the 30 given back were spent first.
	if shared.used[sec] != 70 {
		t.Fatalf("leased %d, want 70", shared.used[sec])
	}
	// An overrun is leased with the next block.
	b.Adjust(t0, 5)
	if ok, _ := b.take(ctx, sec, 10); !ok || shared.used[sec] != 85 {
		t.Fatalf("after an overrun of 5: leased %d, want 85", shared.used[sec])
	}
}

func TestPacerResumesEvenlyAfterAPause(t *testing.T) {
	p := NewPacer(10, 10) // a second of slack
	p.Reserve(t0, 1)
	end := t0.Add(5 * time.Second)
	p.Pause(end)
	for i := range 3 {
		if at := p.Reserve(t0.Add(time.Second), 1); !at.Equal(end.Add(time.Duration(i) * 100 * time.Millisecond)) {
			t.Fatalf("row %d held by the pause goes at %s, want %s", i, at.Sub(end), time.Duration(i)*100*time.Millisecond)
		}
	}
}

// A key whose circuit is open is not picked while another key's is
// closed: its rows would wait out the cooldown (or, with a fallback, leave
// the model) beside a healthy key. Once the cooldown ends it is picked
// again for its probe, and a closed circuit takes its share again.
func TestPickPassesOverAnOpenCircuit(t *testing.T) {
	now := t0
	r := &Registry{Now: func() time.Time { return now }}
	p := r.For(config.Model{Name: "m", APIKeyEnvs: []string{"K1", "K2"}, MaxConcurrency: 4})
	k1 := p.ups[0]
	ctx := context.Background()
	for range circuitThreshold {
		tk, err := k1.Wait(ctx, Cost{}, false)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(Outcome{Status: 500, Failed: true})
	}
	for range 6 {
		u, _ := p.Pick(Cost{})
		if u == k1 {
			t.Fatal("picked the key whose circuit is open beside a closed one")
		}
		tk, err := u.Wait(ctx, Cost{}, true)
		if err != nil {
			t.Fatalf("a row with a fallback on the closed key: %v", err)
		}
		tk.Cancel()
	}
	now = now.Add(circuitCooldown)
	// Equal headroom: the keys take turns.
	u, _ := p.Pick(Cost{})
	if u != k1 {
		u, _ = p.Pick(Cost{})
	}
	if u != k1 {
		t.Fatal("the half-open key was not picked for its probe")
	}
	probe, err := u.Wait(ctx, Cost{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := p.Pick(Cost{}); u == k1 {
		t.Fatal("picked the key whose probe is in flight beside a closed one")
	}
	probe.Done(Outcome{Status: 200})
	seen := map[*Upstream]int{}
	for range 4 {
		u, _ := p.Pick(Cost{})
		seen[u]++
	}
	if seen[k1] != 2 {
		t.Fatalf("after the probe closed it the key took %d of 4 picks, want 2", seen[k1])
	}
}

// Attack that held: every key of a pool answering 401 at once drops all
// but one, whatever the interleaving; the last one keeps its rows.
func TestDropAtOnceKeepsOneKey(t *testing.T) {
	for range 50 {
		r := &Registry{Log: slog.New(slog.DiscardHandler)}
		p := r.For(config.Model{Name: "m", APIKeyEnvs: []string{"K1", "K2", "K3"}, MaxConcurrency: 4})
		var wg sync.WaitGroup
		for _, u := range p.ups {
			wg.Go(func() { p.Drop(u, http.StatusUnauthorized) })
		}
		wg.Wait()
		if _, ok := p.Pick(Cost{}); !ok {
			t.Fatal("every key dropped")
		}
	}
}

// Attack that held: a half-open circuit's probe whose row ends before it
// is sent (its context cancelled while it waits for its pacer) is given
// back, so the next row probes: the circuit is not left open for good.
func TestAbandonedProbeLetsTheNextProbe(t *testing.T) {
	now := t0
	r := &Registry{Now: func() time.Time { return now }}
	p := r.For(config.Model{Name: "m", RPM: 60, MaxConcurrency: 4})
	u := p.ups[0]
	for range circuitThreshold {
		u.circuit.Record(now, false, true)
	}
	now = now.Add(circuitCooldown)
	ctx, cancel := context.WithCancel(context.Background())
	u.requests.Reserve(now, 60) // the pacer holds the probe a minute
	go cancel()
	if _, err := u.Wait(ctx, Cost{}, false); err != context.Canceled {
		t.Fatalf("the probe's wait: %v, want cancelled", err)
	}
	if ok, probe, _ := u.circuit.Allow(now); !ok || !probe {
		t.Fatal("no probe after the first was abandoned")
	}
}

// TestSharedBudgetHoldsWithClocksApart: two executors whose clocks are 2 s
// apart (the fault model's skew, docs/design.md "Fault model") spend the
// shared budget of one key as fast as it lets them. Each spends the item of
// the second its own clock reads, so in real time the items overlap: over
// every real minute they may not pass the key's rpm (docs/design.md "Rate
// budgets", shared across executors). At the full rate a second they did
// (6,100 of 6,000 in a minute).
func TestSharedBudgetHoldsWithClocksApart(t *testing.T) {
	const rpm = 6000
	shared := &memShared{used: map[int64]int64{}}
	p := (&Registry{Shared: shared}).For(config.Model{Name: "m", APIKeyEnv: "K", RPM: rpm, MaxConcurrency: 64})
	capacity := p.ups[0].sharedReq.Capacity
	skews := []time.Duration{0, 2 * time.Second}
	execs := make([]*Blocks, len(skews))
	for i := range execs {
		execs[i] = &Blocks{Shared: shared, Bucket: "m#K#rpm", Capacity: capacity}
	}
	ctx := context.Background()
	// Real time in steps of 10 ms over 3 minutes: each executor sends
	// every row its budget lets it, counted at the real time it went.
	const step = 10 * time.Millisecond
	var sent []int // per step
	for i := range int(3 * time.Minute / step) {
		real := t0.Add(time.Duration(i) * step)
		n := 0
		for j, b := range execs {
			for {
				ok, err := b.take(ctx, real.Add(skews[j]).Unix(), 1)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				n++
			}
		}
		sent = append(sent, n)
	}
	perMinute := int(time.Minute / step)
	most, window := 0, 0
	for i, n := range sent {
		window += n
		if i >= perMinute {
			window -= sent[i-perMinute]
		}
		most = max(most, window)
	}
	if most > rpm {
		t.Fatalf("%d requests in one real minute with clocks 2 s apart, over the key's rpm %d", most, rpm)
	}
}

func TestMinuteCountForgetsWhatIsOlderThanAMinute(t *testing.T) {
	var m minuteCount
	m.Add(t0)
	m.Add(t0.Add(30 * time.Second))
	m.Add(t0.Add(59 * time.Second))
	if n := m.Sum(t0.Add(59 * time.Second)); n != 3 {
		t.Fatalf("within the minute: %d, want 3", n)
	}
	if n := m.Sum(t0.Add(60 * time.Second)); n != 2 {
		t.Fatalf("a minute after the first: %d, want 2", n)
	}
	m.Add(t0.Add(120 * time.Second)) // the first's bucket again
	if n := m.Sum(t0.Add(120 * time.Second)); n != 1 {
		t.Fatalf("two minutes on: %d, want 1", n)
	}
}

// A pool publishes its keys' states at most every publishEvery while rows
// go, and at once when a circuit opens.
func TestPoolPublishesItsStates(t *testing.T) {
	now := t0
	var got [][]KeyState
	r := &Registry{Now: func() time.Time { return now }, Publish: func(model string, st []KeyState) {
		if model != "m" {
			t.Errorf("published model %q", model)
		}
		got = append(got, st)
	}}
	p := r.For(config.Model{Name: "m", MaxConcurrency: 8})
	row := func(o Outcome) {
		t.Helper()
		u, _ := p.Pick(Cost{})
		tk, err := u.Wait(context.Background(), Cost{}, false)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(o)
	}
	row(Outcome{Status: http.StatusTooManyRequests})
	now = now.Add(time.Second)
	row(Outcome{Status: http.StatusTooManyRequests})
	now = now.Add(publishEvery)
	row(Outcome{Status: 200})
	if len(got) != 2 {
		t.Fatalf("%d publications, want 2 (the first row's, then one %s later)", len(got), publishEvery)
	}
	if s := got[1][0]; s.LimitedPerMinute != 2 || s.Concurrency != 2 || s.Circuit != Closed || s.State != "live" {
		t.Fatalf("second publication %+v, want two 429s in the minute, concurrency halved twice to 2", s)
	}
	for range circuitThreshold {
		row(Outcome{Status: 500, Failed: true})
	}
	if len(got) != 3 || got[2][0].Circuit != Open {
		t.Fatalf("publications %+v: want a third as the circuit opened", got)
	}
}

// An answer whose headers say less than 5% of the provider's limit
// remains holds a cut pace; one with room climbs it.
func TestPaceHoldsNearTheProvidersLimit(t *testing.T) {
	now := t0
	r := &Registry{Now: func() time.Time { return now }}
	u := r.For(config.Model{Name: "m", RPM: 6000, MaxConcurrency: 4}).ups[0]
	u.requests.Cut(now)
	cut := u.requests.Rate()
	answer := func(remaining string) {
		t.Helper()
		now = now.Add(time.Second)
		tk, err := u.Wait(context.Background(), Cost{}, false)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(Outcome{Status: 200, Header: http.Header{"X-Ratelimit-Limit-Requests": {"6000"},
			"X-Ratelimit-Remaining-Requests": {remaining}, "X-Ratelimit-Reset-Requests": {"1s"}}})
	}
	answer("240")
	if got := u.requests.Rate(); got != cut {
		t.Fatalf("240 of 6,000 remaining: pace %v, want held at %v", got, cut)
	}
	answer("3000")
	if got := u.requests.Rate(); got <= cut {
		t.Fatalf("3,000 of 6,000 remaining: pace %v, want above %v", got, cut)
	}
}

// TestPaceFollowsTheProvidersStatedLimit: a provider that lowers a key's
// limit says so in its rate-limit headers (OpenAI's x-ratelimit-limit-*,
// a minute's): the pace follows it at the next answer, before any 429, and
// climbs no higher while it stands; a limit raised again lifts the pace
// back, up to the configured one (docs/design.md "Rate budgets").
func TestPaceFollowsTheProvidersStatedLimit(t *testing.T) {
	now := t0
	r := &Registry{Now: func() time.Time { return now }}
	u := r.For(config.Model{Name: "m", RPM: 6000, MaxConcurrency: 4}).ups[0]
	answer := func(limit, remaining string) {
		t.Helper()
		now = now.Add(time.Second)
		tk, err := u.Wait(context.Background(), Cost{}, false)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(Outcome{Status: 200, Header: http.Header{"X-Ratelimit-Limit-Requests": {limit},
			"X-Ratelimit-Remaining-Requests": {remaining}, "X-Ratelimit-Reset-Requests": {"1s"}}})
	}
	answer("3000", "2000")
	if got, want := u.requests.Rate(), 3000.0/60*Headroom; got != want {
		t.Fatalf("the provider states 3,000 RPM: pace %v a second, want %v", got, want)
	}
	for range 60 {
		answer("3000", "2000")
	}
	if got, want := u.requests.Rate(), 3000.0/60*Headroom; got != want {
		t.Fatalf("a minute at 3,000 RPM stated: pace %v, want held at %v", got, want)
	}
	// After an idle time a second of that pace may go at once, not a
	// second of the configured one (twice the stated limit).
	now = now.Add(10 * time.Second)
	atOnce := 0
	for u.requests.Reserve(now, 1).Equal(now) {
		atOnce++
	}
	if atOnce > 48 {
		t.Fatalf("%d requests at once after an idle time at a stated 3,000 RPM, want a second of 47.5 a second at most", atOnce)
	}
	for range 60 {
		answer("12000", "11000")
	}
	if got, want := u.requests.Rate(), 6000.0/60*Headroom; got != want {
		t.Fatalf("a minute at 12,000 RPM stated: pace %v, want back at the configured %v", got, want)
	}
}
