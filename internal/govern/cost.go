package govern

import (
	"context"
	"fmt"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

// checkCost refuses chunk c of batch b when its rows and those of b's
// other chunks running now, each at the most its quote says a row may
// cost (b.RowCost), could take b's cost so far past its max_cost
// (docs/api.md "Extensions"): the batch stops at its ceiling, its rows not
// run ending cost_limit_reached.
func (g *Checker) checkCost(ctx context.Context, b batch.Batch, c batch.Chunk) (code, message string, err error) {
	if b.MaxCost == nil {
		return "", "", nil
	}
	// The chunks are read before the usage: a chunk that commits between
	// the two reads is counted twice, never missed (its commit writes its
	// state and its usage in one transaction).
	running, err := g.running(ctx, b.ID, c.Index)
	if err != nil {
		return "", "", err
	}
	rows, err := g.Store.BatchUsage(ctx, b.Tenant, b.KeyID, b.ID, usageDays(b.CreatedAt, g.Now()))
	if err != nil {
		return "", "", fmt.Errorf("read the usage of %s: %w", b.ID, err)
	}
	var spent float64
	for _, r := range rows {
		if p := g.price(r.Model); p != nil {
			spent += r.USD(*p)
		}
	}
	return OverCost(*b.MaxCost, spent, float64(c.Rows+running)*b.RowCost)
}

// running is how many rows batchID's chunks other than chunk index hold
// claimed: rows that may be spending, not yet in the usage.
func (g *Checker) running(ctx context.Context, batchID string, index int) (int, error) {
	cs, err := g.Store.Chunks(ctx, batchID)
	if err != nil {
		return 0, fmt.Errorf("read the chunks of %s: %w", batchID, err)
	}
	rows := 0
	for _, c := range cs {
		if c.State == batch.ChunkClaimed && c.Index != index {
			rows += c.Rows
		}
	}
	return rows, nil
}

// OverCost says whether a chunk that may cost chunk USD (with the batch's
// chunks running beside it) fits a batch's max_cost besides what it spent: cost_limit_reached and why, or "".
func OverCost(maxCost, spent, chunk float64) (code, message string, err error) {
	if spent+chunk <= maxCost {
		return "", "", nil
	}
	return CodeCostLimitReached, fmt.Sprintf("the batch's max_cost of $%.4f would be passed: $%.4f spent, and these rows and those running may cost up to $%.4f", maxCost, spent, chunk), nil
}

// usageDays are the UTC days from created to now, at most four (a batch
// ends within its day's window and its expiry's grace), as the batch's
// cost reads them.
func usageDays(created int64, now time.Time) []string {
	first := time.Unix(created, 0).UTC().Truncate(24 * time.Hour)
	var days []string
	for d := now.UTC().Truncate(24 * time.Hour); !d.Before(first) && len(days) < 4; d = d.Add(-24 * time.Hour) {
		days = append([]string{d.Format("2006-01-02")}, days...)
	}
	return days
}
