package store

import (
	"context"
	"errors"
)

// Budget is a tenant's monthly budget (docs/api.md "Budgets, revocation and allow-lists"): zero
// fields set no limit. It is the item T#<tenant>/BUDGET.
type Budget struct {
	MonthlyTokens int64   `json:"monthly_tokens" dynamodbav:"monthly_tokens"`
	MonthlyUSD    float64 `json:"monthly_usd" dynamodbav:"monthly_usd"`
}

// Limited reports whether the budget sets any limit.
func (b Budget) Limited() bool { return b.MonthlyTokens > 0 || b.MonthlyUSD > 0 }

// PutBudget sets tenant's budget.
func (s *Store) PutBudget(ctx context.Context, tenant string, b Budget) error {
	return s.put(ctx, tenantPK(tenant), "BUDGET", b, nil, false)
}

// GetBudget returns tenant's budget, the zero Budget when none is set.
func (s *Store) GetBudget(ctx context.Context, tenant string) (Budget, error) {
	var b Budget
	if _, err := s.get(ctx, tenantPK(tenant), "BUDGET", &b); err != nil && !errors.Is(err, errMissing) {
		return Budget{}, err
	}
	return b, nil
}
