package govern

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/store"
)

// reservationGrace is how long a reservation whose batch is not recorded
// is kept: its create may still be recording it.
const reservationGrace = 5 * time.Minute

// Reserve records batch id's estimate against tenant's budget at create
// (docs/api.md "Budgets, revocation and allow-lists", reservations): a
// tenant with no budget reserves nothing (and estimate is not called);
// one whose spend, plus what its other unfinished batches still hold,
// plus this estimate passes a limit is refused with budget_exceeded
// (an *errs.Error); the spend is read after what the others hold. The write is conditional on the reservations' version,
// so two creates cannot both take room that fits one; a retried create
// (an ambiguous write) finds its own reservation and keeps it.
func (g *Checker) Reserve(ctx context.Context, tenant, id string, estimate func() (store.Reservation, error)) error {
	b, err := g.budget(ctx, tenant)
	if err != nil || !b.Limited() {
		return err
	}
	r, err := estimate()
	if err != nil {
		return err
	}
	r.CreatedAt = g.Now().Unix()
	return g.Store.UpdateReservations(ctx, tenant, func(rs *store.Reservations) error {
		if _, ok := rs.Batches[id]; ok {
			return store.ErrUnchanged
		}
		var held store.Reservation
		for other, o := range rs.Batches {
			b, err := g.Store.GetBatch(ctx, tenant, other)
			found := err == nil
			if err != nil && !errors.Is(err, store.ErrBatchNotFound) {
				return fmt.Errorf("read reserving batch %s: %w", other, err)
			}
			left, keep := Holds(o, b, found, g.Now())
			if !keep {
				delete(rs.Batches, other)
				continue
			}
			held.Tokens += left.Tokens
			held.USD += left.USD
		}
		// The spend is read after what the others hold: rows that settled
		// in between moved their spend from the one to the other (in one
		// commit), and are counted twice, not missed.
		st, err := g.Report(ctx, tenant)
		if err != nil {
			return err
		}
		if code, why := Fits(st, held, r); code != "" {
			return errs.E(errs.Unprocessable, code, "", "%s", why)
		}
		rs.Batches[id] = r
		return nil
	})
}

// Release ends batch b's reservation, if it holds one (the batch ended).
func (g *Checker) Release(ctx context.Context, b batch.Batch) error {
	err := g.Store.UpdateReservations(ctx, b.Tenant, func(rs *store.Reservations) error {
		if _, ok := rs.Batches[b.ID]; !ok {
			return store.ErrUnchanged
		}
		delete(rs.Batches, b.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("release the reservation of %s: %w", b.ID, err)
	}
	return nil
}

// Holds is what reservation r of batch b (found: recorded) still holds at
// now: the share of its rows not yet settled, whose spend the usage does
// not count yet. A batch that ended, or was never recorded and whose create
// is long over, holds nothing (keep false).
func Holds(r store.Reservation, b batch.Batch, found bool, now time.Time) (left store.Reservation, keep bool) {
	switch {
	case !found:
		return r, now.Sub(time.Unix(r.CreatedAt, 0)) < reservationGrace
	case b.Status.Terminal():
		return store.Reservation{}, false
	}
	rows := max(r.Rows, int(b.RequestCounts.Total))
	if rows == 0 {
		return r, true
	}
	unsettled := 1 - float64(b.RequestCounts.Completed+b.RequestCounts.Failed)/float64(rows)
	unsettled = max(unsettled, 0)
	return store.Reservation{Tokens: int64(float64(r.Tokens) * unsettled), USD: r.USD * unsettled, Rows: r.Rows}, true
}

// Fits says whether estimate r fits st's budget besides the spend and held,
// what other batches hold: budget_exceeded and why, or "".
func Fits(st Status, held, r store.Reservation) (code, message string) {
	b := st.Budget
	if b.MonthlyTokens > 0 {
		if need := st.SpentTokens + held.Tokens + r.Tokens; need > b.MonthlyTokens {
			return CodeBudgetExceeded, fmt.Sprintf("the batch's estimate of %d tokens does not fit the tenant's budget of %d tokens for %s: %d used, %d held by unfinished batches",
				r.Tokens, b.MonthlyTokens, st.Month, st.SpentTokens, held.Tokens)
		}
	}
	if b.MonthlyUSD > 0 {
		if need := st.SpentUSD + held.USD + r.USD; need > b.MonthlyUSD {
			return CodeBudgetExceeded, fmt.Sprintf("the batch's estimate of $%.4f does not fit the tenant's budget of $%.2f for %s: $%.4f used, $%.4f held by unfinished batches",
				r.USD, b.MonthlyUSD, st.Month, st.SpentUSD, held.USD)
		}
	}
	return "", ""
}
