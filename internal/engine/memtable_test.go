package engine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// memTable is the engine's tests' Store: the whole of it, in memory, with
// the conditions internal/store documents for each method (and its
// conformance suite checks on the emulator): a claim takes a pending
// chunk and its ready entry, a commit or a lease move needs the chunk
// claimed by the run, the execution fence (docs/design.md "Scheduling",
// fence), capacity shards, the batch's chunk count on a commit that adds
// a chunk, progress reports on the counts the run last knew. Every write
// is one step under one lock, as a transaction is. A test that needs a
// fault wraps it and overrides the method that fails.
type memTable struct {
	mu       sync.Mutex
	batches  map[string]batch.Batch
	chunks   map[string]map[int]batch.Chunk
	fences   map[chunkRef]fence
	ready    map[string]map[string]sched.Ready // by model, by sort key
	inflight map[string]map[int]int            // by model, by capacity shard
	files    map[string]file.File              // by tenant/id
	// commits are the commits (and splits) that took effect, in order.
	commits []sched.Commit
}

type chunkRef struct {
	batch string
	index int
}

// fence is a chunk's execution fence: the execution that may send its
// run's rows, until when.
type fence struct {
	exec  string
	until time.Time
}

func newMemTable() *memTable {
	return &memTable{batches: map[string]batch.Batch{}, chunks: map[string]map[int]batch.Chunk{}, fences: map[chunkRef]fence{},
		ready: map[string]map[string]sched.Ready{}, inflight: map[string]map[int]int{}, files: map[string]file.File{}}
}

var _ Store = (*memTable)(nil)

// Set-up and inspection, for the tests.

// putBatch stores b as it is.
func (m *memTable) putBatch(b batch.Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches[b.ID] = b
}

// batch is batch id as it is now.
func (m *memTable) batch(id string) batch.Batch {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.batches[id]
}

// putChunk stores c as it is (dropping its fence).
func (m *memTable) putChunk(c batch.Chunk) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setChunk(c)
	delete(m.fences, chunkRef{c.Batch, c.Index})
}

// chunk is chunk i of batch id as it is now.
func (m *memTable) chunk(id string, i int) batch.Chunk {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.chunks[id][i]
}

// fenceOf is the execution holding chunk i's fence, "" for none.
func (m *memTable) fenceOf(id string, i int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fences[chunkRef{id, i}].exec
}

// putEntry adds ready entry r as it is.
func (m *memTable) putEntry(r sched.Ready) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setEntry(r)
}

// entries are model's ready entries, head first.
func (m *memTable) entries(model string) []sched.Ready {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []sched.Ready
	for _, sk := range slices.Sorted(maps.Keys(m.ready[model])) {
		rs = append(rs, m.ready[model][sk])
	}
	return rs
}

// setInflight sets model's slots in flight, by capacity shard.
func (m *memTable) setInflight(model string, shards ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inflight[model] = map[int]int{}
	for k, n := range shards {
		m.inflight[model][k] = n
	}
}

// inflightOf is model's slots in flight on shard.
func (m *memTable) inflightOf(model string, shard int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inflight[model][shard]
}

// committed are the commits that took effect, in order.
func (m *memTable) committed() []sched.Commit {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.commits)
}

func (m *memTable) setChunk(c batch.Chunk) {
	if m.chunks[c.Batch] == nil {
		m.chunks[c.Batch] = map[int]batch.Chunk{}
	}
	m.chunks[c.Batch][c.Index] = c
}

func (m *memTable) setEntry(r sched.Ready) {
	if m.ready[r.Model] == nil {
		m.ready[r.Model] = map[string]sched.Ready{}
	}
	m.ready[r.Model][r.SK()] = r
}

// claimedBy reports whether chunk c (as stored) is claimed by run.
func claimedBy(c batch.Chunk, ok bool, run string) bool {
	return ok && c.State == batch.ChunkClaimed && c.Run == run
}

func (m *memTable) stored(id string, i int) (batch.Chunk, bool) {
	c, ok := m.chunks[id][i]
	return c, ok
}

// Batches and files.

func (m *memTable) GetBatch(_ context.Context, tenant, id string) (batch.Batch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.batches[id]
	if !ok || b.Tenant != tenant {
		return batch.Batch{}, store.ErrBatchNotFound
	}
	return b, nil
}

