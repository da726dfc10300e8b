package store

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/sched"
)

// The conformance suite of the scheduling methods (docs/design.md
// "Scheduling"): each promise of their conditions and transactions,
// against the emulator, each test on a table of its own.

const tenant = "acme"

// schedTable is a table holding batches of chunks of model "m".
type schedTable struct {
	*Store
	t   *testing.T
	ctx context.Context
}

func newSchedTable(t *testing.T) schedTable {
	t.Helper()
	return schedTable{Store: emulatorStore(t), t: t, ctx: context.Background()}
}

// addBatch records an in-progress batch of n pending chunks of model m,
// its chunks and its ready entry at chunk 0.
func (s schedTable) addBatch(id string, priority, n int) sched.Ready {
	s.t.Helper()
	exp := time.Now().Add(time.Hour).Unix()
	b := batch.Batch{ID: id, Tenant: tenant, Status: batch.InProgress, Endpoint: "/v1/chat/completions",
		CreatedAt: time.Now().Unix(), ExpiresAt: &exp, ChunksTotal: n, Priority: priority, Started: true}
	if _, _, err := s.CreateBatch(s.ctx, b, IdemKey{}); err != nil {
		s.t.Fatal(err)
	}
	if err := s.PutChunks(s.ctx, pendingChunks(id, n)); err != nil {
		s.t.Fatal(err)
	}
	r := sched.Ready{Model: "m", Tenant: tenant, Batch: id, Priority: priority, Total: n}
	if err := s.PutReady(s.ctx, r); err != nil {
		s.t.Fatal(err)
	}
	return s.head()
}

func pendingChunks(id string, n int) []batch.Chunk {
	cs := make([]batch.Chunk, n)
	for i := range cs {
		cs[i] = batch.Chunk{Batch: id, Tenant: tenant, Index: i, Rows: 5, Model: "m", State: batch.ChunkPending, NextSame: -1}
	}
	return cs
}

func (s schedTable) head() sched.Ready {
	s.t.Helper()
	r, ok, err := s.ReadyHead(s.ctx, "m")
	if err != nil || !ok {
		s.t.Fatalf("ready head: %+v %v %v", r, ok, err)
	}
	return r
}

// entries is the first n entries of model m's ready index.
func (s schedTable) entries(n int) []sched.Ready {
	s.t.Helper()
	rs, _, err := s.ReadyHeads(s.ctx, "m", n)
	if err != nil {
		s.t.Fatal(err)
	}
	return rs
}

