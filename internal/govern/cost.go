package govern

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

// checkCost admits chunks cs of batch b (one, or a native group's) when
// their most (batch.Chunk.MostCost), with the batch's cost so far and what
// its other admitted chunks hold, stays within its max_cost (docs/api.md
// "Extensions"), and records their holds on the batch; otherwise their
// rows end cost_limit_reached. A chunk admitted again (a takeover, a
// workflow record's next step, a group's next poll) replaces its own hold.
func (g *Checker) checkCost(ctx context.Context, b batch.Batch, cs []batch.Chunk) (code, message string, err error) {
	if b.MaxCost == nil {
		return "", "", nil
	}
	holds := map[string]float64{}
	var most float64
	for _, c := range cs {
		holds[strconv.Itoa(c.Index)] = c.MostCost
		most += c.MostCost
	}
	// The holds are read before the usage: a chunk that commits between
	// the two reads (its hold out and its usage in, in one transaction) is
	// counted twice, never missed; and the commit changes the batch, so
	// the holds are written only on the batch as read.
	_, err = g.Store.HoldCost(ctx, b.Tenant, b.ID, holds, func(now batch.Batch) (bool, error) {
		spent, err := g.spent(ctx, b)
		if err != nil {
			return false, err
		}
		code, message = OverCost(*b.MaxCost, spent, heldBesides(now.CostHolds, holds), most)
		return code == "", nil
	})
	return code, message, err
}

// spent is batch b's cost so far, from its usage.
func (g *Checker) spent(ctx context.Context, b batch.Batch) (float64, error) {
	rows, err := g.Store.BatchUsage(ctx, b.Tenant, b.KeyID, b.ID, usageDays(b.CreatedAt, g.Now()))
	if err != nil {
		return 0, fmt.Errorf("read the usage of %s: %w", b.ID, err)
	}
	var usd float64
	for _, r := range rows {
		if p := g.price(r.Model); p != nil {
			usd += r.USD(*p)
		}
	}
	return usd, nil
}

// heldBesides sums the holds of held but those of the chunks in mine.
func heldBesides(held, mine map[string]float64) float64 {
	var usd float64
	for k, v := range held {
		if _, ok := mine[k]; !ok {
			usd += v
		}
	}
	return usd
}

// OverCost says whether chunks that may cost most USD fit a batch's
// max_cost besides what it spent and what its running chunks hold:
// cost_limit_reached and why, or "".
func OverCost(maxCost, spent, held, most float64) (code, message string) {
	if spent+held+most <= maxCost {
		return "", ""
	}
	return CodeCostLimitReached, fmt.Sprintf("the batch's max_cost of $%.4f would be passed: $%.4f spent, $%.4f held by its running rows, and these rows may cost up to $%.4f", maxCost, spent, held, most)
}

// clockSkew is the margin for invocations' clocks that disagree
// (docs/design.md "Fault model": up to ±2 s): a commit's usage is recorded
// on the UTC day of its own clock, which may be the day after an
// admission's, or the day before its batch's creation.
const clockSkew = 5 * time.Second

// usageDays are the UTC days from created to now, each widened by
// clockSkew, at most five (a batch ends within its day's window and its
// expiry's grace), as the batch's cost reads them.
func usageDays(created int64, now time.Time) []string {
	first := time.Unix(created, 0).Add(-clockSkew).UTC().Truncate(24 * time.Hour)
	var days []string
	for d := now.Add(clockSkew).UTC().Truncate(24 * time.Hour); !d.Before(first) && len(days) < 5; d = d.Add(-24 * time.Hour) {
		days = append([]string{d.Format("2006-01-02")}, days...)
	}
	return days
}
