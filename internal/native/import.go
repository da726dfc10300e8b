package native

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/spool"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/workflow"
)

func timeUnix(sec int64) time.Time { return time.Unix(sec, 0) }

// importGroup commits each of group g's chunks not done yet with the rows'
// results from ended provider batch r, the group's own; rows it did not
// answer for good run directly first. A retry goes on where the last
// attempt stopped: a chunk commits once, and its claim is this import's
// (the run derives from the provider batch) until it does. The results
// are read one line at a time into a spool (answers), never held together.
func (s *Service) importGroup(ctx context.Context, b batch.Batch, g batch.Group, up upstream, r remote) error {
	got := &answers{spool: spool.Buffer{InMemory: answersInMemory}, at: map[int]answerAt{}}
	defer got.spool.Close()
	if r.id != noProvider {
		if err := s.readAnswers(ctx, b, g, up, r, got); err != nil {
			return err
		}
	}
	if len(got.at) < g.Rows {
		if err := s.setExecution(ctx, b, batch.ExecHybrid); err != nil {
			return err
		}
	}
	run := "imp-" + tag(r.id, g.Index)
	for _, i := range g.Chunks {
		c, err := s.Store.GetChunk(ctx, b.ID, i)
		if err != nil {
			return err
		}
		if c.State == batch.ChunkDone {
			continue
		}
		if err := s.importChunk(ctx, b, c, run, got); err != nil {
			return err
		}
	}
	s.Log.InfoContext(ctx, "provider batch imported", "batch_id", b.ID, "group", g.Index, "provider_batch", r.id,
		"rows", g.Rows, "direct", g.Rows-len(got.at))
	return nil
}

// readAnswers spools the answers for good of provider batch r to group
// g's rows into got.
func (s *Service) readAnswers(ctx context.Context, b batch.Batch, g batch.Group, up upstream, r remote, got *answers) error {
	t := tag(g.Batch, g.Index)
	err := up.results(ctx, r, func(id string, rr rowResult) error {
		row := rowOf(t, id)
		if row < 0 || rr.rescue {
			return nil
		}
		rr.res.Usage = provider.UsageOf(b.Endpoint, rr.res.Body)
		rr.res.Native = true
		return got.put(row, rr.res)
	})
	if err != nil {
		return fmt.Errorf("results of group %d of %s: %w", g.Index, b.ID, err)
	}
	return nil
}

// importChunk claims chunk c for run, sets each row's line as its answer
// comes (from got, or from running the rows got lacks) and commits the
// chunk.
func (s *Service) importChunk(ctx context.Context, b batch.Batch, c batch.Chunk, run string, got *answers) error {
	c, err := s.claim(ctx, c, run)
	if err != nil {
		return err
	}
	reqs, err := plan.ReadChunk(ctx, s.Blobs, b, c)
	if err != nil {
		return err
	}
	lines := part.NewLines(b, c, s.Now())
	defer lines.Close()
	var direct []int
	for i, q := range reqs {
		res, ok, err := got.get(c.Row(i))
		switch {
		case err != nil:
			return err
		case ok:
			lines.Set(i, part.Outcome{CustomID: q.CustomID, Result: res})
		case workflow.InBody(q.Body):
			lines.Set(i, part.Outcome{CustomID: q.CustomID, Code: workflow.CodeInvalid, Message: "workflow records do not run on a batch: native model"})
		default:
			direct = append(direct, i)
		}
	}
	if len(direct) > 0 {
		if c, err = s.runDirect(ctx, b, c, reqs, lines, direct); err != nil {
			return err
		}
	}
	return s.Engine.CommitRows(ctx, b, c, lines)
}

// claim makes chunk c run's: claimed alone (no slots) when pending, taken
// over when another run has it (a drain, a takeover, a dead import).
func (s *Service) claim(ctx context.Context, c batch.Chunk, run string) (batch.Chunk, error) {
	lease := s.Now().Add(s.lease())
	switch {
	case c.State == batch.ChunkPending:
		err := s.Store.ClaimAlone(ctx, c, run, lease)
		if errors.Is(err, store.ErrRaced) {
			return batch.Chunk{}, fmt.Errorf("chunk %d of %s was claimed meanwhile: %w", c.Index, c.Batch, err)
		}
		if err != nil {
			return batch.Chunk{}, err
		}
		c.State, c.Run, c.Slots, c.Attempts = batch.ChunkClaimed, run, 0, c.Attempts+1
		return c, nil
	case c.Run == run:
		return c, s.Store.RenewLease(ctx, c.Batch, c.Index, run, lease)
	}
	// Whatever runs it now (a drain's run, a live lease): any lease
	// ending before the new one.
	return s.Store.Takeover(ctx, c, run, lease, lease)
}

// runDirect runs rows direct of chunk c (claimed, no slots), setting
// their lines as they end, on their model
// with fallback (engine.Provider), within slots it takes of the model's
// capacity, keeping c's lease meanwhile; it returns c holding them, for
// the commit to hand on. Rows past the batch's window get batch_expired;
// rows of a chunk the engine no longer admits (a key disabled, a budget
// spent) get its refusal's line, as an executor's run gives them.
func (s *Service) runDirect(ctx context.Context, b batch.Batch, c batch.Chunk, reqs []jsonl.Request, lines *part.Lines, direct []int) (batch.Chunk, error) {
	if b.PastExpiry(s.Now()) {
		for _, i := range direct {
			o := part.Outcome{CustomID: reqs[i].CustomID}
			o.Expire()
			lines.Set(i, o)
		}
		return c, nil
	}
	code, why, err := s.Engine.Admit(ctx, b, c)
	if err != nil {
		return c, err
	}
	if code != "" {
		for _, i := range direct {
			lines.Set(i, part.Outcome{CustomID: reqs[i].CustomID, Code: code, Message: why})
		}
		return c, nil
	}
	route, err := s.Engine.Route(ctx, b)
	if err != nil {
		return c, err
	}
	if c.Slots == 0 {
		held, err := s.Engine.TakeSlots(ctx, c)
		if err != nil {
			return c, fmt.Errorf("slots for the direct rows of chunk %d of %s: %w", c.Index, c.Batch, err)
		}
		c = held // its slots and their shard, for the commit to hand on
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go s.keepLease(runCtx, c)
	sem := make(chan struct{}, max(c.Slots, 1))
	var wg sync.WaitGroup
	for _, i := range direct {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			o := part.Outcome{CustomID: reqs[i].CustomID}
			if b.PastExpiry(s.Now()) {
				o.Expire()
			} else {
				o.Result = s.Provider.Do(runCtx, b.Endpoint, reqs[i].Body, route)
			}
			lines.Set(i, o)
		})
	}
	wg.Wait()
	return c, nil
}

// keepLease renews claimed chunk c's lease until ctx ends.
func (s *Service) keepLease(ctx context.Context, c batch.Chunk) {
	t := time.NewTicker(s.lease() / 5)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Store.RenewLease(ctx, c.Batch, c.Index, c.Run, s.Now().Add(s.lease())); err != nil && ctx.Err() == nil {
				s.Log.WarnContext(ctx, "renew lease of an imported chunk", "batch_id", c.Batch, "chunk", c.Index, "err", err)
			}
		}
	}
}