// UpdateBatch runs fn under the table's lock: nothing is written between
// its read and its write, which is what the store's version condition
// makes sure of.
func (m *memTable) UpdateBatch(_ context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.batches[id]
	if !ok || b.Tenant != tenant {
		return batch.Batch{}, store.ErrBatchNotFound
	}
	if err := fn(&b); err != nil {
		return b, err
	}
	m.batches[id] = b
	return b, nil
}

// DueBatches lists the batches whose Due is at or before now, as the
// by-due index does (store.batchIndexes).
func (m *memTable) DueBatches(_ context.Context, now time.Time, limit int) ([]store.ActiveRef, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	type due struct {
		at  int64
		ref store.ActiveRef
	}
	var ds []due
	for _, b := range m.batches {
		if at, ok := b.Due(); ok && at <= now.Unix() {
			ds = append(ds, due{at, store.ActiveRef{Tenant: b.Tenant, ID: b.ID, Priority: b.Priority}})
		}
	}
	slices.SortFunc(ds, func(a, b due) int { return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.ref.ID, b.ref.ID)) })
	var refs []store.ActiveRef
	for _, d := range ds[:min(len(ds), limit)] {
		refs = append(refs, d.ref)
	}
	return refs, nil
}

func (m *memTable) OldestActive(context.Context) (batch.Batch, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var oldest batch.Batch
	found := false
	for _, b := range m.batches {
		if !b.Status.Terminal() && b.Status != batch.Scheduled && (!found || b.CreatedAt < oldest.CreatedAt) {
			oldest, found = b, true
		}
	}
	return oldest, found, nil
}

// ReleaseInflight holds no tenant's in-flight slots: none to give back.
func (m *memTable) ReleaseInflight(context.Context, string, string) (bool, error) { return false, nil }

func (m *memTable) GetFile(_ context.Context, tenant, id string) (file.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[tenant+"/"+id]
	if !ok {
		return file.File{}, file.ErrNotFound
	}
	return f, nil
}

func (m *memTable) PutFileOverwrite(_ context.Context, f file.File) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[f.Tenant+"/"+f.ID] = f
	return nil
}

// PutBatchFile checks the batch and writes f in one step, as the
// store's transaction does.
func (m *memTable) PutBatchFile(_ context.Context, f file.File, batchID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.batches[batchID]; !ok || b.Status.Terminal() {
		return store.ErrBatchEnded
	}
	m.files[f.Tenant+"/"+f.ID] = f
	return nil
}

// Chunks and the ready index.

func (m *memTable) GetChunk(_ context.Context, id string, i int) (batch.Chunk, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.stored(id, i)
	if !ok {
		return batch.Chunk{}, store.ErrBatchNotFound
	}
	return c, nil
}

// Chunks lists a batch's chunks by first row (store.Chunks).
func (m *memTable) Chunks(_ context.Context, id string) ([]batch.Chunk, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := slices.Collect(maps.Values(m.chunks[id]))
	slices.SortFunc(cs, func(a, b batch.Chunk) int {
		return cmp.Or(cmp.Compare(a.FirstRow, b.FirstRow), cmp.Compare(a.Index, b.Index))
	})
	return cs, nil
}

// PutChunks writes each chunk where it is absent or still pending.
func (m *memTable) PutChunks(_ context.Context, cs []batch.Chunk) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range cs {
		if old, ok := m.stored(c.Batch, c.Index); !ok || old.State == batch.ChunkPending {
			m.setChunk(c)
		}
	}
	return nil
}

func (m *memTable) ReadyHead(_ context.Context, model string) (sched.Ready, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.head(model, "")
}

// head is model's first entry whose sort key starts with prefix.
func (m *memTable) head(model, prefix string) (sched.Ready, bool, error) {
	for _, sk := range slices.Sorted(maps.Keys(m.ready[model])) {
		if strings.HasPrefix(sk, prefix) {
			return m.ready[model][sk], true, nil
		}
	}
	return sched.Ready{}, false, nil
}

func (m *memTable) JoinSeq(_ context.Context, model string, priority int) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, _, _ := m.head(model, sched.ReadyPrefix(priority))
	return h.Seq, nil
}

// PutReady adds r at its priority's turn, only at a pending chunk and
// never over an entry of the same key; otherwise it writes nothing.
func (m *memTable) PutReady(_ context.Context, r sched.Ready) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok, _ := m.head(r.Model, sched.ReadyPrefix(r.Priority)); ok && h.Batch != r.Batch {
		r.Seq = h.Seq
	}
	c, ok := m.stored(r.Batch, r.Next)
	if _, taken := m.ready[r.Model][r.SK()]; !ok || c.State != batch.ChunkPending || taken {
		return nil
	}
	m.setEntry(r)
	return nil
}

