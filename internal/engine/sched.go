package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/metrics"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// Claims and the tick (docs/design.md "Scheduling", "Tick"): a commit
// claims its model's next chunk (pick), the dispatcher claims from free
// capacity (start), drains (drain) and takes over expired leases (takeOver).

// SchedStore is what picking the next chunk needs of the table (part of
// Store).
type SchedStore interface {
	ReadyHead(ctx context.Context, model string) (sched.Ready, bool, error)
	DeleteReady(ctx context.Context, r sched.Ready) error
	GetChunk(ctx context.Context, batchID string, i int) (batch.Chunk, error)
}

func newRun() string { return ids.Secret(9) }

// pick returns the claim of the chunk model owes next for slots of shard,
// or nil when no chunk of model waits. self is the committing chunk that
// picks its continuation (nil for none): an entry at it, or at a chunk
// read as taken, is stale (a plan that ran again put it; docs/design.md
// "Scheduling") and is dropped, and the next one picked, up to maxPicks.
func pick(ctx context.Context, s SchedStore, model string, slots, shard int, lease time.Time, self *batch.Chunk) (*sched.Claim, error) {
	for range maxPicks {
		r, ok, err := s.ReadyHead(ctx, model)
		if err != nil || !ok {
			return nil, err
		}
		after, open, err := following(ctx, s, r, self)
		if err != nil {
			return nil, err
		}
		if open {
			return &sched.Claim{Entry: r, After: after, Run: newRun(), Slots: slots, Shard: shard, Lease: lease}, nil
		}
		if err := s.DeleteReady(ctx, r); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// following returns the chunk entry r steps to after its own (-1: none),
// and whether r's chunk may be claimed: it is not self, and, when read (a
// mixed-model batch's, for its NextSame), it is pending. A chunk taken but
// not read fails its claim's condition instead (raced).
func following(ctx context.Context, s SchedStore, r sched.Ready, self *batch.Chunk) (int, bool, error) {
	if self != nil && r.Batch == self.Batch && r.Next == self.Index {
		return 0, false, nil
	}
	switch {
	case r.Mixed:
		c, err := s.GetChunk(ctx, r.Batch, r.Next)
		if err != nil {
			return 0, false, err
		}
		return c.NextSame, c.State == batch.ChunkPending, nil
	case r.Next+1 < r.Total:
		return r.Next + 1, true, nil
	}
	return -1, true, nil
}

// raced handles a claim of c that failed with store.ErrRaced: when the
// entry is still the head, its chunk was not pending (a drain claimed it),
// so the entry is stale and goes.
func raced(ctx context.Context, s SchedStore, c *sched.Claim) error {
	r, ok, err := s.ReadyHead(ctx, c.Entry.Model)
	if err != nil || !ok || r.SK() != c.Entry.SK() || r.Next != c.Entry.Next {
		return err // it moved on: another claim stepped it
	}
	return s.DeleteReady(ctx, r)
}

// maxPicks bounds the claims one call tries when others race it.
const maxPicks = 20

// start claims chunks of model from its free capacity and sends their work
// messages; it is how work begins when nothing hands capacity on.
func (e *Engine) start(ctx context.Context, model string) error {
	_, err := e.startCounting(ctx, model)
	return err
}

// startCounting is start, also saying how many of the model's slots were
// in flight before its claims (the tick publishes it).
func (e *Engine) startCounting(ctx context.Context, model string) (int, error) {
	m, ok := e.Models.Lookup(model)
	if !ok {
		return 0, nil
	}
	quotas := sched.Quotas(m.MaxConcurrency)
	slots := e.limits().SlotsFor(m.MaxConcurrency, resources.WorkBatch)
	free, err := e.Store.FreeSlots(ctx, model, quotas)
	if err != nil {
		return 0, err
	}
	inFlight := m.MaxConcurrency
	for _, n := range free {
		inFlight -= n
	}
	var msgs []any
	defer func() {
		if len(msgs) > 0 {
			// A claim whose message is lost is re-sent when its lease ends.
			if err := e.Queue.SendBatch(ctx, resources.Work, msgs, 0); err != nil {
				e.Log.WarnContext(ctx, "send claimed chunks", "model", model, "err", err)
			}
		}
	}()
	lease, ahead := e.Now().Add(e.lease()), resources.WorkBatch
	for shard, races := 0, 0; shard < len(quotas) && races < maxPicks; {
		if free[shard] <= 0 {
			shard++
			continue
		}
		n := min(ahead, (free[shard]+slots-1)/slots)
		cs, err := e.claimsAhead(ctx, model, n, slots, free[shard], shard, lease)
		if err != nil || len(cs) == 0 {
			return inFlight, err
		}
		switch err := e.Store.ClaimFromPool(ctx, quotas[shard], cs...); {
		case errors.Is(err, store.ErrNoCapacity) && len(cs) > 1:
			races++
			ahead = 1 // others took some of it: what is left, one claim at a time
		case errors.Is(err, store.ErrNoCapacity):
			free[shard] = 0 // taken by others meanwhile
			races++
		case errors.Is(err, store.ErrRaced):
			races++
			if len(cs) > 1 {
				ahead = 1 // one at a time from here, as pick drops what is stale
				continue
			}
			if err := raced(ctx, e.Store, &cs[0]); err != nil {
				return inFlight, err
			}
		case err != nil:
			return inFlight, err
		default:
			for _, c := range cs {
				free[shard] -= c.Slots
				msgs = append(msgs, msg.ForChunk(c.Next()))
			}
		}
	}
	return inFlight, nil
}

// claimsAhead plans up to n claims of model's chunks on shard, slots
// each out of free, in the order claims made one at a time by pick would
// take them, from one read of the first n entries of its ready index: an
// entry stepped past its claimed chunk takes its turn again while it comes
// before every entry not read. The plan stops at an entry whose chunk is
// not open; when that is the first, pick takes the claim (dropping what is
// stale). ClaimFromPool then makes them in one round trip.
func (e *Engine) claimsAhead(ctx context.Context, model string, n, slots, free, shard int, lease time.Time) ([]sched.Claim, error) {
	if n <= 1 {
		c, err := pick(ctx, e.Store, model, min(slots, free), shard, lease, nil)
		if err != nil || c == nil {
			return nil, err
		}
		return []sched.Claim{*c}, nil
	}
	heads, all, err := e.Store.ReadyHeads(ctx, model, n)
	if err != nil || len(heads) == 0 {
		return nil, err
	}
	last, read := heads[len(heads)-1].SK(), map[string]bool{}
	for _, r := range heads {
		read[r.SK()] = true
	}
	var cs []sched.Claim
	planned := map[string]bool{} // chunks claimed by the plan
	for len(cs) < n && free > 0 && len(heads) > 0 {
		r := heads[0]
		if planned[fmt.Sprintf("%s/%d", r.Batch, r.Next)] {
			// Another entry of this chunk (a plan's duplicate): one write
			// cannot name the chunk twice; a claim alone finds it stale.
			break
		}
		after, open, err := following(ctx, e.Store, r, nil)
		if err != nil {
			return nil, err
		}
		if !open {
			break
		}
		c := sched.Claim{Entry: r, After: after, Run: newRun(), Slots: min(slots, free), Shard: shard, Lease: lease}
		next, stepped := c.Stepped()
		if stepped && read[next.SK()] {
			// An entry read holds the key it steps to (a plan's duplicate):
			// a claim alone writes over it, one write of several cannot.
			if len(cs) == 0 {
				cs = append(cs, c)
			}
			break
		}
		cs, free, heads = append(cs, c), free-c.Slots, heads[1:]
		planned[fmt.Sprintf("%s/%d", r.Batch, r.Next)] = true
		if !stepped || (!all && next.SK() > last) {
			continue // gone, or behind entries not read
		}
		i, _ := slices.BinarySearchFunc(heads, next.SK(), func(h sched.Ready, sk string) int { return strings.Compare(h.SK(), sk) })
		heads = slices.Insert(heads, i, next)
	}
	if len(cs) == 0 {
		return e.claimsAhead(ctx, model, 1, slots, free, shard, lease)
	}
	return cs, nil
}

// drain claims every unclaimed chunk of a cancelled or expired batch
// without capacity: their runs only write error lines.
func (e *Engine) drain(ctx context.Context, b batch.Batch) error {
	chunks, err := e.Store.Chunks(ctx, b.ID)
	if err != nil {
		return err
	}
	return e.claimAlone(ctx, b, chunks)
}

// claimAlone claims the pending chunks of b among chunks without capacity
// and sends their work messages. A chunk whose claim fails is left to the
// next attempt; the others' messages are sent anyway.
func (e *Engine) claimAlone(ctx context.Context, b batch.Batch, chunks []batch.Chunk) error {
	if len(chunks) == 0 {
		return nil
	}
	var msgs []any
	var errs []error
	for _, c := range chunks {
		if c.State != batch.ChunkPending {
			continue
		}
		run := newRun()
		switch err := e.claimOneAlone(ctx, c, run); {
		case errors.Is(err, store.ErrRaced):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("claim chunk %d alone: %w", c.Index, err))
			continue
		}
		msgs = append(msgs, msg.ForChunk(batch.Next{Tenant: b.Tenant, Batch: b.ID, Chunk: c.Index, Run: run, Attempt: 1}))
	}
	return errors.Join(append(errs, e.Queue.SendBatch(ctx, resources.Work, msgs, 0))...)
}

// claimOneAlone claims pending chunk c for run without capacity. A claim
// whose call failed may have taken effect (docs/design.md "Conflicts and
// ambiguous writes"): the chunk read back claimed by run says it did, and
// the run needs its message, or the chunk waits a lease and an attempt.
func (e *Engine) claimOneAlone(ctx context.Context, c batch.Chunk, run string) error {
	err := e.Store.ClaimAlone(ctx, c, run, e.Now().Add(e.lease()))
	if err == nil || errors.Is(err, store.ErrRaced) {
		return err
	}
	if rc, gerr := e.Store.GetChunk(ctx, c.Batch, c.Index); gerr == nil && rc.State == batch.ChunkClaimed && rc.Run == run {
		return nil
	}
	return err
}

// tickLimit bounds the leases and due batches one tick handles; the next
// tick takes the rest.
const tickLimit = 100

// Tick is the dispatcher's periodic sweep (docs/design.md "Tick"): it
// must read no idle batch. Each unit of its work (a lease's takeover, a
// due batch, a model's start, a send) fails alone: it is logged with its
// ids and the tick goes on; the errors come back joined, once everything
// else was done.
func (e *Engine) Tick(ctx context.Context) error {
	now := e.Now()
	errs := []error{e.takeOver(ctx, now)}
	refs, err := e.Store.DueBatches(ctx, now, tickLimit)
	if err != nil {
		e.Log.ErrorContext(ctx, "tick: due batches", "err", err)
		errs = append(errs, err)
	}
	for _, r := range refs {
		if err := e.due(ctx, r.Tenant, r.ID, now); err != nil {
			e.Log.ErrorContext(ctx, "tick: due batch", "batch_id", r.ID, "tenant", r.Tenant, "err", err)
			errs = append(errs, fmt.Errorf("due batch %s: %w", r.ID, err))
		}
	}
	for _, m := range e.Models.Names() {
		inFlight, err := e.startCounting(ctx, m)
		if err != nil {
			e.Log.ErrorContext(ctx, "tick: start model", "model", m, "err", err)
			errs = append(errs, fmt.Errorf("start model %s: %w", m, err))
			continue
		}
		if cfg, ok := e.Models.Lookup(m); ok {
			e.Log.InfoContext(ctx, "capacity", metrics.CapacityLine(e.Set.Prefix, m, now, inFlight, cfg.MaxConcurrency)...)
		}
	}
	e.publishOldest(ctx, now)
	return errors.Join(errs...)
}

// takeOver gives each chunk whose lease expired (its run died, or its work
// message was lost) to a new run and sends its message; a chunk out of
// attempts goes to the dead-letter path instead. A takeover that fails is
// logged and left to the next tick; the others go on.
func (e *Engine) takeOver(ctx context.Context, now time.Time) error {
	expired, err := e.Store.ExpiredLeases(ctx, now, tickLimit)
	if err != nil {
		e.Log.ErrorContext(ctx, "tick: expired leases", "err", err)
		return err
	}
	var work, dead []any
	var errs []error
	for _, c := range expired {
		run := newRun()
		nc, err := e.Store.Takeover(ctx, c, run, now, now.Add(e.lease()))
		if errors.Is(err, store.ErrRaced) {
			continue // renewed or committed meanwhile
		}
		if err != nil {
			// It may have taken effect although its call failed: then its
			// run needs its message, or it waits a lease and an attempt.
			if rc, gerr := e.Store.GetChunk(ctx, c.Batch, c.Index); gerr == nil && rc.State == batch.ChunkClaimed && rc.Run == run {
				nc, err = rc, nil
			}
		}
		if err != nil {
			e.Log.ErrorContext(ctx, "tick: take over chunk", "batch_id", c.Batch, "chunk", c.Index, "run", c.Run, "err", err)
			errs = append(errs, fmt.Errorf("take over chunk %d of %s: %w", c.Index, c.Batch, err))
			continue
		}
		m := msg.ForChunk(batch.Next{Tenant: nc.Tenant, Batch: nc.Batch, Chunk: nc.Index, Run: nc.Run, Attempt: nc.Attempts})
		if nc.Attempts > resources.WorkMaxReceiveCount {
			m.Type = msg.Dead
			dead = append(dead, m)
			e.Log.WarnContext(ctx, "chunk out of attempts", "batch_id", nc.Batch, "chunk", nc.Index, "attempts", nc.Attempts-1)
			continue
		}
		e.Log.InfoContext(ctx, "lease expired; chunk taken over", "batch_id", nc.Batch, "chunk", nc.Index, "attempt", nc.Attempts)
		work = append(work, m)
	}
	// A message lost here is sent again when the new lease ends.
	for _, q := range []struct {
		name string
		ms   []any
	}{{resources.Work, work}, {resources.Work + "-dlq", dead}} {
		if err := e.Queue.SendBatch(ctx, q.name, q.ms, 0); err != nil {
			e.Log.ErrorContext(ctx, "tick: send taken-over chunks", "queue", q.name, "n", len(q.ms), "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// due does what a due batch needs (see batch.Batch.Due) and has the tick
// look at it again only after batch.Grace.
func (e *Engine) due(ctx context.Context, tenant, id string, now time.Time) error {
	b, err := e.Store.GetBatch(ctx, tenant, id)
	if err != nil {
		return gone(err)
	}
	switch b.NextStep(now) {
	case batch.StepExpire:
		return e.expireUnplanned(ctx, b)
	case batch.StepPlan:
		err = e.send(ctx, resources.Dispatch, msg.Message{Type: msg.Plan, Tenant: tenant, Batch: id})
	case batch.StepFinalize:
		err = e.send(ctx, resources.Finalize, msg.Message{Type: msg.Finalize, Tenant: tenant, Batch: id})
	case batch.StepDrain:
		err = e.drain(ctx, b)
	}
	if err != nil {
		return err
	}
	_, err = e.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
		b.Recheck = now.Add(batch.Grace).Unix()
		return nil
	})
	return gone(err)
}

// expireUnplanned ends a batch whose window ended before it could be
// planned: expired, as any batch past its window, with the reason.
func (e *Engine) expireUnplanned(ctx context.Context, b batch.Batch) error {
	nb, err := e.Store.UpdateBatch(ctx, b.Tenant, b.ID, func(b *batch.Batch) error {
		if b.Status != batch.Validating || b.ChunksTotal > 0 {
			return errSkip
		}
		b.ErrorList = []jsonl.LineError{{Code: part.CodeExpired, Message: "the batch's completion window ended before its input could be planned"}}
		return b.To(batch.Expired, e.Now())
	})
	if errors.Is(err, errSkip) || errors.Is(err, store.ErrBatchNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	e.Log.WarnContext(ctx, "batch expired before it was planned", "batch_id", b.ID, "tenant", b.Tenant)
	return e.terminal(ctx, nb)
}

// publishOldest logs the age of the oldest unfinished batch as an embedded
// CloudWatch metric (the stuck-batch alarm watches it).
func (e *Engine) publishOldest(ctx context.Context, now time.Time) {
	var age int64
	if b, ok, err := e.Store.OldestActive(ctx); err == nil && ok {
		age = now.Unix() - b.CreatedAt
	}
	e.Log.InfoContext(ctx, "tick", resources.OldestBatchAge(e.Set.Prefix, now, age)...)
}
