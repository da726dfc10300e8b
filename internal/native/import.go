package native

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/workflow"
)

func timeUnix(sec int64) time.Time { return time.Unix(sec, 0) }

// importGroup commits each of group g's chunks not done yet with the rows'
// results from ended provider batch r, the group's own; rows it did not
// answer for good run directly first. A retry goes on where the last
// attempt stopped: a chunk commits once, and its claim is this import's
// (the run derives from the provider batch) until it does.
func (s *Service) importGroup(ctx context.Context, b batch.Batch, g batch.Group, up upstream, r remote) error {
	t := tag(g.Batch, g.Index)
	results := map[int]inference.Result{}
	var err error
	if r.id != noProvider {
		err = up.results(ctx, r, func(id string, rr rowResult) {
			if row := rowOf(t, id); row >= 0 && !rr.rescue {
				rr.res.Usage = provider.UsageOf(b.Endpoint, rr.res.Body)
				results[row] = rr.res
			}
		})
	}
	if err != nil {
		return fmt.Errorf("results of group %d of %s: %w", g.Index, b.ID, err)
	}
	if len(results) < g.Rows {
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
		if err := s.importChunk(ctx, b, c, run, results); err != nil {
			return err
		}
	}
	s.Log.InfoContext(ctx, "provider batch imported", "batch_id", b.ID, "group", g.Index, "provider_batch", r.id,
		"rows", g.Rows, "direct", g.Rows-len(results))
	return nil
}

// importChunk claims chunk c for run, runs the rows results lacks and
// commits the chunk.
func (s *Service) importChunk(ctx context.Context, b batch.Batch, c batch.Chunk, run string, results map[int]inference.Result) error {
	c, err := s.claim(ctx, c, run)
	if err != nil {
		return err
	}
	reqs, err := plan.ReadChunk(ctx, s.Blobs, b, c)
	if err != nil {
		return err
	}
	outs := make([]part.Outcome, len(reqs))
	var direct []int
	for i, q := range reqs {
		outs[i].CustomID = q.CustomID
		if res, ok := results[c.Row(i)]; ok {
			outs[i].Result = res
		} else if workflow.InBody(q.Body) {
			outs[i].Code, outs[i].Message = workflow.CodeInvalid, "workflow records do not run on a batch: native model"
		} else {
			direct = append(direct, i)
		}
	}
	if len(direct) > 0 {
		bodies := make([][]byte, len(reqs))
		for i, q := range reqs {
			bodies[i] = q.Body
		}
		if c, err = s.runDirect(ctx, b, c, bodies, outs, direct); err != nil {
			return err
		}
	}
	return s.Engine.CommitRows(ctx, b, c, outs)
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

// runDirect runs rows direct of chunk c (claimed, no slots) on their model
// with fallback (engine.Provider), within slots it takes of the model's
// capacity, keeping c's lease meanwhile; it returns c holding them, for
// the commit to hand on. Rows past the batch's window get batch_expired;
// rows of a chunk the engine no longer admits (a key disabled, a budget
// spent) get its refusal's line, as an executor's run gives them.
func (s *Service) runDirect(ctx context.Context, b batch.Batch, c batch.Chunk, bodies [][]byte, outs []part.Outcome, direct []int) (batch.Chunk, error) {
	if b.PastExpiry(s.Now()) {
		for _, i := range direct {
			outs[i].Expire()
		}
		return c, nil
	}
	code, why, err := s.Engine.Admit(ctx, b, c)
	if err != nil {
		return c, err
	}
	if code != "" {
		for _, i := range direct {
			outs[i].Code, outs[i].Message = code, why
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
			if b.PastExpiry(s.Now()) {
				outs[i].Expire()
				return
			}
			outs[i].Result = s.Provider.Do(runCtx, b.Endpoint, bodies[i], route)
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