// DeleteReady removes r's entry while it still points at r.Next.
func (m *memTable) DeleteReady(_ context.Context, r sched.Ready) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.ready[r.Model][r.SK()]; ok && cur.Next == r.Next {
		delete(m.ready[r.Model], r.SK())
	}
	return nil
}

// Capacity and claims.

func (m *memTable) FreeSlots(_ context.Context, model string, quotas []int) ([]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	free := slices.Clone(quotas)
	for k := range free {
		free[k] -= m.inflight[model][k]
	}
	return free, nil
}

// roomFor reports whether shard of model has room for n more slots of quota.
func (m *memTable) roomFor(model string, shard, n, quota int) bool {
	return m.inflight[model][shard]+n <= quota
}

func (m *memTable) addInflight(model string, shard, n int) {
	if m.inflight[model] == nil {
		m.inflight[model] = map[int]int{}
	}
	m.inflight[model][shard] += n
}

// claimable reports whether claim c's chunk is pending and its entry there.
func (m *memTable) claimable(c sched.Claim) bool {
	ch, ok := m.stored(c.Entry.Batch, c.Entry.Next)
	_, listed := m.ready[c.Entry.Model][c.Entry.SK()]
	return ok && ch.State == batch.ChunkPending && listed
}

// claim applies claim c: the chunk claimed (with the fence for c.Exec),
// its entry moved on to c.After or removed.
func (m *memTable) claim(c sched.Claim) {
	ch, _ := m.stored(c.Entry.Batch, c.Entry.Next)
	ch.State, ch.Run, ch.Lease, ch.Slots, ch.Shard = batch.ChunkClaimed, c.Run, c.Lease.UnixMilli(), c.Slots, c.Shard
	ch.Attempts++
	m.setChunk(ch)
	if c.Exec != "" {
		m.fences[chunkRef{ch.Batch, ch.Index}] = fence{c.Exec, c.Lease}
	}
	delete(m.ready[c.Entry.Model], c.Entry.SK())
	if c.After >= 0 {
		next := c.Entry
		next.Next, next.Seq = c.After, c.Entry.Seq+1
		m.setEntry(next)
	}
}

// ClaimFromPool: ErrNoCapacity when the shard has no room for the claims'
// slots, ErrRaced when a chunk is not pending or an entry they take is
// gone (sched.Moves); all or none.
func (m *memTable) ClaimFromPool(_ context.Context, quota int, cs ...sched.Claim) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	slots := 0
	for _, c := range cs {
		slots += c.Slots
	}
	if slots > 0 && !m.roomFor(cs[0].Entry.Model, cs[0].Shard, slots, quota) {
		return store.ErrNoCapacity
	}
	taken, _ := sched.Moves(cs)
	for _, r := range taken {
		if _, listed := m.ready[r.Model][r.SK()]; !listed {
			return store.ErrRaced
		}
	}
	chunks := map[chunkRef]bool{}
	for _, c := range cs {
		ch, ok := m.stored(c.Entry.Batch, c.Entry.Next)
		if !ok || ch.State != batch.ChunkPending || chunks[chunkRef{ch.Batch, ch.Index}] {
			return store.ErrRaced
		}
		chunks[chunkRef{ch.Batch, ch.Index}] = true
	}
	m.addInflight(cs[0].Entry.Model, cs[0].Shard, slots)
	for _, c := range cs {
		m.claim(c)
	}
	return nil
}

// ReadyHeads is model's first n entries, and whether they are all.
func (m *memTable) ReadyHeads(_ context.Context, model string, n int) ([]sched.Ready, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []sched.Ready
	for _, sk := range slices.Sorted(maps.Keys(m.ready[model])) {
		if len(rs) == n {
			return rs, false, nil
		}
		rs = append(rs, m.ready[model][sk])
	}
	return rs, true, nil
}

// ClaimAlone claims a pending chunk with no slots; ErrRaced otherwise.
func (m *memTable) ClaimAlone(_ context.Context, c batch.Chunk, run string, lease time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ok := m.stored(c.Batch, c.Index)
	if !ok || ch.State != batch.ChunkPending {
		return store.ErrRaced
	}
	ch.State, ch.Run, ch.Lease, ch.Slots = batch.ChunkClaimed, run, lease.UnixMilli(), 0
	ch.Attempts++
	m.setChunk(ch)
	return nil
}

