package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// fakeSched is a hand-written SchedStore: a ready index per model and chunks.
type fakeSched struct {
	ready  map[string][]sched.Ready
	chunks map[int]batch.Chunk
	gets   int
}

func (f *fakeSched) ReadyHead(_ context.Context, model string) (sched.Ready, bool, error) {
	rs := f.ready[model]
	if len(rs) == 0 {
		return sched.Ready{}, false, nil
	}
	head := rs[0]
	for _, r := range rs[1:] {
		if r.SK() < head.SK() {
			head = r
		}
	}
	return head, true, nil
}

func (f *fakeSched) DeleteReady(_ context.Context, r sched.Ready) error {
	rs := f.ready[r.Model]
	for i := range rs {
		if rs[i].SK() == r.SK() {
			f.ready[r.Model] = append(rs[:i], rs[i+1:]...)
			return nil
		}
	}
	return nil
}

func (f *fakeSched) GetChunk(_ context.Context, _ string, i int) (batch.Chunk, error) {
	f.gets++
	return f.chunks[i], nil
}

func TestPick(t *testing.T) {
	t.Parallel()
	lease := time.Unix(1000, 0)
	tests := []struct {
		name      string
		ready     []sched.Ready
		chunks    map[int]batch.Chunk
		wantBatch string
		wantNext  int
		wantAfter int
		wantGets  int
	}{
		{name: "nothing waits"},
		{
			name:      "higher priority first",
			ready:     []sched.Ready{{Model: "m", Batch: "low", Priority: 0, Next: 0, Total: 5}, {Model: "m", Batch: "high", Priority: 5, Seq: 9, Next: 3, Total: 5}},
			wantBatch: "high", wantNext: 3, wantAfter: 4,
		},
		{
			name:      "equal priority: the batch that has had fewest",
			ready:     []sched.Ready{{Model: "m", Batch: "a", Seq: 7, Next: 7, Total: 20}, {Model: "m", Batch: "b", Seq: 2, Next: 2, Total: 3}},
			wantBatch: "b", wantNext: 2, wantAfter: -1,
		},
		{
			name:      "mixed-model batch steps through its model's chunks",
			ready:     []sched.Ready{{Model: "m", Batch: "x", Next: 1, Total: 6, Mixed: true}},
			chunks:    map[int]batch.Chunk{1: {Index: 1, NextSame: 4, State: batch.ChunkPending}},
			wantBatch: "x", wantNext: 1, wantAfter: 4, wantGets: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeSched{ready: map[string][]sched.Ready{"m": tt.ready}, chunks: tt.chunks}
			c, err := pick(context.Background(), f, "m", 8, 0, lease, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantBatch == "" {
				if c != nil {
					t.Fatalf("got claim %+v, want none", c)
				}
				return
			}
			if c == nil || c.Entry.Batch != tt.wantBatch || c.Entry.Next != tt.wantNext || c.After != tt.wantAfter || c.Slots != 8 || !c.Lease.Equal(lease) || c.Run == "" {
				t.Fatalf("got %+v, want batch %s chunk %d then %d", c, tt.wantBatch, tt.wantNext, tt.wantAfter)
			}
			if f.gets != tt.wantGets {
				t.Errorf("chunk reads: got %d, want %d", f.gets, tt.wantGets)
			}
		})
	}
}

func TestRacedDropsStaleEntry(t *testing.T) {
	t.Parallel()
	stale := sched.Ready{Model: "m", Batch: "drained", Next: 2, Total: 5}
	f := &fakeSched{ready: map[string][]sched.Ready{"m": {stale, {Model: "m", Batch: "other", Seq: 1, Total: 1}}}}
	// The entry is still the head after the claim failed: its chunk was
	// claimed by a drain, so the entry goes.
	if err := raced(context.Background(), f, &sched.Claim{Entry: stale}); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := f.ReadyHead(context.Background(), "m"); h.Batch != "other" {
		t.Fatalf("head after raced: got %s, want other", h.Batch)
	}
	// An entry that moved on (another claimer stepped it) stays.
	moved := sched.Ready{Model: "m", Batch: "other", Seq: 0, Total: 1}
	if err := raced(context.Background(), f, &sched.Claim{Entry: moved}); err != nil {
		t.Fatal(err)
	}
	if len(f.ready["m"]) != 1 {
		t.Fatalf("the moved entry was deleted: %+v", f.ready["m"])
	}
	// Same key, but it points at a later chunk now: it stays too.
	stepped := sched.Ready{Model: "m", Batch: "other", Seq: 1, Total: 1, Next: 0}
	f.ready["m"][0].Next = 1
	if err := raced(context.Background(), f, &sched.Claim{Entry: stepped}); err != nil {
		t.Fatal(err)
	}
	if len(f.ready["m"]) != 1 {
		t.Fatalf("an entry that moved on under the same key was deleted: %+v", f.ready["m"])
	}
}

