package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// schedTable is a memTable of model m's ready entries and the chunks of
// their batches (pending unless given), counting chunk reads.
type schedTable struct {
	*memTable
	gets atomic.Int32
}

func newSchedTable(entries []sched.Ready, chunks ...batch.Chunk) *schedTable {
	f := &schedTable{memTable: newMemTable()}
	for _, r := range entries {
		for i := range r.Total {
			f.putChunk(batch.Chunk{Batch: r.Batch, Tenant: r.Tenant, Index: i, Model: r.Model, State: batch.ChunkPending, NextSame: -1})
		}
		f.putEntry(r)
	}
	for _, c := range chunks {
		f.putChunk(c)
	}
	return f
}

func (f *schedTable) GetChunk(ctx context.Context, id string, i int) (batch.Chunk, error) {
	f.gets.Add(1)
	return f.memTable.GetChunk(ctx, id, i)
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
			chunks:    map[int]batch.Chunk{1: {Batch: "x", Model: "m", Index: 1, NextSame: 4, State: batch.ChunkPending}},
			wantBatch: "x", wantNext: 1, wantAfter: 4, wantGets: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var chunks []batch.Chunk
			for _, c := range tt.chunks {
				chunks = append(chunks, c)
			}
			f := newSchedTable(tt.ready, chunks...)
			f.gets.Store(0)
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
			if n := int(f.gets.Load()); n != tt.wantGets {
				t.Errorf("chunk reads: got %d, want %d", n, tt.wantGets)
			}
		})
	}
}

func TestRacedDropsStaleEntry(t *testing.T) {
	t.Parallel()
	stale := sched.Ready{Model: "m", Batch: "drained", Next: 2, Total: 5}
	f := newSchedTable([]sched.Ready{stale, {Model: "m", Batch: "other", Seq: 1, Total: 1}})
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
	if rs := f.entries("m"); len(rs) != 1 {
		t.Fatalf("the moved entry was deleted: %+v", rs)
	}
	// Same key, but it points at a later chunk now: it stays too.
	stepped := sched.Ready{Model: "m", Batch: "other", Seq: 1, Total: 1, Next: 0}
	later := stepped
	later.Next = 1
	f.putEntry(later)
	if err := raced(context.Background(), f, &sched.Claim{Entry: stepped}); err != nil {
		t.Fatal(err)
	}
	if rs := f.entries("m"); len(rs) != 1 {
		t.Fatalf("an entry that moved on under the same key was deleted: %+v", rs)
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

// fullShards is a schedTable whose claims on a shard find it full the
// next full[shard] times, as when others took its slots after FreeSlots
// read them.
type fullShards struct {
	*schedTable
	mu   sync.Mutex
	full map[int]int
}

func (f *fullShards) ClaimFromPool(ctx context.Context, quota int, cs ...sched.Claim) error {
	f.mu.Lock()
	full := f.full[cs[0].Shard] > 0
	if full {
		f.full[cs[0].Shard]--
	}
	f.mu.Unlock()
	if full {
		return store.ErrNoCapacity
	}
	return f.schedTable.ClaimFromPool(ctx, quota, cs...)
}

// claimsOf names the claims sent: batch/chunk:slots@shard, in order, from
// the chunks as the claims left them.
func claimsOf(t *testing.T, f *memTable, sent []msg.Message) []string {
	t.Helper()
	var got []string
	for _, m := range sent {
		c := f.chunk(m.Batch, m.Chunk)
		if c.State != batch.ChunkClaimed || m != msg.ForChunk(batch.Next{Tenant: c.Tenant, Batch: c.Batch, Chunk: c.Index, Run: c.Run, Attempt: 1}) {
			t.Errorf("message %+v, want the work message of the claim of %+v", m, c)
		}
		got = append(got, fmt.Sprintf("%s/%d:%d@%d", c.Batch, c.Index, c.Slots, c.Shard))
	}
	return got
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
		{"a model larger than an invocation's chunks of 32 claims shares that fill one", 512, []int{0}, nil,
			[]sched.Ready{entry("a", 0, 12)},
			[]string{"a/0:52@0", "a/1:52@0", "a/2:52@0", "a/3:52@0", "a/4:52@0", "a/5:52@0", "a/6:52@0", "a/7:52@0", "a/8:52@0", "a/9:44@0"}},
		{"a shard found full moves on to the next", 2000, []int{0, 990}, map[int]int{0: 2},
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
			f := &fullShards{schedTable: newSchedTable(tt.ready), full: tt.full}
			f.setInflight("m", tt.inflight...)
			q := &fakeQueue{}
			e := testEngine(&Engine{Store: f, Queue: q, Models: models, Log: slog.New(slog.DiscardHandler)})
			if err := e.start(context.Background(), "m"); err != nil {
				t.Fatal(err)
			}
			if got := claimsOf(t, f.memTable, q.sent); !slices.Equal(got, tt.want) {
				t.Fatalf("claims %v, want %v", got, tt.want)
			}
			claimed := 0
			for _, r := range tt.ready {
				for i := range r.Total {
					if f.chunk(r.Batch, i).State == batch.ChunkClaimed {
						claimed++
					}
				}
			}
			if claimed != len(q.sent) {
				t.Fatalf("%d chunks claimed, %d work messages", claimed, len(q.sent))
			}
		})
	}
}