// SetChunkSlots: ErrNoCapacity when c's shard has no room for more,
// ErrChunkDone when the chunk is not the run's with c.Slots.
func (m *memTable) SetChunkSlots(_ context.Context, c batch.Chunk, to, quota int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delta := to - c.Slots
	if delta == 0 {
		return nil
	}
	ch, ok := m.stored(c.Batch, c.Index)
	if !claimedBy(ch, ok, c.Run) || ch.Slots != c.Slots {
		return store.ErrChunkDone
	}
	if delta > 0 && !m.roomFor(c.Model, c.Shard, delta, quota) {
		return store.ErrNoCapacity
	}
	ch.Slots, ch.Shard = to, c.Shard
	m.setChunk(ch)
	m.addInflight(c.Model, c.Shard, delta)
	return nil
}

// Leases and the fence.

// ExpiredLeases lists the claimed chunks whose lease ended before now.
func (m *memTable) ExpiredLeases(_ context.Context, now time.Time, limit int) ([]batch.Chunk, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var cs []batch.Chunk
	for _, id := range slices.Sorted(maps.Keys(m.chunks)) {
		for _, i := range slices.Sorted(maps.Keys(m.chunks[id])) {
			if c := m.chunks[id][i]; c.State == batch.ChunkClaimed && c.Lease < now.UnixMilli() && len(cs) < limit {
				cs = append(cs, c)
			}
		}
	}
	return cs, nil
}

// Takeover gives a claimed chunk whose lease ended before now to run,
// dropping the old run's fence; ErrRaced otherwise.
func (m *memTable) Takeover(_ context.Context, c batch.Chunk, run string, now, lease time.Time) (batch.Chunk, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ok := m.stored(c.Batch, c.Index)
	if !claimedBy(ch, ok, c.Run) || ch.Lease >= now.UnixMilli() {
		return c, store.ErrRaced
	}
	ch.Run, ch.Lease = run, lease.UnixMilli()
	ch.Attempts++
	m.setChunk(ch)
	delete(m.fences, chunkRef{ch.Batch, ch.Index})
	return ch, nil
}

// moveLease moves the lease of chunk i of id, claimed by run, to until
// if ok allows the chunk's fence; ErrLeaseLost otherwise.
func (m *memTable) moveLease(id string, i int, run string, until time.Time, ok func(fence) bool) (batch.Chunk, error) {
	ch, found := m.stored(id, i)
	if !claimedBy(ch, found, run) || !ok(m.fences[chunkRef{id, i}]) {
		return ch, store.ErrLeaseLost
	}
	ch.Lease = until.UnixMilli()
	m.setChunk(ch)
	return ch, nil
}

func (m *memTable) RenewLease(_ context.Context, id string, i int, run string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.moveLease(id, i, run, until, func(fence) bool { return true })
	return err
}

// TakeFence makes exec the one execution of run, if no other live one
// holds the fence; ErrFenced otherwise.
func (m *memTable) TakeFence(_ context.Context, id string, i int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, err := m.moveLease(id, i, run, until, func(f fence) bool { return f.exec == "" || f.until.Before(now) || f.exec == exec })
	if err != nil {
		return batch.Chunk{}, store.ErrFenced
	}
	m.fences[chunkRef{id, i}] = fence{exec, until}
	return ch, nil
}

func (m *memTable) RenewExec(_ context.Context, id string, i int, run, exec string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.moveLease(id, i, run, until, func(f fence) bool { return f.exec == exec }); err != nil {
		return err
	}
	m.fences[chunkRef{id, i}] = fence{exec, until}
	return nil
}

// HandOver ends exec's hold of the fence and moves the lease to until;
// a fence another execution holds stays (ErrLeaseLost).
func (m *memTable) HandOver(_ context.Context, id string, i int, run, exec string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.moveLease(id, i, run, until, func(f fence) bool { return f.exec == "" || f.exec == exec }); err != nil {
		return err
	}
	delete(m.fences, chunkRef{id, i})
	return nil
}

func (m *memTable) ReleaseFence(_ context.Context, id string, i int, exec string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fences[chunkRef{id, i}].exec == exec {
		delete(m.fences, chunkRef{id, i})
	}
	return nil
}