func TestAloneFirst(t *testing.T) {
	t.Parallel()
	run := func(id string, receives, attempt int) *chunkRun {
		return &chunkRun{delivery: msg.Delivery{ID: id, ReceiveCount: receives}, msg: msg.Message{Attempt: attempt}}
	}
	ids := func(rs []*chunkRun) (s string) {
		for _, r := range rs {
			s += r.delivery.ID
		}
		return s
	}
	tests := []struct {
		name       string
		runs       []*chunkRun
		now, later string
	}{
		{"one message runs, even redelivered", []*chunkRun{run("a", 3, 2)}, "a", ""},
		{"fresh messages run together", []*chunkRun{run("a", 1, 1), run("b", 1, 1)}, "ab", ""},
		{"a redelivered message runs alone", []*chunkRun{run("a", 1, 1), run("b", 2, 1), run("c", 1, 1)}, "b", "ac"},
		{"a second attempt runs alone", []*chunkRun{run("a", 1, 2), run("b", 1, 1)}, "a", "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now, later := aloneFirst(tt.runs)
			if ids(now) != tt.now || ids(later) != tt.later {
				t.Fatalf("got now %q later %q, want %q and %q", ids(now), ids(later), tt.now, tt.later)
			}
		})
	}
}

// fakePool is a hand-written Store for the claim loop: fakeSched's ready
// index, capacity shards, and ClaimFromPool's effects (slots taken, the
// entry stepped to its next chunk, one turn later). The Store methods it
// does not write panic: the loop must not call them.
type fakePool struct {
	Store
	*fakeSched
	inflight []int
	claims   []sched.Claim
	// full makes the next claims on a shard find it full, as when others
	// took its slots after FreeSlots read them.
	full map[int]int
}

func (f *fakePool) ReadyHead(ctx context.Context, model string) (sched.Ready, bool, error) {
	return f.fakeSched.ReadyHead(ctx, model)
}

func (f *fakePool) DeleteReady(ctx context.Context, r sched.Ready) error {
	return f.fakeSched.DeleteReady(ctx, r)
}

func (f *fakePool) GetChunk(ctx context.Context, id string, i int) (batch.Chunk, error) {
	return f.fakeSched.GetChunk(ctx, id, i)
}

func (f *fakePool) FreeSlots(_ context.Context, _ string, quotas []int) ([]int, error) {
	free := make([]int, len(quotas))
	for i, q := range quotas {
		free[i] = q - f.inflight[i]
	}
	return free, nil
}

func (f *fakePool) ClaimFromPool(_ context.Context, c sched.Claim, quota int) error {
	if f.full[c.Shard] > 0 {
		f.full[c.Shard]--
		return store.ErrNoCapacity
	}
	if f.inflight[c.Shard]+c.Slots > quota {
		return store.ErrNoCapacity
	}
	head, ok, _ := f.ReadyHead(context.Background(), c.Entry.Model)
	if !ok || head.SK() != c.Entry.SK() {
		return store.ErrRaced
	}
	f.inflight[c.Shard] += c.Slots
	_ = f.DeleteReady(context.Background(), c.Entry)
	if c.After >= 0 {
		next := c.Entry
		next.Next, next.Seq = c.After, c.Entry.Seq+1
		f.ready[next.Model] = append(f.ready[next.Model], next)
	}
	f.claims = append(f.claims, c)
	return nil
}

// fakeQueue records what is sent.
type fakeQueue struct{ sent []msg.Message }

func (q *fakeQueue) Send(_ context.Context, _ string, v any, _ time.Duration) error {
	q.sent = append(q.sent, v.(msg.Message))
	return nil
}

func (q *fakeQueue) SendBatch(ctx context.Context, name string, vs []any, d time.Duration) error {
	for _, v := range vs {
		_ = q.Send(ctx, name, v, d)
	}
	return nil
}

func (q *fakeQueue) ExtendVisibility(context.Context, string, string, time.Duration) error {
	return nil
}

