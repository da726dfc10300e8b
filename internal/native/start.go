package native

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
)

// takes reports whether b's rows of model go to the provider's batch API.
func (s *Service) takes(b batch.Batch, model string) bool {
	m, ok := s.Models.Lookup(model)
	if !ok || !m.Native() {
		return false
	}
	if m.Provider == config.Anthropic {
		return b.Endpoint == endpoint.Messages
	}
	e, ok := endpoint.Lookup(b.Endpoint)
	return ok && e.OpenAIBatch && e.Shape == config.OpenAI
}

// Start takes the chunks of b's native models once it is planned
// (engine.Delegate): it records their groups and sends each group's
// submit, and returns the ready entries of the other models, and of the
// native ones whose rows start directly for b's complete_by
// (startsNative). It may run again for the same batch (a plan retried):
// the groups are the same and a submit of a group under way changes
// nothing.
func (s *Service) Start(ctx context.Context, b batch.Batch, entries []sched.Ready) ([]sched.Ready, error) {
	if !slices.ContainsFunc(entries, func(r sched.Ready) bool { return s.takes(b, r.Model) }) {
		return entries, nil
	}
	chunks, err := s.Store.Chunks(ctx, b.ID)
	if err != nil {
		return nil, err
	}
	var rest []sched.Ready
	taken := s.nativeModels(ctx, b, chunks)
	for _, r := range entries {
		if !taken[r.Model] {
			rest = append(rest, r)
		}
	}
	if len(taken) == 0 {
		return entries, nil
	}
	groups := Groups(b, chunks, taken, func(model string) Limit {
		m, _ := s.Models.Lookup(model)
		return s.limit(m.Provider)
	})
	if err := s.Store.PutGroups(ctx, groups); err != nil {
		return nil, fmt.Errorf("record chunk groups of %s: %w", b.ID, err)
	}
	exec := batch.ExecNative
	if len(rest) > 0 {
		exec = batch.ExecHybrid
	}
	if err := s.setExecution(ctx, b, exec); err != nil {
		return nil, err
	}
	msgs := make([]any, len(groups))
	for i, g := range groups {
		msgs[i] = s.step(msg.NativeSubmit, g, 0)
	}
	s.Log.InfoContext(ctx, "native batch started", "batch_id", b.ID, "groups", len(groups))
	return rest, s.Queue.SendBatch(ctx, resources.Work, msgs, 0)
}

// nativeModels are the models of b's chunks whose rows start on a
// provider batch.
func (s *Service) nativeModels(ctx context.Context, b batch.Batch, chunks []batch.Chunk) map[string]bool {
	rows := map[string]int{}
	for _, c := range chunks {
		if s.takes(b, c.Model) && !c.RunsAlone() {
			rows[c.Model] += c.Rows
		}
	}
	taken := map[string]bool{}
	for model, n := range rows {
		if s.startsNative(b, model, n) {
			taken[model] = true
		} else {
			s.Log.InfoContext(ctx, "native model's rows start directly: its provider batch would not meet complete_by", "batch_id", b.ID, "model", model, "rows", n)
		}
	}
	return taken
}

// setExecution records how b runs; hybrid, once set, stays.
func (s *Service) setExecution(ctx context.Context, b batch.Batch, exec string) error {
	_, err := s.Store.UpdateBatch(ctx, b.Tenant, b.ID, func(b *batch.Batch) error {
		if b.Execution == exec || b.Execution == batch.ExecHybrid {
			return errSkip
		}
		b.Execution = exec
		return nil
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	return err
}

// rowOverhead is a generous allowance for what a row gains in a provider
// batch's upload (its custom id, method, url, params wrapper).
const rowOverhead = 256

// Groups cuts b's chunks of the taken models into groups, in chunk order,
// each of one model and within that model's provider limit.
func Groups(b batch.Batch, chunks []batch.Chunk, taken map[string]bool, limit func(model string) Limit) []batch.Group {
	var groups []batch.Group
	open := map[string]int{} // model → index of its open group
	size := map[int]int64{}
	for _, c := range chunks {
		if !taken[c.Model] || c.RunsAlone() {
			// A NoCall chunk's rows are refused unsent, and a refused
			// workflow record runs to its error line: the engine's plan
			// claims such a chunk and runs it without capacity
			// (docs/design.md "Scheduling", rows settled without a call).
			continue
		}
		lim := limit(c.Model)
		bytes := c.Bytes() + int64(c.Rows)*rowOverhead
		i, ok := open[c.Model]
		if !ok || groups[i].Rows+c.Rows > lim.Rows || size[i]+bytes > lim.Bytes {
			i = len(groups)
			open[c.Model] = i
			groups = append(groups, batch.Group{Batch: b.ID, Tenant: b.Tenant, Index: i, Model: c.Model, State: batch.GroupPending})
		}
		groups[i].Chunks = append(groups[i].Chunks, c.Index)
		groups[i].Rows += c.Rows
		size[i] += bytes
	}
	return groups
}
