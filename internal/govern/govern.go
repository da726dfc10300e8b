// Package govern owns what a tenant's budget and a batch's API key allow
// the batch (docs/api.md "Budgets, revocation and allow-lists"): whether it
// may start, which models its rows may name, and whether a chunk's rows may
// still run when its run starts. The engine asks it through
// engine.Governor; the decisions are pure functions (Spent, Check, Revoked),
// and the reads of keys and budgets are cached for at most TTL, so a chunk
// claim costs no read most of the time and nothing is written.
package govern

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/store"
)

// Error codes of the rows and batches it refuses.
const (
	CodeBudgetExceeded    = "budget_exceeded"
	CodeCredentialRevoked = "credential_revoked"
	CodeCostLimitReached  = "cost_limit_reached"
)

// DefaultTTL is how long a key or a budget read is trusted: a disabled key
// stops its batches' chunks claimed at most this long after the disable.
const DefaultTTL = 30 * time.Second

// Store is what the checks read of the table (internal/store).
type Store interface {
	KeyByID(ctx context.Context, id string) (apikey.Key, error)
	GetBudget(ctx context.Context, tenant string) (store.Budget, error)
	Usage(ctx context.Context, tenant, from, to string) ([]store.UsageRow, error)
	// Reservations (reserve.go).
	UpdateReservations(ctx context.Context, tenant string, fn func(*store.Reservations) error) error
	GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error)
	// A batch's cost so far, against its max_cost (cost.go).
	BatchUsage(ctx context.Context, tenant, keyID, batchID string, days []string) ([]store.UsageDetail, error)
	HoldCost(ctx context.Context, tenant, id string, holds map[string]float64, fits func(batch.Batch) (bool, error)) (bool, error)
}

var _ Store = (*store.Store)(nil)

// Checker answers the engine's questions about a batch's key and tenant.
type Checker struct {
	Store  Store
	Models *config.Models // the prices of budgets in USD
	// TTL is how long a read key or budget is used (default DefaultTTL).
	TTL time.Duration
	// Now is the clock (required; app.New gives every service the same).
	Now func() time.Time

	mu      sync.Mutex
	keys    map[string]cached[apikey.Key]
	budgets map[string]cached[store.Budget]
}

type cached[T any] struct {
	v  T
	at time.Time
}

// Start is asked when batch b is planned: a tenant already over its budget
// gets a plan.Invalid error (the batch fails with budget_exceeded), and
// allowed says which models b's key may use (nil: every one).
func (g *Checker) Start(ctx context.Context, b batch.Batch) (allowed func(string) bool, err error) {
	st, err := g.Report(ctx, b.Tenant)
	if err != nil {
		return nil, err
	}
	if code, why := Check(st); code != "" {
		return nil, plan.Invalid{{Code: code, Message: why}}
	}
	if b.Endpoint == endpoint.Messages {
		// Message batch requests were checked at create: one the key may
		// not use is already an errored row (internal/anthropic). A retry's
		// rows are checked against its key as they run (Allowed).
		return nil, nil
	}
	return g.Allowed(ctx, b)
}

// Allowed says which models batch b's key may use (nil: every one): its
// rows run, and fall back, only on those (provider.Route).
func (g *Checker) Allowed(ctx context.Context, b batch.Batch) (func(model string) bool, error) {
	k, err := g.key(ctx, b.KeyID)
	if err != nil || len(k.Models) == 0 {
		return nil, err
	}
	return k.MayUse, nil
}

// Admit is asked when a run of batch b's chunk c starts: a key disabled
// (or gone) ends its rows with credential_revoked, one expired with
// api_key_expired, one of a disabled tenant with tenant_disabled, a budget
// spent with budget_exceeded, a chunk that could take its batch past its
// max_cost with cost_limit_reached (checkCost; more are the other chunks
// of a native group, admitted with c as one); "" lets them run.
func (g *Checker) Admit(ctx context.Context, b batch.Batch, c batch.Chunk, more ...batch.Chunk) (code, message string, err error) {
	k, err := g.key(ctx, b.KeyID)
	if err != nil {
		return "", "", err
	}
	if code, message = Refused(b.KeyID, k, g.Now()); code != "" {
		return code, message, nil
	}
	st, err := g.Report(ctx, b.Tenant)
	if err != nil {
		return "", "", err
	}
	if code, message = Check(st); code != "" {
		return code, message, nil
	}
	return g.checkCost(ctx, b, append([]batch.Chunk{c}, more...))
}

// Refused says why the key keyID, read as k (the zero Key when it is gone),
// may no longer run its batches' rows at now, or "". A batch recorded
// without a key is never refused.
func Refused(keyID string, k apikey.Key, now time.Time) (code, message string) {
	if keyID == "" {
		return "", ""
	}
	if k.ID == "" {
		return CodeCredentialRevoked, fmt.Sprintf("the API key %s that submitted the batch was deleted before this request ran", keyID)
	}
	switch code, why := k.Refusal(now); code {
	case "":
		return "", ""
	case apikey.CodeDisabled:
		return CodeCredentialRevoked, fmt.Sprintf("the API key %s that submitted the batch was disabled before this request ran", keyID)
	default:
		return code, why + " before this request ran"
	}
}

// key reads key id through the cache; a missing key is the zero Key.
func (g *Checker) key(ctx context.Context, id string) (apikey.Key, error) {
	if id == "" {
		return apikey.Key{}, nil
	}
	return read(g, &g.keys, id, func() (apikey.Key, error) {
		k, err := g.Store.KeyByID(ctx, id)
		if errors.Is(err, apikey.ErrNoKey) {
			return apikey.Key{}, nil
		}
		if err != nil {
			return apikey.Key{}, fmt.Errorf("read key %s: %w", id, err)
		}
		return k, nil
	})
}

// read returns m[id] while it is younger than the TTL, else fetch's answer,
// which it keeps.
func read[T any](g *Checker, m *map[string]cached[T], id string, fetch func() (T, error)) (T, error) {
	now := g.Now()
	ttl := g.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	g.mu.Lock()
	c, ok := (*m)[id]
	g.mu.Unlock()
	if ok && now.Sub(c.at) < ttl && !now.Before(c.at) {
		return c.v, nil
	}
	v, err := fetch()
	if err != nil {
		return v, err
	}
	g.mu.Lock()
	if *m == nil {
		*m = map[string]cached[T]{}
	}
	(*m)[id] = cached[T]{v: v, at: now}
	g.mu.Unlock()
	return v, nil
}
