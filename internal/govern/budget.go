package govern

import (
	"context"
	"fmt"
	"math"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/store"
)

// Status is a tenant's budget for a month and what it has spent of it,
// counted from the daily usage aggregates the chunk commits add to
// (docs/design.md "A row's journey", step 7): no write of its own.
type Status struct {
	Budget      store.Budget
	Month       string // YYYY-MM, UTC
	SpentTokens int64
	SpentUSD    float64 // tokens of priced models only
}

// Report reads tenant's budget (cached) and, when it sets a limit, this
// month's spend (always fresh: one Query of the tenant's aggregates).
func (g *Checker) Report(ctx context.Context, tenant string) (Status, error) {
	now := g.Now().UTC()
	st := Status{Month: now.Format("2006-01")}
	b, err := g.budget(ctx, tenant)
	if err != nil || !b.Limited() {
		return st, err
	}
	st.Budget = b
	rows, err := g.Store.Usage(ctx, tenant, st.Month+"-01", st.Month+"-31")
	if err != nil {
		return st, fmt.Errorf("read usage of %s: %w", tenant, err)
	}
	st.SpentTokens, st.SpentUSD = Spent(rows, g.price)
	return st, nil
}

// budget is tenant's budget, read once per TTL.
func (g *Checker) budget(ctx context.Context, tenant string) (store.Budget, error) {
	return read(g, &g.budgets, tenant, func() (store.Budget, error) { return g.Store.GetBudget(ctx, tenant) })
}

func (g *Checker) price(model string) *config.Price {
	if g.Models == nil {
		return nil
	}
	m, _ := g.Models.Lookup(model)
	return m.Price
}

// Spent sums usage rows into tokens and, for models price knows, USD.
func Spent(rows []store.UsageRow, price func(model string) *config.Price) (tokens int64, usd float64) {
	for _, r := range rows {
		tokens += r.TotalTokens
		if p := price(r.Model); p != nil {
			usd += r.USD(*p)
		}
	}
	return tokens, usd
}

// Check says whether st's budget is spent: budget_exceeded and why, or "".
func Check(st Status) (code, message string) {
	b := st.Budget
	switch {
	case b.MonthlyTokens > 0 && st.SpentTokens >= b.MonthlyTokens:
		return CodeBudgetExceeded, fmt.Sprintf("the tenant's budget of %d tokens for %s is spent (%d used)", b.MonthlyTokens, st.Month, st.SpentTokens)
	case b.MonthlyUSD > 0 && st.SpentUSD >= b.MonthlyUSD:
		return CodeBudgetExceeded, fmt.Sprintf("the tenant's budget of $%.2f for %s is spent ($%.4f used)", b.MonthlyUSD, st.Month, st.SpentUSD)
	}
	return "", ""
}

// View is a budget as GET /v1/usage shows it (docs/api.md "Budgets, revocation and allow-lists"): a
// limit not set and what is left of it are null.
type View struct {
	Month           string   `json:"month"`
	MonthlyTokens   *int64   `json:"monthly_tokens"`
	MonthlyUSD      *float64 `json:"monthly_usd"`
	UsedTokens      int64    `json:"used_tokens"`
	UsedUSD         float64  `json:"used_usd"`
	RemainingTokens *int64   `json:"remaining_tokens"`
	RemainingUSD    *float64 `json:"remaining_usd"`
}

// View is st for GET /v1/usage; nil when no budget is set.
func (st Status) View() *View {
	b := st.Budget
	if !b.Limited() {
		return nil
	}
	v := &View{Month: st.Month, UsedTokens: st.SpentTokens, UsedUSD: round(st.SpentUSD)}
	if b.MonthlyTokens > 0 {
		left := max(b.MonthlyTokens-st.SpentTokens, 0)
		v.MonthlyTokens, v.RemainingTokens = &b.MonthlyTokens, &left
	}
	if b.MonthlyUSD > 0 {
		limit, left := b.MonthlyUSD, round(max(b.MonthlyUSD-st.SpentUSD, 0))
		v.MonthlyUSD, v.RemainingUSD = &limit, &left
	}
	return v
}

// round keeps a USD figure to a millionth of a dollar.
func round(usd float64) float64 { return math.Round(usd*1e6) / 1e6 }