// ReportProgress moves the chunk's reported counts up to done, and the
// batch's progress by the difference, while the run holds the chunk and
// its counts are what the run last knew (none reported counts as those);
// ErrLeaseLost otherwise.
func (m *memTable) ReportProgress(_ context.Context, c batch.Chunk, done batch.Counts) (batch.Counts, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	to := batch.Counts{Completed: max(done.Completed, c.ReportedCompleted), Failed: max(done.Failed, c.ReportedFailed)}
	dc, df := to.Completed-c.ReportedCompleted, to.Failed-c.ReportedFailed
	if dc == 0 && df == 0 {
		return to, nil
	}
	ch, ok := m.stored(c.Batch, c.Index)
	none := ch.ReportedCompleted == 0 && ch.ReportedFailed == 0
	if !claimedBy(ch, ok, c.Run) || !(none || (ch.ReportedCompleted == c.ReportedCompleted && ch.ReportedFailed == c.ReportedFailed)) {
		return batch.Counts{}, store.ErrLeaseLost
	}
	ch.ReportedCompleted, ch.ReportedFailed = to.Completed, to.Failed
	m.setChunk(ch)
	b := m.batches[c.Batch]
	b.ProgressCompleted, b.ProgressFailed = b.ProgressCompleted+dc, b.ProgressFailed+df
	m.batches[c.Batch] = b
	return to, nil
}

// Commits.

// CommitChunk as store.CommitChunk: ErrChunkDone when the chunk is not
// the run's, ErrLast when the commit is not last and the batch has one
// chunk left, ErrRenumber when its fallback chunk's number (the batch's
// chunk count) or entry is taken, ErrRaced when Next's chunk or entry was.
func (m *memTable) CommitChunk(_ context.Context, tenant string, c sched.Commit) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := c.Chunk
	if n := c.Next; n != nil && n.Entry.Batch == ch.Batch && n.Entry.Next == ch.Index {
		// One transaction may not name an item twice: DynamoDB refuses it,
		// every time.
		return errTwice
	}
	if fb := c.Fallback; fb != nil && c.Next != nil && c.Next.Entry.Batch == ch.Batch && c.Next.Entry.Next == fb.Chunk.Index {
		return store.ErrRenumber
	}
	if err := m.commitFails(c); err != nil {
		return err
	}
	m.done(c, c.Fallback != nil)
	b := m.batches[ch.Batch]
	switch {
	case c.Fallback != nil:
		b.ChunksTotal++
	case c.Last:
		b.FinalizeDue = c.FinalizeDue.Unix()
	}
	m.batches[ch.Batch] = b
	switch {
	case c.Next != nil:
		m.claim(*c.Next)
	case ch.Slots > 0:
		m.addInflight(ch.Model, ch.Shard, -ch.Slots)
	}
	if fb := c.Fallback; fb != nil {
		m.setChunk(fb.Chunk)
		m.setEntry(fb.Ready)
	}
	m.commits = append(m.commits, c)
	return nil
}

var errTwice = errors.New("ValidationException: Transaction request cannot include multiple operations on one item")

// commitFails is the error of the first of commit c's conditions that
// fails, in the order of its transaction's items.
func (m *memTable) commitFails(c sched.Commit) error {
	ch := c.Chunk
	stored, ok := m.stored(ch.Batch, ch.Index)
	b := m.batches[ch.Batch]
	switch {
	case !claimedBy(stored, ok, ch.Run):
		return store.ErrChunkDone
	case c.Fallback != nil && b.ChunksTotal != c.Fallback.Chunk.Index:
		return store.ErrRenumber
	case c.Fallback == nil && !c.Last && b.ChunksDone >= c.ChunksTotal-1:
		return store.ErrLast
	case c.Next != nil && !m.claimable(*c.Next):
		return store.ErrRaced
	}
	if fb := c.Fallback; fb != nil {
		_, numbered := m.stored(fb.Chunk.Batch, fb.Chunk.Index)
		if _, listed := m.ready[fb.Ready.Model][fb.Ready.SK()]; numbered || listed {
			return store.ErrRenumber
		}
	}
	return nil
}