func (s schedTable) chunk(id string, i int) batch.Chunk {
	s.t.Helper()
	c, err := s.GetChunk(s.ctx, id, i)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

func (s schedTable) inflight() int {
	s.t.Helper()
	n, err := s.InFlight(s.ctx, "m")
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// claimOf is the claim of r's chunk for run with slots, the entry moving
// to the next chunk (none after the last).
func claimOf(r sched.Ready, run string, slots int, lease time.Time) sched.Claim {
	after := r.Next + 1
	if after >= r.Total {
		after = -1
	}
	return sched.Claim{Entry: r, After: after, Run: run, Slots: slots, Lease: lease}
}

func (s schedTable) claim(r sched.Ready, run string, slots int, lease time.Time) batch.Chunk {
	s.t.Helper()
	if err := s.ClaimFromPool(s.ctx, 4, claimOf(r, run, slots, lease)); err != nil {
		s.t.Fatalf("claim chunk %d of %s: %v", r.Next, r.Batch, err)
	}
	return s.chunk(r.Batch, r.Next)
}

// commitOf is a commit of claimed chunk c: 5 completed rows, usage of two
// models.
func commitOf(c batch.Chunk, attempt string) sched.Commit {
	c.Attempt, c.Pattern = attempt, "ooooo"
	return sched.Commit{Chunk: c, Completed: 5, Day: "2026-12-01", ChunksTotal: 3,
		UsageByModel: map[string]sched.UsageAgg{"m": {Requests: 4}, "m-fallback": {Requests: 1}, "m-third": {Requests: 1}}}
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func TestSchedConformanceReadyOrder(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	lease := time.Now().Add(time.Minute)
	a := s.addBatch("batch_a", 0, 3)
	s.addBatch("batch_b", 0, 3)
	// b joined the turn where it stood: a first by id, then they take turns.
	var order []string
	for range 4 {
		h := s.head()
		s.claim(h, "run-"+h.Batch, 1, lease)
		order = append(order, h.Batch)
	}
	if want := []string{"batch_a", "batch_b", "batch_a", "batch_b"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("claims in order %v, want %v", order, want)
	}
	if a.Seq != 0 {
		t.Fatalf("first entry at seq %d, want 0", a.Seq)
	}
	// A higher priority goes first, whatever the turns.
	if hi := s.addBatch("batch_hi", 5, 1); hi.Batch != "batch_hi" {
		t.Fatalf("head %+v, want the priority-5 batch", hi)
	}
}

func TestSchedConformanceClaimFromPool(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	lease := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	a := s.addBatch("batch_a", 0, 3)
	c := s.claim(a, "run-a", 3, lease)
	if c.State != batch.ChunkClaimed || c.Run != "run-a" || c.Slots != 3 || c.Attempts != 1 || c.Lease != lease.UnixMilli() {
		t.Fatalf("claimed chunk %+v", c)
	}
	if h := s.head(); h.Batch != "batch_a" || h.Next != 1 || h.Seq != a.Seq+1 {
		t.Fatalf("entry after the claim %+v, want chunk 1 one turn later", h)
	}
	if n := s.inflight(); n != 3 {
		t.Fatalf("in flight %d, want 3", n)
	}
	b := s.addBatch("batch_b", 7, 1)
	wantErr(t, "claim past the quota", s.ClaimFromPool(s.ctx, 4, claimOf(b, "run-b", 2, lease)), ErrNoCapacity)
	if s.chunk("batch_b", 0).State != batch.ChunkPending || s.head().SK() != b.SK() {
		t.Fatal("a claim without capacity changed the chunk or its entry")
	}
	wantErr(t, "claim of a stale entry", s.ClaimFromPool(s.ctx, 4, claimOf(a, "run-x", 1, lease)), ErrRaced)
	// An entry at a chunk that is not pending (written directly: PutReady
	// writes none).
	stale := sched.Ready{Model: "m", Tenant: tenant, Batch: "batch_a", Seq: 50, Next: 0, Total: 3}
	if _, err := s.DB.PutItem(s.ctx, &dynamodb.PutItemInput{TableName: &s.Table, Item: readyItem(stale)}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "claim of a chunk not pending", s.ClaimFromPool(s.ctx, 4, claimOf(stale, "run-y", 1, lease)), ErrRaced)
	if n := s.inflight(); n != 3 {
		t.Fatalf("in flight %d after the failed claims, want 3", n)
	}
	if free, err := s.FreeSlots(s.ctx, "m", []int{4}); err != nil || free[0] != 1 {
		t.Fatalf("free slots %v %v, want [1]", free, err)
	}
}

// Claims of several chunks in one write: all of them, as if made one
// after another (entries taking turns, an entry stepped twice), or none.
func TestSchedConformanceClaimMany(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	lease := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	s.addBatch("batch_a", 0, 3)
	s.addBatch("batch_b", 0, 1)
	rs := s.entries(2)
	if len(rs) != 2 {
		t.Fatalf("first 2 entries: %+v", rs)
	}
	a, b := rs[0], rs[1]
	a1, _ := claimOf(a, "", 0, lease).Stepped()
	a2, _ := claimOf(a1, "", 0, lease).Stepped()
	cs := []sched.Claim{claimOf(a, "run-a0", 2, lease), claimOf(b, "run-b0", 2, lease), claimOf(a1, "run-a1", 2, lease)}
	if err := s.ClaimFromPool(s.ctx, 6, cs...); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if got := s.chunk(c.Entry.Batch, c.Entry.Next); got.State != batch.ChunkClaimed || got.Run != c.Run || got.Slots != 2 || got.Attempts != 1 {
			t.Fatalf("chunk %d of %s after the claims: %+v", c.Entry.Next, c.Entry.Batch, got)
		}
	}
	rs, all, err := s.ReadyHeads(s.ctx, "m", 10)
	if err != nil || !all || !reflect.DeepEqual(rs, []sched.Ready{a2}) {
		t.Fatalf("ready index after the claims: %+v (all %v, %v), want only %+v", rs, all, err, a2)
	}
	if n := s.inflight(); n != 6 {
		t.Fatalf("in flight %d, want 6", n)
	}
	// A chunk of the claims no longer pending, or an entry moved: none of
	// them is made.
	s.addBatch("batch_c", 0, 2)
	if rs = s.entries(2); len(rs) != 2 || rs[1].Batch != "batch_c" {
		t.Fatalf("entries %+v; want batch_a's, then batch_c's at its turn", rs)
	}
	c := rs[1]
	c1, _ := claimOf(c, "", 0, lease).Stepped()
	wantErr(t, "claims past the quota together", s.ClaimFromPool(s.ctx, 7, claimOf(c, "run-c0", 1, lease), claimOf(c1, "run-c1", 1, lease)), ErrNoCapacity)
	if s.chunk("batch_c", 0).State != batch.ChunkPending || s.chunk("batch_c", 1).State != batch.ChunkPending || s.inflight() != 6 {
		t.Fatal("claims without capacity changed a chunk, an entry or the capacity")
	}
	wantErr(t, "claims of a stale entry", s.ClaimFromPool(s.ctx, 100, claimOf(c, "run-c0", 1, lease), claimOf(a, "run-x", 1, lease)), ErrRaced)
	stale := sched.Ready{Model: "m", Tenant: tenant, Batch: "batch_a", Seq: 50, Next: 0, Total: 3}
	if _, err := s.DB.PutItem(s.ctx, &dynamodb.PutItemInput{TableName: &s.Table, Item: readyItem(stale)}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "claims of a chunk not pending", s.ClaimFromPool(s.ctx, 100, claimOf(c, "run-c0", 1, lease), claimOf(stale, "run-y", 1, lease)), ErrRaced)
	if got := s.chunk("batch_c", 0); got.State != batch.ChunkPending || s.inflight() != 6 {
		t.Fatalf("failed claims changed chunk 0 of batch_c (%+v) or the capacity (%d)", got, s.inflight())
	}
	err = s.ClaimFromPool(s.ctx, 100, claimOf(c, "run-c0", 1, lease), sched.Claim{Entry: c1, After: -1, Run: "run-c1", Slots: 1, Shard: 1, Lease: lease})
	if err == nil || errors.Is(err, ErrRaced) || errors.Is(err, ErrNoCapacity) {
		t.Fatalf("claims on two shards in one write: %v, want refused", err)
	}
}

func TestSchedConformanceClaimAlone(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	s.addBatch("batch_a", 0, 1)
	lease := time.Now().Add(time.Minute)
	if err := s.ClaimAlone(s.ctx, s.chunk("batch_a", 0), "drain", lease); err != nil {
		t.Fatal(err)
	}
	if c := s.chunk("batch_a", 0); c.State != batch.ChunkClaimed || c.Run != "drain" || c.Slots != 0 || c.Attempts != 1 {
		t.Fatalf("chunk claimed alone: %+v", c)
	}
	wantErr(t, "second claim", s.ClaimAlone(s.ctx, s.chunk("batch_a", 0), "drain2", lease), ErrRaced)
	if n := s.inflight(); n != 0 {
		t.Fatalf("a claim alone took %d slots", n)
	}
}

func TestSchedConformanceCommitChunk(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	lease := time.Now().Add(time.Minute)
	c0 := s.claim(s.addBatch("batch_a", 0, 3), "run-0", 2, lease)

	other := commitOf(c0, "att-0")
	other.Chunk.Run = "run-other"
	wantErr(t, "commit by another run", s.CommitChunk(s.ctx, tenant, other), ErrChunkDone)

	cm := commitOf(c0, "att-0")
	staleNext := claimOf(sched.Ready{Model: "m", Tenant: tenant, Batch: "batch_a", Next: 1, Total: 3}, "run-1", 2, lease)
	cm.Next = &staleNext
	wantErr(t, "commit whose continuation moved", s.CommitChunk(s.ctx, tenant, cm), ErrRaced)
	if c := s.chunk("batch_a", 0); c.State != batch.ChunkClaimed {
		t.Fatalf("a raced commit changed its chunk: %+v", c)
	}

	next := claimOf(s.head(), "run-1", 2, lease)
	cm.Next = &next
	if err := s.CommitChunk(s.ctx, tenant, cm); err != nil {
		t.Fatal(err)
	}
	// The same commit again (a retry after an ambiguous error) under the
	// same token is a no-op: DynamoDB answers it with success, the
	// emulator (which keeps no tokens) with ErrChunkDone, which the engine
	// settles by reading the chunk (Engine.lostCommit). Either way it
	// adds nothing.
	if err := s.CommitChunk(s.ctx, tenant, cm); err != nil && !errors.Is(err, ErrChunkDone) {
		t.Fatalf("retried commit: %v", err)
	}
	if c := s.chunk("batch_a", 0); c.State != batch.ChunkDone || c.Attempt != "att-0" || c.Next == nil || c.Next.Run != "run-1" {
		t.Fatalf("committed chunk %+v", c)
	}
	c1 := s.chunk("batch_a", 1)
	if c1.State != batch.ChunkClaimed || c1.Run != "run-1" || c1.Slots != 2 {
		t.Fatalf("continuation %+v, want claimed by run-1 with the 2 slots", c1)
	}
	if n := s.inflight(); n != 2 {
		t.Fatalf("in flight %d after a continuation, want 2 (handed on)", n)
	}
	b, err := s.GetBatch(s.ctx, tenant, "batch_a")
	if err != nil || b.ChunksDone != 1 || b.RequestCounts.Completed != 5 {
		t.Fatalf("batch after one commit (and its retry): done %d completed %d %v, want 1 and 5", b.ChunksDone, b.RequestCounts.Completed, err)
	}

	// Chunk 1 commits without a continuation: its slots go back.
	if err := s.CommitChunk(s.ctx, tenant, commitOf(c1, "att-1")); err != nil {
		t.Fatal(err)
	}
	if n := s.inflight(); n != 0 {
		t.Fatalf("in flight %d, want 0 (slots given back)", n)
	}
	c2 := s.claim(s.head(), "run-2", 1, lease)
	wantErr(t, "the last chunk committed as not last", s.CommitChunk(s.ctx, tenant, commitOf(c2, "att-2")), ErrLast)
	last := commitOf(c2, "att-2")
	last.Last, last.FinalizeDue = true, time.Now()
	if err := s.CommitChunk(s.ctx, tenant, last); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "a commit of a done chunk", s.CommitChunk(s.ctx, tenant, commitOf(c2, "att-3")), ErrChunkDone)
	if b, _ := s.GetBatch(s.ctx, tenant, "batch_a"); b.ChunksDone != 3 || b.FinalizeDue == 0 {
		t.Fatalf("batch after its last chunk: done %d, finalize due %d", b.ChunksDone, b.FinalizeDue)
	}
	if n := s.inflight(); n != 0 {
		t.Fatalf("in flight %d at the end, want 0", n)
	}
}

func TestSchedConformanceRenewLease(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	c := s.claim(s.addBatch("batch_a", 0, 1), "run-a", 1, time.Now().Add(time.Minute))
	until := time.Now().Add(3 * time.Minute).Truncate(time.Millisecond)
	if err := s.RenewLease(s.ctx, c.Batch, 0, "run-a", until); err != nil {
		t.Fatal(err)
	}
	if got := s.chunk(c.Batch, 0).Lease; got != until.UnixMilli() {
		t.Fatalf("lease %d, want %d", got, until.UnixMilli())
	}
	wantErr(t, "renewal by another run", s.RenewLease(s.ctx, c.Batch, 0, "run-b", until), ErrLeaseLost)
	last := commitOf(c, "att")
	last.Last = true
	if err := s.CommitChunk(s.ctx, tenant, last); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "renewal of a done chunk", s.RenewLease(s.ctx, c.Batch, 0, "run-a", until), ErrLeaseLost)
}

