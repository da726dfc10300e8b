package store

import (
	"context"
	"encoding/json"
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

// MarshalJSON writes a limit not set as null, as GET /v1/usage shows it
// (docs/api.md "Usage"): relay tenants budget prints what the API says.
func (b Budget) MarshalJSON() ([]byte, error) {
	var v struct {
		MonthlyTokens *int64   `json:"monthly_tokens"`
		MonthlyUSD    *float64 `json:"monthly_usd"`
	}
	if b.MonthlyTokens > 0 {
		v.MonthlyTokens = &b.MonthlyTokens
	}
	if b.MonthlyUSD > 0 {
		v.MonthlyUSD = &b.MonthlyUSD
	}
	return json.Marshal(v)
}

// With is b with the limits set gives (nil: keep b's): the budget after
// relay tenants budget set, which changes only the flags it is given.
func (b Budget) With(tokens *int64, usd *float64) Budget {
	if tokens != nil {
		b.MonthlyTokens = *tokens
	}
	if usd != nil {
		b.MonthlyUSD = *usd
	}
	return b
}

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