// done records commit c's chunk done and its counts on its batch; cut
// records the chunk's rows as the commit has them (fewer than planned).
func (m *memTable) done(c sched.Commit, cut bool) {
	ch := c.Chunk
	stored, _ := m.stored(ch.Batch, ch.Index)
	stored.State, stored.Pattern, stored.OutBytes, stored.ErrBytes = batch.ChunkDone, ch.Pattern, ch.OutBytes, ch.ErrBytes
	stored.Attempt, stored.Dead, stored.Next = ch.Attempt, ch.Dead, nil
	if c.Next != nil {
		next := c.Next.Next()
		stored.Next = &next
	}
	if cut {
		stored.Rows, stored.Spans, stored.Start, stored.End, stored.FirstRow = ch.Rows, ch.Spans, ch.Start, ch.End, ch.FirstRow
	}
	m.setChunk(stored)
	delete(m.fences, chunkRef{ch.Batch, ch.Index})
	b := m.batches[ch.Batch]
	b.RequestCounts.Completed += c.Completed
	b.RequestCounts.Failed += c.Failed
	u := &b.Usage
	u.InputTokens += c.Usage.InputTokens
	u.OutputTokens += c.Usage.OutputTokens
	u.TotalTokens += c.Usage.TotalTokens
	u.CachedTokens += c.Usage.CachedTokens
	u.ReasoningTokens += c.Usage.ReasoningTokens
	b.ChunksDone++
	b.ExpiredRows += c.Expired
	b.CancelledRows += c.Cancelled
	b.DeadLetterCount += c.DeadLetters
	b.ProgressCompleted -= ch.ReportedCompleted
	b.ProgressFailed -= ch.ReportedFailed
	m.batches[ch.Batch] = b
}

// CommitSplit as store.CommitSplit: the chunk done with its rows as cut,
// and rest put claimed by run until lease with the chunk's slots, on
// condition that rest.Index is the batch's chunk count (ErrRaced).
func (m *memTable) CommitSplit(_ context.Context, _ string, c sched.Commit, rest batch.Chunk, run string, lease time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := c.Chunk
	stored, ok := m.stored(ch.Batch, ch.Index)
	_, taken := m.stored(rest.Batch, rest.Index)
	switch {
	case !claimedBy(stored, ok, ch.Run):
		return store.ErrChunkDone
	case m.batches[ch.Batch].ChunksTotal != rest.Index || taken:
		return store.ErrRaced
	}
	c.Next, c.Last, c.Fallback = nil, false, nil
	m.done(c, true)
	b := m.batches[ch.Batch]
	b.ChunksTotal++
	m.batches[ch.Batch] = b
	rest.State, rest.Run, rest.Lease, rest.Attempts, rest.Slots, rest.Shard = batch.ChunkClaimed, run, lease.UnixMilli(), 1, ch.Slots, ch.Shard
	m.setChunk(rest)
	m.commits = append(m.commits, c)
	return nil
}

// memBucket is the engine's tests' Blobs: objects in memory. A read of a
// missing object is blob.ErrNotFound; the objects a file is made of read
// as one.
type memBucket struct {
	mu      sync.Mutex
	objects map[string][]byte
	deleted []string
}

func newMemBucket() *memBucket { return &memBucket{objects: map[string][]byte{}} }

var _ Blobs = (*memBucket)(nil)

// put stores an object, for a test's set-up.
func (m *memBucket) put(key string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[key] = data
}

// object is key's bytes and whether it exists.
func (m *memBucket) object(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[key]
	return b, ok
}

// keys are the objects' keys, sorted.
func (m *memBucket) keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.objects))
}

// deletedKeys are the keys Delete was asked to remove, in order.
func (m *memBucket) deletedKeys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.deleted)
}

func (m *memBucket) PutTagged(_ context.Context, key string, r io.Reader, _ int64, _ string) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m.put(key, data)
	return nil
}

// concat is the objects of keys read as one; blob.ErrNotFound for a
// missing one.
func (m *memBucket) concat(keys []string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var all []byte
	for _, k := range keys {
		b, ok := m.objects[k]
		if !ok {
			return nil, blob.ErrNotFound
		}
		all = append(all, b...)
	}
	return all, nil
}

func (m *memBucket) Concat(_ context.Context, keys []string) io.ReadCloser {
	all, err := m.concat(keys)
	if err != nil {
		return io.NopCloser(errReader{err})
	}
	return io.NopCloser(bytes.NewReader(all))
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func (m *memBucket) Head(_ context.Context, key string) (int64, string, error) {
	b, ok := m.object(key)
	if !ok {
		return 0, "", blob.ErrNotFound
	}
	return int64(len(b)), "", nil
}

func (m *memBucket) ReadRange(_ context.Context, objs []batch.Object, start, end int64) ([]byte, error) {
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	all, err := m.concat(keys)
	if err != nil {
		return nil, err
	}
	return slices.Clone(all[start:end]), nil
}

func (m *memBucket) List(_ context.Context, prefix string) ([]string, error) {
	return slices.DeleteFunc(m.keys(), func(k string) bool { return !strings.HasPrefix(k, prefix) }), nil
}

func (m *memBucket) Delete(_ context.Context, keys ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.objects, k)
	}
	m.deleted = append(m.deleted, keys...)
	return nil
}
