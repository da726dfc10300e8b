package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/quote"
	"github.com/relaybatch/relay/internal/sched"
)

// deadlineFallback is the model chunk c's rows move to for b's
// complete_by (docs/api.md "Extensions"), "" when they stay: they move
// when b's rows not settled yet, run directly on c's model from now,
// would end after complete_by (quote.DirectTime), and c's model has a
// fallback (its own, else the batch's fallback_model) with free slots
// that would run c's rows before it. The run then defers every row to
// that fallback, as a row whose retries are spent is deferred: a chunk of
// the fallback's runs them on its capacity (docs/design.md "Scheduling",
// fallback rows).
func (e *Engine) deadlineFallback(ctx context.Context, b batch.Batch, c batch.Chunk, route provider.Route) (string, error) {
	if b.CompleteBy == nil || c.Fallback || c.RunsAlone() || e.Models == nil {
		return "", nil
	}
	m, ok := e.Models.Lookup(c.Model)
	if !ok {
		return "", nil
	}
	by, now := time.Unix(*b.CompleteBy, 0), e.Now()
	n := b.RequestCounts
	if now.Add(quote.DirectTime(m, int(n.Total-n.Completed-n.Failed))).Before(by) {
		return "", nil
	}
	fb, ok := provider.FallbackFor(e.Models, m, route)
	if !ok || !now.Add(quote.DirectTime(fb, c.Rows)).Before(by) {
		return "", nil
	}
	free, err := e.Store.FreeSlots(ctx, fb.Name, sched.Quotas(fb.MaxConcurrency))
	if err != nil {
		return "", fmt.Errorf("free slots of %s, the fallback of chunk %d of %s: %w", fb.Name, c.Index, b.ID, err)
	}
	for _, f := range free {
		if f > 0 {
			e.Log.InfoContext(ctx, "chunk's rows move to the fallback to meet complete_by", "batch_id", b.ID, "chunk", c.Index, "model", c.Model, "fallback", fb.Name, "rows", c.Rows)
			return fb.Name, nil
		}
	}
	return "", nil
}