func TestSchedConformanceExpiredLeasesAndTakeover(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	now := time.Now()
	h := s.addBatch("batch_a", 0, 3)
	s.claim(h, "run-0", 1, now.Add(-time.Second))
	s.claim(s.head(), "run-1", 1, now.Add(time.Minute))
	expired, err := s.ExpiredLeases(s.ctx, now, 10)
	if err != nil || len(expired) != 1 || expired[0].Index != 0 || expired[0].Run != "run-0" {
		t.Fatalf("expired leases %+v %v, want chunk 0 only", expired, err)
	}
	nc, err := s.Takeover(s.ctx, expired[0], "run-0b", now, now.Add(time.Minute))
	if err != nil || nc.Run != "run-0b" || nc.Attempts != 2 || nc.State != batch.ChunkClaimed {
		t.Fatalf("takeover: %+v %v", nc, err)
	}
	_, err = s.Takeover(s.ctx, expired[0], "run-0c", now, now.Add(time.Minute))
	wantErr(t, "takeover from a run that no longer holds it", err, ErrRaced)
	if expired, _ := s.ExpiredLeases(s.ctx, now, 10); len(expired) != 0 {
		t.Fatalf("expired after the takeover: %+v", expired)
	}
}

// The by-lease index is eventually consistent: a chunk read there as
// expired may have been renewed since. Its takeover must fail.
func TestSchedTakeoverOfRenewedLeaseFails(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	now := time.Now()
	s.claim(s.addBatch("batch_a", 0, 1), "run-0", 1, now.Add(-time.Second))
	expired, err := s.ExpiredLeases(s.ctx, now, 10)
	if err != nil || len(expired) != 1 {
		t.Fatalf("expired leases %+v %v", expired, err)
	}
	if err := s.RenewLease(s.ctx, "batch_a", 0, "run-0", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err = s.Takeover(s.ctx, expired[0], "run-1", now, now.Add(time.Minute))
	wantErr(t, "takeover of a renewed lease", err, ErrRaced)
	if c := s.chunk("batch_a", 0); c.Run != "run-0" || c.Attempts != 1 {
		t.Fatalf("chunk after the refused takeover: %+v", c)
	}
}

// A late plan (one whose lease ran out while it wrote) must not reset a
// chunk that the plan of record's claims moved on, and writes the chunks
// an earlier attempt did not: a cancel's drain may claim the chunks an
// attempt wrote before it recorded the plan, and the next attempt must
// still record the rest (before, it stopped, the batch's plan was never
// recorded and its runs waited for it forever).
func TestSchedPutChunksKeepsClaimedAndDone(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	lease := time.Now().Add(time.Minute)
	c0 := s.claim(s.addBatch("batch_a", 0, 3), "run-0", 1, lease)
	if err := s.CommitChunk(s.ctx, tenant, commitOf(c0, "att-0")); err != nil {
		t.Fatal(err)
	}
	s.claim(s.head(), "run-1", 1, lease)
	if err := s.PutChunks(s.ctx, pendingChunks("batch_a", 4)); err != nil {
		t.Fatalf("a late plan's chunks: %v", err)
	}
	if c := s.chunk("batch_a", 3); c.State != batch.ChunkPending || c.Rows != 5 {
		t.Fatalf("the chunk the earlier attempt did not write: %+v", c)
	}
	if c := s.chunk("batch_a", 0); c.State != batch.ChunkDone {
		t.Fatalf("done chunk after a late plan: %+v", c)
	}
	if c := s.chunk("batch_a", 1); c.State != batch.ChunkClaimed || c.Run != "run-1" {
		t.Fatalf("claimed chunk after a late plan: %+v", c)
	}
	// Over pending chunks (a plan attempt that wrote them and stopped) the
	// same plan is written again.
	if err := s.PutChunks(s.ctx, pendingChunks("batch_b", 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutChunks(s.ctx, pendingChunks("batch_b", 2)); err != nil {
		t.Fatalf("the same plan again over pending chunks: %v", err)
	}
}

// A plan that runs again after its first chunk was claimed (the claim moved
// the entry to chunk 1, one turn later) must not put an entry at chunk 0
// back: a commit of chunk 0 would then claim its own chunk.
func TestSchedReadyEntryOnlyAtPendingChunk(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	h := s.addBatch("batch_a", 0, 3)
	s.claim(h, "run-0", 1, time.Now().Add(time.Minute))
	moved := s.head()
	if moved.Next != 1 || moved.Seq != h.Seq+1 {
		t.Fatalf("entry after the claim %+v", moved)
	}
	if err := s.PutReady(s.ctx, h); err != nil { // what the plan's second attempt wrote
		t.Fatal(err)
	}
	if got := s.head(); got.SK() != moved.SK() || got.Next != 1 {
		t.Fatalf("head after the plan's second put: %+v, want still %+v", got, moved)
	}
}

// commitItems are the same request every time for the same commit: a
// retry under the same ClientRequestToken must be byte-for-byte the same.
func TestCommitItemsDeterministic(t *testing.T) {
	t.Parallel()
	s := &Store{Table: "t"}
	c := batch.Chunk{Batch: "b", Index: 0, Run: "r", Slots: 2, Model: "m"}
	cm := commitOf(c, "att")
	cm.Fallback = fallbackOf("b", 3, 0)
	first := s.commitItems(tenant, cm)
	for range 20 {
		again := commitOf(c, "att")
		again.Fallback = fallbackOf("b", 3, 0)
		if again := s.commitItems(tenant, again); !reflect.DeepEqual(again, first) {
			t.Fatal("commitItems built the same commit's items in another order")
		}
	}
}

// fallbackOf is the chunk of a batch's rows 2 and 4 (of chunk 0's five,
// rows a line of 5 bytes each) owed fallback model "f", at index i, and
// its ready entry at seq.
func fallbackOf(id string, i int, seq int64) *sched.FallbackChunk {
	c := batch.Chunk{Batch: id, Tenant: tenant, Index: i, Model: "f", State: batch.ChunkPending, Fallback: true, NextSame: -1,
		Start: 10, End: 25, FirstRow: 2, Rows: 2, Spans: batch.Spans{{Start: 10, End: 15, Row: 2, Rows: 1}, {Start: 20, End: 25, Row: 4, Rows: 1}}}
	return &sched.FallbackChunk{Chunk: c, Ready: sched.Ready{Model: "f", Tenant: tenant, Batch: id, Seq: seq, Next: i, Total: i + 1, Fallback: true}}
}

// TestSchedConformanceCommitWithFallback: a commit whose chunk's rows 2
// and 4 are owed a fallback commits the chunk with its other rows only,
// hands its slots on, and adds a pending chunk of the fallback model with
// those rows and its ready entry, numbered from the batch's chunk count
// (docs/design.md "Scheduling", fallback rows); a stale count, or an entry
// key taken, fails it whole.
func TestSchedConformanceCommitWithFallback(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	lease := time.Now().Add(time.Minute)
	c0 := s.claim(s.addBatch("batch_f", 0, 2), "run-0", 2, lease)

	cm := commitOf(c0, "att-0")
	cm.Completed = 3
	cm.Chunk.Pattern, cm.Chunk.Rows, cm.Chunk.Start, cm.Chunk.End, cm.Chunk.FirstRow = "ooo", 3, 0, 20, 0
	cm.Chunk.Spans = batch.Spans{{Start: 0, End: 10, Row: 0, Rows: 2}, {Start: 15, End: 20, Row: 3, Rows: 1}}
	cm.Fallback = fallbackOf("batch_f", 1, 0)
	wantErr(t, "commit with a fallback chunk at a stale count", s.CommitChunk(s.ctx, tenant, cm), ErrRenumber)
	next := claimOf(s.head(), "run-1", 2, lease)
	cm.Next = &next
	wantErr(t, "commit with a fallback chunk at its continuation's number", s.CommitChunk(s.ctx, tenant, cm), ErrRenumber)
	if c := s.chunk("batch_f", 0); c.State != batch.ChunkClaimed {
		t.Fatalf("a stale commit changed its chunk: %+v", c)
	}

	cm.Fallback = fallbackOf("batch_f", 2, 0)
	if err := s.CommitChunk(s.ctx, tenant, cm); err != nil {
		t.Fatal(err)
	}
	if c := s.chunk("batch_f", 0); c.State != batch.ChunkDone || c.Rows != 3 || c.End != 20 || len(c.Spans) != 2 || c.Spans[1].Row != 3 {
		t.Fatalf("committed chunk %+v, want done with rows 0, 1 and 3", c)
	}
	if c1 := s.chunk("batch_f", 1); c1.State != batch.ChunkClaimed || c1.Run != "run-1" || c1.Slots != 2 {
		t.Fatalf("continuation %+v, want claimed by run-1 with the 2 slots", c1)
	}
	fb := s.chunk("batch_f", 2)
	if fb.State != batch.ChunkPending || fb.Model != "f" || !fb.Fallback || fb.Rows != 2 || fb.Row(1) != 4 || fb.NextSame != -1 {
		t.Fatalf("fallback chunk %+v, want pending of f with rows 2 and 4", fb)
	}
	b, err := s.GetBatch(s.ctx, tenant, "batch_f")
	if err != nil || b.ChunksTotal != 3 || b.ChunksDone != 1 || b.RequestCounts.Completed != 3 {
		t.Fatalf("batch: total %d done %d completed %d %v, want 3, 1, 3", b.ChunksTotal, b.ChunksDone, b.RequestCounts.Completed, err)
	}
	if n := s.inflight(); n != 2 {
		t.Fatalf("in flight %d, want 2 (handed on)", n)
	}

	// Chunk 1's rows are owed f too: its entry goes beside the first, at
	// the same turn (a fallback entry's key names its chunk).
	c1 := s.chunk("batch_f", 1)
	cm1 := commitOf(c1, "att-1")
	cm1.Fallback = fallbackOf("batch_f", 3, 0)
	if err := s.CommitChunk(s.ctx, tenant, cm1); err != nil {
		t.Fatal(err)
	}
	if n := s.inflight(); n != 0 {
		t.Fatalf("in flight %d, want 0 (slots given back)", n)
	}

	// Each fallback chunk is claimed once from f's ready index, which
	// then holds nothing.
	for _, want := range []int{2, 3} {
		r, ok, err := s.ReadyHead(s.ctx, "f")
		if err != nil || !ok || r.Next != want {
			t.Fatalf("ready head of f: %+v %v %v, want chunk %d", r, ok, err, want)
		}
		if err := s.ClaimFromPool(s.ctx, 2, claimOf(r, "run-f", 1, lease)); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok, err := s.ReadyHead(s.ctx, "f"); ok || err != nil {
		t.Fatalf("ready head of f after its claims: %+v %v", r, err)
	}
}

// TestSchedConformanceCommitTakesTheContinuationsFence: a commit whose
// continuation names its execution (Claim.Exec) takes the claimed run's
// fence with the claim: another execution of the run is fenced out until
// the lease ends, the named one takes it as its own and renews it
// (docs/design.md "Scheduling", continuations).
func TestSchedConformanceCommitTakesTheContinuationsFence(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	now := time.Now()
	lease := now.Add(time.Minute)
	c0 := s.claim(s.addBatch("batch_x", 0, 2), "run-0", 2, lease)
	cm := commitOf(c0, "att-0")
	cm.ChunksTotal = 2
	next := claimOf(s.head(), "run-1", 2, lease)
	next.Exec = "exec-cont"
	cm.Next = &next
	if err := s.CommitChunk(s.ctx, tenant, cm); err != nil {
		t.Fatal(err)
	}
	_, err := s.TakeFence(s.ctx, "batch_x", 1, "run-1", "exec-other", now, lease)
	wantErr(t, "a delivery of the claimed run while its continuation holds the fence", err, ErrFenced)
	c1, err := s.TakeFence(s.ctx, "batch_x", 1, "run-1", "exec-cont", now, lease)
	if err != nil || c1.Run != "run-1" || c1.State != batch.ChunkClaimed || c1.Attempts != 1 {
		t.Fatalf("the continuation's own take: %+v, %v", c1, err)
	}
	if err := s.RenewExec(s.ctx, "batch_x", 1, "run-1", "exec-cont", lease.Add(time.Minute)); err != nil {
		t.Fatalf("the continuation renews: %v", err)
	}
	if _, err := s.TakeFence(s.ctx, "batch_x", 1, "run-1", "exec-other", lease.Add(2*time.Minute+time.Second), lease.Add(3*time.Minute)); err != nil {
		t.Fatalf("taken once the continuation's lease ended: %v", err)
	}
}

// TestSchedConformanceLastCommitMovesTheBatchToItsFinalize: the commit of a
// batch's last chunk moves the batch in the by-due index to its finalize,
// with the index attributes batchIndexes derives for the batch it leaves
// (the one place they come from), so the tick finds it then and not before
// (docs/design.md "Tick").
func TestSchedConformanceLastCommitMovesTheBatchToItsFinalize(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	due := time.Unix(time.Now().Add(30*time.Second).Unix(), 0)
	c := s.claim(s.addBatch("batch_d", 0, 1), "run-0", 1, time.Now().Add(time.Minute))
	if s.dueAt(due, "batch_d") {
		t.Fatal("a batch due at the end of its window is due at its finalize before its last commit")
	}
	last := commitOf(c, "att-0")
	last.ChunksTotal, last.Last, last.FinalizeDue = 1, true, due
	if err := s.CommitChunk(s.ctx, tenant, last); err != nil {
		t.Fatal(err)
	}
	b, err := s.GetBatch(s.ctx, tenant, "batch_d")
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.DB.GetItem(s.ctx, &dynamodb.GetItemInput{TableName: &s.Table, Key: key(batchPK(tenant), batchSK("batch_d")), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range batchIndexes(&b) {
		if got := out.Item[name]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s after the last commit: %v, want %v (batchIndexes of the batch it left)", name, got, want)
		}
	}
	if s.dueAt(due.Add(-time.Second), "batch_d") || !s.dueAt(due, "batch_d") {
		t.Errorf("the tick finds the batch before its finalize (%s) or not at it", due)
	}
}

// dueAt reports whether DueBatches lists batch id at now.
func (s schedTable) dueAt(now time.Time, id string) bool {
	s.t.Helper()
	refs, err := s.DueBatches(s.ctx, now, 100)
	if err != nil {
		s.t.Fatal(err)
	}
	return slices.ContainsFunc(refs, func(r ActiveRef) bool { return r.ID == id })
}

// Two claims of one chunk in one write (two entries at it) fail as the
// second of them made one after another would: ErrRaced, nothing written.
func TestSchedConformanceClaimManyOneChunkTwice(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	lease := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	s.addBatch("batch_b", 0, 1)
	s.addBatch("batch_a", 0, 2)
	for _, r := range s.entries(10) {
		if r.Batch == "batch_a" {
			s.claim(r, "run-a0", 1, lease) // a's entry moves on to chunk 1, seq + 1
		}
	}
	// The plan of batch_a runs again: its entry at chunk 1 joins at the head's seq.
	if err := s.PutReady(s.ctx, sched.Ready{Model: "m", Tenant: tenant, Batch: "batch_a", Next: 1, Total: 2}); err != nil {
		t.Fatal(err)
	}
	rs := s.entries(10)
	var dup []sched.Ready
	for _, r := range rs {
		if r.Batch == "batch_a" && r.Next == 1 {
			dup = append(dup, r)
		}
	}
	if len(dup) != 2 {
		t.Fatalf("entries %+v, want two of batch_a at chunk 1", rs)
	}
	err := s.ClaimFromPool(s.ctx, 4, claimOf(dup[0], "run-x", 1, lease), claimOf(dup[1], "run-y", 1, lease))
	if !errors.Is(err, ErrRaced) {
		t.Errorf("two claims of one chunk in one write: %v, want ErrRaced, as made one after another", err)
	}
}
