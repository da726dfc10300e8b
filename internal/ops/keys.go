package ops

import (
	"context"
	"time"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/ratelimit"
)

// KeyStore is what the key reports read of the table (store.Store): the
// keys executors dropped, the rate budgets' seconds and the states the
// executors published (docs/design.md "Rate budgets").
type KeyStore interface {
	DroppedKeys(ctx context.Context, model string) (map[string]ratelimit.DroppedKey, error)
	BudgetUsed(ctx context.Context, bucket string, from, to int64) (int64, error)
	LimiterStates(ctx context.Context, model string) ([]ratelimit.Published, error)
}

// PublishedWithin is how recent an executor's published state must be to
// count: an executor publishes every few seconds while it sends rows, so
// an older one stopped sending (or its environment is frozen).
const PublishedWithin = time.Minute

// KeyReport is one key of a model's pool: whether an executor dropped it,
// its rate budgets and what the executors leased of them in the last
// minute, and what the executors that sent rows to it in the last minute
// published of their limiters (their sum or their worst).
type KeyReport struct {
	Env      string `json:"key_env"`
	State    string `json:"state"` // live, or dropped (with the status it answered)
	Status   int    `json:"dropped_status,omitempty"`
	RPM      int    `json:"rpm,omitempty"`
	RPMInUse int64  `json:"rpm_in_use"`
	TPM      int    `json:"tpm,omitempty"`
	TPMInUse int64  `json:"tpm_in_use"`
	// Executors is how many executors published the key's state in the
	// last minute; the figures below are theirs.
	Executors int `json:"executors"`
	// Concurrency is the executors' adaptive limits added up, at most
	// max_concurrency (which it is with none).
	Concurrency int `json:"concurrency_limit"`
	// Limited is the 429s the key answered them in the last minute.
	Limited int64 `json:"rate_limited_per_minute"`
	// Circuit is the worst of theirs: open, half-open or closed.
	Circuit ratelimit.CircuitState `json:"circuit"`
	// PaceRPM and PaceTPM are the slowest of their paces (lower than
	// rpm and tpm after 429s); 0 with none or unpaced.
	PaceRPM float64 `json:"pace_rpm,omitempty"`
	PaceTPM float64 `json:"pace_tpm,omitempty"`
	// UpdatedAt is the latest of their publications.
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// ReportKey adds up key env of model m at now: dropped if an executor
// dropped it, the budgets' use, and the published states of the last
// minute.
func ReportKey(m config.Model, env string, dropped map[string]ratelimit.DroppedKey, rpmUsed, tpmUsed int64, states []ratelimit.Published, now time.Time) KeyReport {
	k := KeyReport{Env: env, State: "live", RPM: m.RPM, RPMInUse: rpmUsed, TPM: m.TPM, TPMInUse: tpmUsed, Circuit: ratelimit.Closed}
	if d, ok := dropped[env]; ok {
		k.State, k.Status = "dropped", d.Status
	}
	for _, s := range states {
		if s.Env != env || now.Sub(s.At) > PublishedWithin {
			continue
		}
		k.Executors++
		k.Concurrency += s.Concurrency
		k.Limited += s.LimitedPerMinute
		if worse(s.Circuit, k.Circuit) {
			k.Circuit = s.Circuit
		}
		k.PaceRPM = slowest(k.PaceRPM, s.RPM, k.Executors == 1)
		k.PaceTPM = slowest(k.PaceTPM, s.TPM, k.Executors == 1)
		if k.UpdatedAt == nil || s.At.After(*k.UpdatedAt) {
			at := s.At.UTC()
			k.UpdatedAt = &at
		}
	}
	if k.Executors == 0 || k.Concurrency > m.MaxConcurrency {
		k.Concurrency = m.MaxConcurrency
	}
	return k
}

// worse says whether circuit a is worse than b: open, then half-open,
// then closed.
func worse(a, b ratelimit.CircuitState) bool {
	rank := map[ratelimit.CircuitState]int{ratelimit.Closed: 0, ratelimit.HalfOpen: 1, ratelimit.Open: 2}
	return rank[a] > rank[b]
}

// slowest is the lower of two paces, first taking the first one seen.
func slowest(have, pace float64, first bool) float64 {
	if first {
		return pace
	}
	return min(have, pace)
}

// Keys reports each key of model m at now.
func Keys(ctx context.Context, s KeyStore, m config.Model, now time.Time) ([]KeyReport, error) {
	dropped, err := s.DroppedKeys(ctx, m.Name)
	if err != nil {
		return nil, err
	}
	states, err := s.LimiterStates(ctx, m.Name)
	if err != nil {
		return nil, err
	}
	out := []KeyReport{}
	to := now.Unix()
	for _, env := range m.KeyEnvs() {
		var rpm, tpm int64
		if m.RPM > 0 {
			if rpm, err = s.BudgetUsed(ctx, m.Name+"#"+env+"#rpm", to-59, to); err != nil {
				return nil, err
			}
		}
		if m.TPM > 0 {
			if tpm, err = s.BudgetUsed(ctx, m.Name+"#"+env+"#tpm", to-59, to); err != nil {
				return nil, err
			}
		}
		out = append(out, ReportKey(m, env, dropped, rpm, tpm, states, now))
	}
	return out, nil
}
