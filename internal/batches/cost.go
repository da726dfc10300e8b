package batches

import (
	"context"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/store"
)

// A batch's cost (docs/api.md "Extensions"): its usage by key and batch,
// the records GET /v1/usage?group_by=batch_id sums, priced as that prices
// them (Service.price), shown only when every model the batch used has a
// price. It is read when the batch is, never stored.

// maxCostDays bounds the days of usage a batch's cost reads: a batch ends
// within its completion window (at most a day) and its expiry's grace.
const maxCostDays = 4

// costReads is how many batches of a list have their usage read at once.
const costReads = 8

// batchCost is what usage rows cost, in all and by mode: nil when there
// are none, or when a model of them has no price (a partial sum would pass
// for the whole).
func (s *Service) batchCost(rows []store.UsageDetail) (*float64, *batch.Modes) {
	if len(rows) == 0 {
		return nil, nil
	}
	var modes batch.Modes
	for _, r := range rows {
		m, ok := s.Models.Lookup(r.Model)
		if !ok || m.Price == nil {
			return nil, nil
		}
		addModes(&modes, r.UsageRow, *m.Price)
	}
	total := roundUSD(modes.Native.Cost + modes.Direct.Cost + modes.Fallback.Cost)
	for _, u := range []*batch.ModeUse{&modes.Native, &modes.Direct, &modes.Fallback} {
		u.Cost = *roundUSD(u.Cost)
	}
	return total, &modes
}

// addModes adds usage row r, priced at p, to modes: its native and
// fallback shares, and the rest as direct.
func addModes(modes *batch.Modes, r store.UsageRow, p config.Price) {
	native := p.NativeUSD(r.NativeInputTokens, r.NativeOutputTokens)
	fallback := p.USD(r.FallbackInputTokens, r.FallbackOutputTokens)
	modes.Native.Rows += r.NativeRequests
	modes.Native.Cost += native
	modes.Fallback.Rows += r.FallbackRequests
	modes.Fallback.Cost += fallback
	modes.Direct.Rows += r.Requests - r.NativeRequests - r.FallbackRequests
	modes.Direct.Cost += r.USD(p) - native - fallback
}

// costDays are the UTC days b may have used tokens on: from its creation
// to its end (now, while it runs), at most maxCostDays, the last ones.
func costDays(b batch.Batch, now time.Time) []string {
	end := now
	for _, at := range []*int64{b.CompletedAt, b.FailedAt, b.ExpiredAt, b.CancelledAt} {
		if at != nil {
			end = time.Unix(*at, 0)
			break
		}
	}
	first := time.Unix(b.CreatedAt, 0).UTC().Truncate(24 * time.Hour)
	var days []string
	for d := end.UTC().Truncate(24 * time.Hour); !d.Before(first) && len(days) < maxCostDays; d = d.Add(-24 * time.Hour) {
		days = append([]string{d.Format("2006-01-02")}, days...)
	}
	return days
}

// priced reports whether any model has a price: without one no batch has
// a cost, and none is read.
func (s *Service) priced() bool {
	if s.Models == nil {
		return false
	}
	for _, m := range s.Models.Models {
		if m.Price != nil {
			return true
		}
	}
	return false
}

// WithCost adds b's cost, if it has one. Like webhook_deliveries it is
// decoration: failing to read it leaves it out, not the batch.
func (s *Service) WithCost(ctx context.Context, b batch.Batch) batch.Batch {
	if !s.priced() {
		return b
	}
	rows, err := s.Store.BatchUsage(ctx, b.Tenant, b.KeyID, b.ID, costDays(b, s.Now()))
	if err != nil {
		s.Log.WarnContext(ctx, "read the usage of a batch for its cost", "batch_id", b.ID, "err", err)
		return b
	}
	b.Cost, b.Modes = s.batchCost(rows)
	return b
}

// WithCosts adds their costs to a list's batches, costReads at a time.
func (s *Service) WithCosts(ctx context.Context, bs []batch.Batch) {
	if !s.priced() {
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, costReads)
	for i := range bs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			bs[i] = s.WithCost(ctx, bs[i])
		})
	}
	wg.Wait()
}