// The claim loop of free capacity (start): chunks in ready order (higher
// priority first, equal priorities taking turns), each claim within its
// shard's free slots, until the capacity or the chunks run out; a shard
// found full moves it to the next; every claim's work message is sent.
func TestStartClaimsInOrderWithinCapacity(t *testing.T) {
	t.Parallel()
	entry := func(b string, prio, total int) sched.Ready {
		return sched.Ready{Model: "m", Tenant: "t", Batch: b, Priority: prio, Total: total}
	}
	tests := []struct {
		name     string
		maxConc  int
		inflight []int
		full     map[int]int
		ready    []sched.Ready
		want     []string // batch/chunk:slots@shard, in claim order
	}{
		{"higher priority first", 128, []int{0}, nil,
			[]sched.Ready{entry("a", 0, 3), entry("b", 5, 2)},
			[]string{"b/0:32@0", "b/1:32@0", "a/0:32@0", "a/1:32@0"}},
		{"equal priorities take turns", 128, []int{0}, nil,
			[]sched.Ready{entry("a", 0, 3), entry("b", 0, 3)},
			[]string{"a/0:32@0", "b/0:32@0", "a/1:32@0", "b/1:32@0"}},
		{"the last claim takes what is free", 40, []int{0}, nil,
			[]sched.Ready{entry("a", 0, 5)},
			[]string{"a/0:32@0", "a/1:8@0"}},
		{"slots already in flight count", 64, []int{60}, nil,
			[]sched.Ready{entry("a", 0, 5)},
			[]string{"a/0:4@0"}},
		{"chunks run out first", 128, []int{0}, nil,
			[]sched.Ready{entry("a", 0, 1)},
			[]string{"a/0:32@0"}},
		{"a shard found full moves on to the next", 2000, []int{0, 990}, map[int]int{0: 1},
			[]sched.Ready{entry("a", 0, 5)},
			[]string{"a/0:10@1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			models, err := config.ParseModels([]byte(fmt.Sprintf("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: %d}\n", tt.maxConc)))
			if err != nil {
				t.Fatal(err)
			}
			f := &fakePool{fakeSched: &fakeSched{ready: map[string][]sched.Ready{"m": tt.ready}}, inflight: tt.inflight, full: tt.full}
			q := &fakeQueue{}
			e := testEngine(&Engine{Store: f, Queue: q, Models: models, Log: slog.New(slog.DiscardHandler)})
			if err := e.start(context.Background(), "m"); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range f.claims {
				got = append(got, fmt.Sprintf("%s/%d:%d@%d", c.Entry.Batch, c.Entry.Next, c.Slots, c.Shard))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("claims %v, want %v", got, tt.want)
			}
			if len(q.sent) != len(f.claims) {
				t.Fatalf("%d work messages for %d claims", len(q.sent), len(f.claims))
			}
			for i, m := range q.sent {
				if c := f.claims[i]; m != msg.ForChunk(c.Next()) {
					t.Errorf("message %d: %+v, want the work message of %+v", i, m, c.Next())
				}
			}
		})
	}
}

// fakeTick is a hand-written Store for a whole tick: fakePool's claims,
// expired leases, due batches, and the failures a test names.
type fakeTick struct {
	*fakePool
	expired      []batch.Chunk
	takenOver    []int
	due          []store.ActiveRef
	batches      map[string]batch.Batch
	rechecked    []string
	failTakeover map[int]bool    // by chunk index
	failGet      map[string]bool // by batch id
	failFree     map[string]bool // by model
}

var errInjected = errors.New("injected")

func (f *fakeTick) ExpiredLeases(context.Context, time.Time, int) ([]batch.Chunk, error) {
	return f.expired, nil
}

func (f *fakeTick) Takeover(_ context.Context, c batch.Chunk, run string, _, _ time.Time) (batch.Chunk, error) {
	if f.failTakeover[c.Index] {
		return c, errInjected
	}
	f.takenOver = append(f.takenOver, c.Index)
	c.Run, c.Attempts = run, c.Attempts+1
	return c, nil
}

func (f *fakeTick) DueBatches(context.Context, time.Time, int) ([]store.ActiveRef, error) {
	return f.due, nil
}

func (f *fakeTick) GetBatch(_ context.Context, _, id string) (batch.Batch, error) {
	if f.failGet[id] {
		return batch.Batch{}, errInjected
	}
	return f.batches[id], nil
}

func (f *fakeTick) UpdateBatch(_ context.Context, _, id string, fn func(*batch.Batch) error) (batch.Batch, error) {
	b := f.batches[id]
	if err := fn(&b); err != nil {
		return b, err
	}
	f.batches[id] = b
	f.rechecked = append(f.rechecked, id)
	return b, nil
}

func (f *fakeTick) FreeSlots(ctx context.Context, model string, quotas []int) ([]int, error) {
	if f.failFree[model] {
		return nil, errInjected
	}
	return f.fakePool.FreeSlots(ctx, model, quotas)
}

func (f *fakeTick) OldestActive(context.Context) (batch.Batch, bool, error) {
	return batch.Batch{}, false, nil
}