// tickFaults is a memTable whose takeovers of the chunks in failTakeover,
// reads of the batches in failGet and free capacity of the models in
// failFree fail; it records the batches updated (a due batch handled).
type tickFaults struct {
	*memTable
	failTakeover map[int]bool    // by chunk index
	failGet      map[string]bool // by batch id
	failFree     map[string]bool // by model
	rechecked    []string
}

var errInjected = errors.New("injected")

func (f *tickFaults) Takeover(ctx context.Context, c batch.Chunk, run string, now, lease time.Time) (batch.Chunk, error) {
	if f.failTakeover[c.Index] {
		return c, errInjected
	}
	return f.memTable.Takeover(ctx, c, run, now, lease)
}

func (f *tickFaults) GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error) {
	if f.failGet[id] {
		return batch.Batch{}, errInjected
	}
	return f.memTable.GetBatch(ctx, tenant, id)
}

func (f *tickFaults) UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error) {
	f.rechecked = append(f.rechecked, id)
	return f.memTable.UpdateBatch(ctx, tenant, id, fn)
}

func (f *tickFaults) FreeSlots(ctx context.Context, model string, quotas []int) ([]int, error) {
	if f.failFree[model] {
		return nil, errInjected
	}
	return f.memTable.FreeSlots(ctx, model, quotas)
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
	f := &tickFaults{
		memTable: newSchedTable([]sched.Ready{
			{Model: "a", Tenant: "t", Batch: "ra", Total: 1},
			{Model: "b", Tenant: "t", Batch: "rb", Total: 1},
			{Model: "c", Tenant: "t", Batch: "rc", Total: 1},
		}).memTable,
		failTakeover: map[int]bool{0: true},
		failGet:      map[string]bool{"bad": true},
		failFree:     map[string]bool{"a": true},
	}
	// Three leases ended; three batches due: bad, then plan, then fin.
	for i := range 3 {
		f.putChunk(batch.Chunk{Tenant: "t", Batch: "x", Index: i, State: batch.ChunkClaimed, Run: "old", Attempts: 1, Lease: 900_000})
	}
	f.putBatch(batch.Batch{Tenant: "t", ID: "bad", Status: batch.Validating})
	f.putBatch(batch.Batch{Tenant: "t", ID: "plan", Status: batch.Validating, CreatedAt: 10})
	f.putBatch(batch.Batch{Tenant: "t", ID: "fin", Status: batch.InProgress, Started: true, ChunksTotal: 2, ChunksDone: 2, FinalizeDue: 40})
	q := &fakeQueue{}
	e := testEngine(&Engine{Store: f, Queue: q, Models: models, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Unix(1000, 0) }})
	if err := e.Tick(context.Background()); !errors.Is(err, errInjected) {
		t.Errorf("tick error: got %v, want the injected errors joined", err)
	}
	var takenOver []int
	for i := range 3 {
		if f.chunk("x", i).Run != "old" {
			takenOver = append(takenOver, i)
		}
	}
	if !slices.Equal(takenOver, []int{1, 2}) {
		t.Errorf("taken over: got %v, want chunks 1 and 2", takenOver)
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

// drainFaults is a memTable whose claims of the chunks in fail fail.
type drainFaults struct {
	*memTable
	fail map[int]bool
}

func (f *drainFaults) ClaimAlone(ctx context.Context, c batch.Chunk, run string, lease time.Time) error {
	if f.fail[c.Index] {
		return errInjected
	}
	return f.memTable.ClaimAlone(ctx, c, run, lease)
}

// A drain whose claim of one chunk fails still claims the others and sends
// their messages; the failed one is left to the next drain.
func TestDrainSurvivesABadChunk(t *testing.T) {
	t.Parallel()
	f := &drainFaults{memTable: newMemTable(), fail: map[int]bool{0: true}}
	for i := range 3 {
		f.putChunk(batch.Chunk{Batch: "b", Tenant: "t", Index: i, FirstRow: i, State: batch.ChunkPending})
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
	var claimed []int
	for i := range 3 {
		if f.chunk("b", i).State == batch.ChunkClaimed {
			claimed = append(claimed, i)
		}
	}
	if !slices.Equal(claimed, []int{1, 2}) || !slices.Equal(sent, []int{1, 2}) {
		t.Fatalf("claimed %v, sent %v; want chunks 1 and 2 both", claimed, sent)
	}
}

// batchCounter is a fakeQueue counting its SendBatch calls.
type batchCounter struct {
	fakeQueue
	batches int
}

func (q *batchCounter) SendBatch(ctx context.Context, name string, vs []any, d time.Duration) error {
	q.batches++
	return q.fakeQueue.SendBatch(ctx, name, vs, d)
}

// A start sends its claims' work messages together, after its claims: an
// executor invocation receives them as one event and runs the model's lanes
// side by side in one sandbox (docs/design.md "Chunk size"). Sent one by
// one, as each claim was made, each went to an invocation of its own: the
// large benchmark's executor GB-seconds per 1,000 rows went from 0.21 to
// 2.01.
func TestStartSendsItsClaimsTogether(t *testing.T) {
	t.Parallel()
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 256}\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := newSchedTable([]sched.Ready{{Model: "m", Tenant: "t", Batch: "a", Total: 10}})
	q := &batchCounter{}
	e := testEngine(&Engine{Store: f, Queue: q, Models: models, Log: slog.New(slog.DiscardHandler)})
	if err := e.start(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	if len(q.sent) != 8 || q.batches != 1 {
		t.Fatalf("%d work messages in %d sends, want 8 in one", len(q.sent), q.batches)
	}
}

// countingClaims is a schedTable counting its claim writes and ready
// index reads; before its first write of several claims, another claimer
// takes the first of them when raceFirst is set.
type countingClaims struct {
	*schedTable
	mu        sync.Mutex
	writes    []int // claims per write
	reads     int
	raceFirst bool
	raced     bool
}

func (f *countingClaims) ClaimFromPool(ctx context.Context, quota int, cs ...sched.Claim) error {
	f.mu.Lock()
	f.writes = append(f.writes, len(cs))
	race := f.raceFirst && !f.raced && len(cs) > 1
	f.raced = f.raced || race
	f.mu.Unlock()
	if race {
		other := cs[0]
		other.Run, other.Slots = "other", 0
		if err := f.schedTable.ClaimFromPool(ctx, quota, other); err != nil {
			return err
		}
	}
	return f.schedTable.ClaimFromPool(ctx, quota, cs...)
}

func (f *countingClaims) ReadyHead(ctx context.Context, model string) (sched.Ready, bool, error) {
	f.mu.Lock()
	f.reads++
	f.mu.Unlock()
	return f.schedTable.ReadyHead(ctx, model)
}

func (f *countingClaims) ReadyHeads(ctx context.Context, model string, n int) ([]sched.Ready, bool, error) {
	f.mu.Lock()
	f.reads++
	f.mu.Unlock()
	return f.schedTable.ReadyHeads(ctx, model, n)
}

// A start fills a model's free capacity in one read of its ready index
// and one write (ClaimFromPool of every claim), in the order claims one
// at a time would take; when another claimer moved the index meanwhile, it
// goes on one claim at a time and still fills the capacity.
func TestStartClaimsInOneWrite(t *testing.T) {
	t.Parallel()
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 256}\n"))
	if err != nil {
		t.Fatal(err)
	}
	entries := []sched.Ready{{Model: "m", Tenant: "t", Batch: "a", Total: 10}, {Model: "m", Tenant: "t", Batch: "b", Total: 2}}
	for _, race := range []bool{false, true} {
		f := &countingClaims{schedTable: newSchedTable(entries), raceFirst: race}
		q := &batchCounter{}
		e := testEngine(&Engine{Store: f, Queue: q, Models: models, Log: slog.New(slog.DiscardHandler)})
		if err := e.start(context.Background(), "m"); err != nil {
			t.Fatal(err)
		}
		got := claimsOf(t, f.memTable, q.sent)
		want := []string{"a/0:32@0", "b/0:32@0", "a/1:32@0", "b/1:32@0", "a/2:32@0", "a/3:32@0", "a/4:32@0", "a/5:32@0"}
		if !race {
			if !slices.Equal(got, want) || !slices.Equal(f.writes, []int{8}) || f.reads != 1 || q.batches != 1 {
				t.Fatalf("claims %v in writes %v after %d reads, %d sends; want %v in one write after one read, one send", got, f.writes, f.reads, q.batches, want)
			}
			continue
		}
		// a/0 went to the other claimer: the start's claims are the rest,
		// one at a time, up to the capacity.
		want = []string{"b/0:32@0", "a/1:32@0", "b/1:32@0", "a/2:32@0", "a/3:32@0", "a/4:32@0", "a/5:32@0", "a/6:32@0"}
		if !slices.Equal(got, want) || len(f.writes) != 9 || f.writes[0] != 8 || q.batches != 1 {
			t.Fatalf("after a race: claims %v in writes %v, %d sends; want %v, the first write of 8 and then one at a time", got, f.writes, q.batches, want)
		}
		if c := f.chunk("a", 0); c.Run != "other" {
			t.Fatalf("chunk a/0 %+v, want the other claimer's", c)
		}
	}
}

// oneOpPerItem is a schedTable whose ClaimFromPool refuses, as DynamoDB
// does (ValidationException), a transaction with two operations on one
// item: the items are those store.poolClaimItems writes (each claim's
// chunk, the entries sched.Moves takes and leaves).
type oneOpPerItem struct {
	*schedTable
	refused int
}

func (f *oneOpPerItem) ClaimFromPool(ctx context.Context, quota int, cs ...sched.Claim) error {
	seen := map[string]bool{}
	var keys []string
	for _, c := range cs {
		keys = append(keys, fmt.Sprintf("B#%s/CHUNK#%d", c.Entry.Batch, c.Entry.Next))
	}
	taken, left := sched.Moves(cs)
	for _, r := range append(taken, left...) {
		keys = append(keys, "READY#"+r.Model+"/"+r.SK())
	}
	for _, k := range keys {
		if seen[k] {
			f.refused++
			return errors.New("ValidationException: Transaction request cannot include multiple operations on one item")
		}
		seen[k] = true
	}
	return f.schedTable.ClaimFromPool(ctx, quota, cs...)
}

// A plan that runs again writes its batch's entry at its first pending
// chunk, at the sequence of its priority's head (PutReady), beside the
// entry the batch's claims moved on: two entries at one chunk. Claimed
// one at a time, the second is raced and dropped. Planned together, the
// first entry's chain ends (its last chunk) before it reaches the
// second's key, so both claims of the chunk go in one transaction:
// DynamoDB refuses it on every tick (the model starts nothing, the stale
// entry is never dropped), and a store that took it would claim one
// chunk for two runs and count its slots twice.
// Two entries of a batch at one chunk (a plan run again put the second at
// its priority's turn): a start's one write cannot name the chunk twice
// (DynamoDB refuses the transaction), so the plan stops before the second;
// the next claim finds it stale and drops it. Before, every start of the
// model failed the same way, for good once nothing of it ran.
func TestStartDuplicateEntryAtOneChunk(t *testing.T) {
	t.Parallel()
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 256}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Batch a: chunk 0 done (its commit's pick was throttled: its slots
	// went back to the pool, nothing of m is in flight), its entry moved
	// on to chunk 1, its last, at seq 1. Batch b: one chunk, the head at
	// seq 0. No commit of m will come to pick past the duplicate.
	live := sched.Ready{Model: "m", Tenant: "t", Batch: "a", Seq: 1, Next: 1, Total: 2}
	f := &oneOpPerItem{schedTable: newSchedTable([]sched.Ready{{Model: "m", Tenant: "t", Batch: "b", Total: 1}})}
	f.putChunk(batch.Chunk{Batch: "a", Tenant: "t", Index: 0, Model: "m", State: batch.ChunkDone, Run: "run-a0", NextSame: -1})
	f.putChunk(batch.Chunk{Batch: "a", Tenant: "t", Index: 1, Model: "m", State: batch.ChunkPending, NextSame: -1})
	f.putEntry(live)
	// The plan of a runs again: its entry at chunk 1 joins at b's seq.
	if err := f.PutReady(context.Background(), sched.Ready{Model: "m", Tenant: "t", Batch: "a", Next: 1, Total: 2}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.entries("m")); n != 3 {
		t.Fatalf("entries %+v, want a's two and b's", f.entries("m"))
	}
	q := &batchCounter{}
	e := testEngine(&Engine{Store: f, Queue: q, Models: models, Log: slog.New(slog.DiscardHandler)})
	for tick := range 2 {
		if err := e.start(context.Background(), "m"); err != nil {
			t.Errorf("start %d: %v (transactions refused: %d)", tick, err, f.refused)
		}
	}
	got := claimsOf(t, f.memTable, q.sent)
	seen := map[string]int{}
	for _, m := range q.sent {
		seen[fmt.Sprintf("%s/%d", m.Batch, m.Chunk)]++
	}
	if seen["a/1"] != 1 || seen["b/0"] != 1 || len(q.sent) != 2 {
		t.Errorf("claims sent %v, want a/1 and b/0 once each", got)
	}
	if n := f.inflightOf("m", 0); n != 64 {
		t.Errorf("in flight %d, want 64 (a/1, b/0)", n)
	}
	if rs := f.entries("m"); len(rs) != 0 {
		t.Errorf("entries left %+v, want none", rs)
	}
}

// takenMeanwhile is a schedTable where, before the start's first write of
// several claims, another claimer (a start after a plan, a startFallback)
// takes one claim's slots from the same shard.
type takenMeanwhile struct {
	*schedTable
	done bool
}

func (f *takenMeanwhile) ClaimFromPool(ctx context.Context, quota int, cs ...sched.Claim) error {
	if !f.done && len(cs) > 1 {
		f.done = true
		other := cs[0]
		other.Run = "other"
		if err := f.schedTable.ClaimFromPool(ctx, quota, other); err != nil {
			return err
		}
	}
	return f.schedTable.ClaimFromPool(ctx, quota, cs...)
}

// A write of eight claims that finds one claim's slots taken meanwhile
// fails whole (ErrNoCapacity), and the start then gives up the shard:
// seven claims' slots stay idle, with chunks waiting, until the next tick
// (a minute). One at a time, the start made the seven claims that fit.
// A start whose write of several claims finds part of the capacity taken
// meanwhile claims what is left one at a time. Before, it left the shard
// until the next tick.
func TestStartClaimsWhatFitsAfterCapacityTakenMeanwhile(t *testing.T) {
	t.Parallel()
	models, err := config.ParseModels([]byte("models:\n  - {name: m, provider: openai, base_url: http://x/v1, api_key_env: K, max_concurrency: 256}\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := &takenMeanwhile{schedTable: newSchedTable([]sched.Ready{{Model: "m", Tenant: "t", Batch: "a", Total: 20}})}
	q := &batchCounter{}
	e := testEngine(&Engine{Store: f, Queue: q, Models: models, Log: slog.New(slog.DiscardHandler)})
	if err := e.start(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	if n := f.inflightOf("m", 0); n != 256 || len(q.sent) != 7 {
		t.Fatalf("in flight %d after the start, its claims %v; want 256, the start's 7 beside the other's 1 (a/0)", n, claimsOf(t, f.memTable, q.sent))
	}
}
