package native

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/workflow"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// submit creates a group's provider batch: recorded as submitting first,
// orphans of earlier attempts cancelled, the engine asked whether the
// group may still spend (if not, none is created), then created and
// recorded, and the first poll sent. A duplicate or retry of a group already submitted
// only sends its current poll again (a poll of a stale number is dropped).
func (s *Service) submit(ctx context.Context, m msg.Message) error {
	b, g, ok, err := s.load(ctx, m)
	if err != nil || !ok || b.Status.Terminal() || b.Status.Stopping() || g.State == batch.GroupEnded {
		return err
	}
	if g.State == batch.GroupSubmitted {
		return s.sendPoll(ctx, g, g.Polls)
	}
	up, err := s.upstream(ctx, b, g.Model)
	if err != nil {
		return err
	}
	now := s.Now()
	g, err = s.Store.UpdateGroup(ctx, b.ID, g.Index, func(g *batch.Group) error {
		if g.State != batch.GroupPending && g.State != batch.GroupSubmitting {
			return errSkip
		}
		if g.SubmitAt == 0 {
			g.SubmitAt = now.Unix()
		}
		g.State, g.Submits = batch.GroupSubmitting, g.Submits+1
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	if g.Submits > 1 {
		if err := s.cancelOrphans(ctx, up, g); err != nil {
			return err
		}
	}
	// A tenant stopped since the plan (a key disabled, a budget spent)
	// creates no provider batch: the group goes on as one with no row for
	// the provider, and its import gives the rows the refusal's lines.
	code, err := s.admitGroup(ctx, b, g)
	if err != nil {
		return err
	}
	if code != "" {
		return s.record(ctx, up, g, noProvider)
	}
	route, err := s.Engine.Route(ctx, b)
	if err != nil {
		return err
	}
	// A group's rows all name its model; a key that may not use it (a
	// message batch retried by another key) sends none of them, and each
	// gets its model_not_allowed line on a direct run.
	allowed := route.Allows(g.Model)
	sent, read := 0, false
	id, err := up.create(ctx, tag(g.Batch, g.Index), b.Endpoint, func(emit func(string, []byte) error) error {
		err := s.eachRow(ctx, b, g, func(row int, q jsonl.Request) error {
			body, ok := s.upstreamBody(g.Model, q.Body)
			if !ok || !allowed {
				return nil // refused at create or by the allow-list: it gets its error line on a direct run
			}
			sent++
			return emit(customID(tag(g.Batch, g.Index), row), body)
		})
		read = err == nil
		return err
	})
	if err != nil && read && sent == 0 {
		// No row for the provider (the provider refuses an empty batch):
		// every row runs directly.
		id, err = noProvider, nil
	}
	if err != nil {
		return fmt.Errorf("submit group %d of %s: %w", g.Index, b.ID, err)
	}
	if s.AfterCreate != nil {
		if err := s.AfterCreate(g, id); err != nil {
			return err
		}
	}
	if err := s.record(ctx, up, g, id); err != nil {
		return err
	}
	// Submitted, the batch's work has started, as a direct chunk's run
	// announces (docs/api.md "Webhooks").
	s.Engine.AnnounceInProgress(ctx, b)
	return nil
}

// record records provider batch id as group g's and sends the first poll;
// when another attempt got there first, id is cancelled instead.
func (s *Service) record(ctx context.Context, up upstream, g batch.Group, id string) error {
	submits := g.Submits
	g, err := s.Store.UpdateGroup(ctx, g.Batch, g.Index, func(g *batch.Group) error {
		if g.State != batch.GroupSubmitting || g.Submits != submits {
			return errSkip
		}
		g.State, g.ProviderID = batch.GroupSubmitted, id
		return nil
	})
	if errors.Is(err, errSkip) {
		s.Log.WarnContext(ctx, "another submit of the group won; provider batch cancelled", "batch_id", g.Batch, "group", g.Index, "provider_batch", id)
		return s.cancel(ctx, up, id)
	}
	if err != nil {
		return err
	}
	s.Log.InfoContext(ctx, "provider batch created", "batch_id", g.Batch, "group", g.Index, "provider_batch", id, "rows", g.Rows)
	return s.sendPoll(ctx, g, 0)
}

// cancelOrphans cancels the provider batches an earlier submit of g
// created and did not record.
func (s *Service) cancelOrphans(ctx context.Context, up upstream, g batch.Group) error {
	ids, err := up.find(ctx, tag(g.Batch, g.Index), g.Rows, timeUnix(g.SubmitAt-60))
	if err != nil {
		return err
	}
	for _, id := range ids {
		if id == g.ProviderID || slices.Contains(g.Orphans, id) {
			continue
		}
		if err := up.cancel(ctx, id); err != nil {
			return err
		}
		s.Log.WarnContext(ctx, "orphan provider batch cancelled", "batch_id", g.Batch, "group", g.Index, "provider_batch", id)
		if _, err := s.Store.UpdateGroup(ctx, g.Batch, g.Index, func(g *batch.Group) error {
			g.Orphans = append(g.Orphans, id)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// eachRow reads group g's rows, a chunk at a time, and calls fn with each
// and its number in the batch's input.
func (s *Service) eachRow(ctx context.Context, b batch.Batch, g batch.Group, fn func(row int, q jsonl.Request) error) error {
	for _, i := range g.Chunks {
		c, err := s.Store.GetChunk(ctx, b.ID, i)
		if err != nil {
			return err
		}
		reqs, err := plan.ReadChunk(ctx, s.Blobs, b, c)
		if err != nil {
			return err
		}
		for j, q := range reqs {
			if err := fn(c.Row(j), q); err != nil {
				return err
			}
		}
	}
	return nil
}

// upstreamBody is a row's body as the provider batch takes it: the
// model's upstream name, none of the service's own fields. false: the
// row was refused at create (provider.RefusedKey) or is a workflow record
// (which no provider batch can run), and is not sent.
func (s *Service) upstreamBody(model string, body []byte) ([]byte, bool) {
	if gjson.GetBytes(body, "relay."+provider.RefusedKey).Exists() || workflow.InBody(body) {
		return nil, false
	}
	m, _ := s.Models.Lookup(model)
	out, err := sjson.SetBytes(body, "model", m.Upstream())
	if err != nil {
		return nil, false
	}
	if gjson.GetBytes(out, "relay").Exists() {
		out, _ = sjson.DeleteBytes(out, "relay")
	}
	return out, true
}

// poll looks at a group's provider batch: once it ended, its results are
// imported; until then the next poll is sent, later each time. A cancel
// of the batch cancels the provider batch (the engine's drain writes the
// rows' batch_cancelled lines); a window close to its end cancels it too,
// and its unfinished rows run directly.
func (s *Service) poll(ctx context.Context, m msg.Message) error {
	b, g, ok, err := s.load(ctx, m)
	if err != nil || !ok || g.State != batch.GroupSubmitted || g.Polls != m.Attempt {
		return err
	}
	up, err := s.upstream(ctx, b, g.Model)
	if err != nil {
		return err
	}
	if b.Status.Stopping() || b.Status.Terminal() {
		if err := s.cancel(ctx, up, g.ProviderID); err != nil {
			return err
		}
		s.Log.InfoContext(ctx, "provider batch cancelled with its batch", "batch_id", b.ID, "group", g.Index, "provider_batch", g.ProviderID)
		return s.setGroup(ctx, g, m.Attempt, func(g *batch.Group) { g.State, g.CancelSent = batch.GroupEnded, true })
	}
	r := remote{id: noProvider, ended: true}
	if g.ProviderID != noProvider {
		if r, err = up.get(ctx, g.ProviderID); err != nil {
			return err
		}
	}
	if r.ended {
		err := s.importGroup(ctx, b, g, up, r)
		if errors.Is(err, store.ErrNoCapacity) {
			// The model is full for the rows to run directly: the same
			// poll tries the import again later, the provider's answers
			// kept, rather than spending its receives.
			return s.Queue.Send(ctx, resources.Work, s.step(msg.NativePoll, g, m.Attempt), s.pollDelay(0))
		}
		if err != nil {
			return err
		}
		return s.setGroup(ctx, g, m.Attempt, func(g *batch.Group) { g.State = batch.GroupEnded })
	}
	cancel := false
	if !g.CancelSent {
		why, err := s.cancelWhy(ctx, b, g)
		if err != nil {
			return err
		}
		if cancel = why != ""; cancel {
			if err := up.cancel(ctx, g.ProviderID); err != nil {
				return err
			}
			s.Log.WarnContext(ctx, "running provider batch cancelled", "batch_id", b.ID, "group", g.Index, "provider_batch", g.ProviderID, "why", why)
		}
	}
	return s.nextPoll(ctx, g, m.Attempt, cancel)
}

// cancelWhy says why group g's provider batch, still running, is to be
// cancelled now, or "" to let it run: the batch's window is close to its
// end (its unfinished rows run directly), or its tenant was stopped (they
// get the refusal's lines at the import, the answers it has already made
// kept).
func (s *Service) cancelWhy(ctx context.Context, b batch.Batch, g batch.Group) (string, error) {
	if s.closeToEnd(b) {
		return "the window is close to its end; the unfinished rows run directly", nil
	}
	if s.lateForDeadline(b, g) {
		return "complete_by is near; the unfinished rows run directly", nil
	}
	code, err := s.admitGroup(ctx, b, g)
	if code != "" {
		return code + "; the unfinished rows are refused", nil
	}
	return "", err
}

// admitGroup asks the engine whether group g's rows may still spend
// (engine.Governor's Admit, with all the group's chunks: a provider batch
// takes them all or none, and a max_cost counts each one's most, at the
// native price; a chunk whose rows then run directly is admitted again at
// its direct most); the refusal's code, or "".
func (s *Service) admitGroup(ctx context.Context, b batch.Batch, g batch.Group) (string, error) {
	cs := make([]batch.Chunk, len(g.Chunks))
	for i, index := range g.Chunks {
		c, err := s.Store.GetChunk(ctx, b.ID, index)
		if err != nil {
			return "", err
		}
		c.MostCost *= config.NativeDiscount
		cs[i] = c
		if b.MaxCost == nil {
			// The key and the budget need one of them.
			cs = cs[:1]
			break
		}
	}
	code, why, err := s.Engine.Admit(ctx, b, cs[0], cs[1:]...)
	if code != "" {
		s.Log.WarnContext(ctx, "native group refused", "batch_id", b.ID, "group", g.Index, "code", code, "why", why)
	}
	return code, err
}

// nextPoll moves g from poll n to n+1, then sends poll n+1: in that
// order, so the message never finds its number not current yet. A send
// that fails moves it back, and poll n comes back to try again.
func (s *Service) nextPoll(ctx context.Context, g batch.Group, n int, cancelled bool) error {
	if ok, err := s.moveGroup(ctx, g, n, func(g *batch.Group) { g.Polls, g.CancelSent = n+1, g.CancelSent || cancelled }); !ok {
		return err // or a duplicate of poll n moved it
	}
	err := s.sendPoll(ctx, g, n+1)
	if err != nil {
		g.Polls = n + 1
		if _, rerr := s.moveGroup(context.WithoutCancel(ctx), g, n+1, func(g *batch.Group) { g.Polls = n }); rerr != nil {
			s.Log.ErrorContext(ctx, "native group stranded: its next poll was not sent", "batch_id", g.Batch, "group", g.Index, "err", rerr)
		}
	}
	return err
}

// current reports whether m is g's step now: a submit while g is not
// submitted yet, or its current poll. A stale poll or a duplicate submit
// that reached the DLQ ends nothing.
func current(g batch.Group, m msg.Message) bool {
	if m.Type == msg.NativePoll {
		return g.State == batch.GroupSubmitted && g.Polls == m.Attempt
	}
	return g.State == batch.GroupPending || g.State == batch.GroupSubmitting
}

// noProvider is the provider batch of a group none of whose rows goes to
// the provider (all refused at create): it has "ended" without results.
const noProvider = "none"

// cancel cancels provider batch id, if there is one.
func (s *Service) cancel(ctx context.Context, up upstream, id string) error {
	if id == noProvider {
		return nil
	}
	return up.cancel(ctx, id)
}

// setGroup changes g with fn if poll n is still its current one.
func (s *Service) setGroup(ctx context.Context, g batch.Group, n int, fn func(*batch.Group)) error {
	_, err := s.moveGroup(ctx, g, n, fn)
	return err
}

// moveGroup changes g with fn if poll n is still its current one, and
// reports whether it did.
func (s *Service) moveGroup(ctx context.Context, g batch.Group, n int, fn func(*batch.Group)) (bool, error) {
	_, err := s.Store.UpdateGroup(ctx, g.Batch, g.Index, func(g *batch.Group) error {
		if g.Polls != n || g.State != batch.GroupSubmitted {
			return errSkip
		}
		fn(g)
		return nil
	})
	if errors.Is(err, errSkip) {
		return false, nil
	}
	return err == nil, err
}

// dead closes a group whose step ran out of receives: its provider batch
// is cancelled, and its chunks go to the dead-letter path as any chunk
// out of attempts (the engine's DeadLetter commits their dead_letter
// lines and items). The group is ended only once its chunks are claimed
// and their dead messages sent: until then it stays current, so a retry of
// this step (an error anywhere) claims them again, under the same run,
// and sends them again; the engine's dead-letter commit counts each once.
func (s *Service) dead(ctx context.Context, m msg.Message) error {
	b, g, ok, err := s.load(ctx, m)
	if err != nil || !ok || b.Status.Terminal() || !current(g, m) {
		return err
	}
	up, err := s.upstream(ctx, b, g.Model)
	if err != nil {
		s.Log.WarnContext(ctx, "dead group's provider batch left running: no provider key here", "batch_id", b.ID, "group", g.Index, "err", err)
	} else {
		// Best effort: the group's rows are dead-lettered whatever the
		// provider says.
		if g.ProviderID != "" {
			err = s.cancel(ctx, up, g.ProviderID)
		} else if g.State == batch.GroupSubmitting {
			err = s.cancelOrphans(ctx, up, g)
		}
		if err != nil {
			s.Log.WarnContext(ctx, "cancel provider batch of a dead group", "batch_id", b.ID, "group", g.Index, "err", err)
		}
	}
	dead, err := s.claimDead(ctx, b, g)
	if err != nil {
		return err
	}
	if err := s.Queue.SendBatch(ctx, resources.Work+"-dlq", dead, 0); err != nil {
		return fmt.Errorf("send dead messages of group %d of %s: %w", g.Index, b.ID, err)
	}
	if _, err := s.Store.UpdateGroup(ctx, b.ID, g.Index, func(g *batch.Group) error {
		g.State = batch.GroupEnded
		return nil
	}); err != nil {
		return err
	}
	s.Log.WarnContext(ctx, "native group dead-lettered", "batch_id", b.ID, "group", g.Index, "chunks", len(dead))
	return nil
}

// claimDead claims group g's chunks not done yet for its dead-letter run
// (the same run on every try) and returns their dead messages.
func (s *Service) claimDead(ctx context.Context, b batch.Batch, g batch.Group) ([]any, error) {
	var dead []any
	run := "dead-" + tag(b.ID, g.Index)
	for _, i := range g.Chunks {
		c, err := s.Store.GetChunk(ctx, b.ID, i)
		if err != nil {
			return nil, err
		}
		if c.State == batch.ChunkDone {
			continue
		}
		if c, err = s.claim(ctx, c, run); err != nil {
			return nil, fmt.Errorf("claim chunk %d of dead group %d of %s: %w", i, g.Index, b.ID, err)
		}
		dead = append(dead, msg.Message{Type: msg.Dead, Tenant: b.Tenant, Batch: b.ID, Chunk: c.Index, Run: c.Run, Attempt: c.Attempts})
	}
	return dead, nil
}