// A tick survives a bad item (docs/design.md "Tick"): a takeover, a due
// batch or a model that fails is logged and skipped; every other lease is
// taken over, every other due batch handled, every other model started.
func TestTickSurvivesABadItem(t *testing.T) {
	t.Parallel()
	models, err := config.ParseModels([]byte("models:\n" +
		"  - {name: a, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 64}\n" +
		"  - {name: b, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 64}\n" +
		"  - {name: c, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 64}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string][]sched.Ready{
		"a": {{Model: "a", Tenant: "t", Batch: "ra", Total: 1}},
		"b": {{Model: "b", Tenant: "t", Batch: "rb", Total: 1}},
		"c": {{Model: "c", Tenant: "t", Batch: "rc", Total: 1}},
	}
	f := &fakeTick{
		fakePool: &fakePool{fakeSched: &fakeSched{ready: ready}, inflight: []int{0}},
		expired:  []batch.Chunk{{Batch: "x", Index: 0, Attempts: 1}, {Batch: "x", Index: 1, Attempts: 1}, {Batch: "x", Index: 2, Attempts: 1}},
		due:      []store.ActiveRef{{Tenant: "t", ID: "bad"}, {Tenant: "t", ID: "plan"}, {Tenant: "t", ID: "fin"}},
		batches: map[string]batch.Batch{
			"plan": {Tenant: "t", ID: "plan", Status: batch.Validating},
			"fin":  {Tenant: "t", ID: "fin", Status: batch.InProgress, Started: true, ChunksTotal: 2, ChunksDone: 2},
		},
		failTakeover: map[int]bool{0: true},
		failGet:      map[string]bool{"bad": true},
		failFree:     map[string]bool{"a": true},
	}
	q := &fakeQueue{}
	e := testEngine(&Engine{Store: f, Queue: q, Models: models, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Unix(1000, 0) }})
	if err := e.Tick(context.Background()); !errors.Is(err, errInjected) {
		t.Errorf("tick error: got %v, want the injected errors joined", err)
	}
	if !slices.Equal(f.takenOver, []int{1, 2}) {
		t.Errorf("taken over: got %v, want chunks 1 and 2", f.takenOver)
	}
	if !slices.Equal(f.rechecked, []string{"plan", "fin"}) {
		t.Errorf("due batches handled: got %v, want plan and fin", f.rechecked)
	}
	var got []string
	for _, m := range q.sent {
		got = append(got, fmt.Sprintf("%s:%s/%d", m.Type, m.Batch, m.Chunk))
	}
	want := []string{"chunk:x/1", "chunk:x/2", "plan:plan/0", "finalize:fin/0", "chunk:rb/0", "chunk:rc/0"}
	if !slices.Equal(got, want) {
		t.Errorf("sent %v, want %v", got, want)
	}
	// Its message is not given back to the queue: a tick delivered again
	// would repeat every unit of it, and the next tick does the ones that
	// failed (docs/design.md "Scheduling", tick).
	body, _ := json.Marshal(msg.Message{Type: msg.Tick})
	if failed, err := e.Dispatch(context.Background(), []msg.Delivery{{ID: "tick", Body: string(body)}}); err != nil || len(failed) > 0 {
		t.Errorf("dispatch of a tick whose units failed: failed %v, err %v; want it done", failed, err)
	}
}

// drainTable is a hand-written Store of a batch's chunks for drain; the
// claims of the chunks in fail fail.
type drainTable struct {
	Store
	chunks  []batch.Chunk
	fail    map[int]bool
	claimed []int
}

func (f *drainTable) Chunks(context.Context, string) ([]batch.Chunk, error) { return f.chunks, nil }

func (f *drainTable) ClaimAlone(_ context.Context, c batch.Chunk, _ string, _ time.Time) error {
	if f.fail[c.Index] {
		return errInjected
	}
	f.claimed = append(f.claimed, c.Index)
	return nil
}

// A drain whose claim of one chunk fails still claims the others and sends
// their messages; the failed one is left to the next drain.
func TestDrainSurvivesABadChunk(t *testing.T) {
	t.Parallel()
	f := &drainTable{fail: map[int]bool{0: true}}
	for i := range 3 {
		f.chunks = append(f.chunks, batch.Chunk{Batch: "b", Index: i, State: batch.ChunkPending})
	}
	q := &fakeQueue{}
	e := testEngine(&Engine{Store: f, Queue: q, Log: slog.New(slog.DiscardHandler)})
	if err := e.drain(context.Background(), batch.Batch{ID: "b", Tenant: "t"}); !errors.Is(err, errInjected) {
		t.Errorf("drain error: got %v, want the injected one", err)
	}
	var sent []int
	for _, m := range q.sent {
		sent = append(sent, m.Chunk)
	}
	if !slices.Equal(f.claimed, []int{1, 2}) || !slices.Equal(sent, []int{1, 2}) {
		t.Fatalf("claimed %v, sent %v; want chunks 1 and 2 both", f.claimed, sent)
	}
}
