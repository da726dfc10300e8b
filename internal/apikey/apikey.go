// Package apikey is the record of an API key as it is stored (never the
// key itself, only its SHA-256): internal/auth makes and checks keys,
// internal/store keeps them (docs/api.md "Overview").
package apikey

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Key is a stored API key (never the key itself).
type Key struct {
	Hash      string   `dynamodbav:"hash"`
	ID        string   `dynamodbav:"key_id"` // short public id: first 12 hex of the hash
	Tenant    string   `dynamodbav:"tenant"`
	Scopes    []string `dynamodbav:"scopes,stringset"`
	Disabled  bool     `dynamodbav:"disabled"`
	CreatedAt int64    `dynamodbav:"created_at"`
	// Models, if any, are the only models the key's batches may name
	// (docs/api.md "Budgets, revocation and allow-lists"); none allows every model.
	Models []string `dynamodbav:"models,omitempty,stringset"`
	// ExpiresAt (Unix seconds), when set, is when the key stops working.
	ExpiresAt int64 `dynamodbav:"expires_at,omitempty"`
	// TenantDisabled is set on every key of a disabled tenant.
	TenantDisabled bool `dynamodbav:"tenant_disabled,omitempty"`
	// ReplacedUntil (Unix seconds) is set on the record of a secret a
	// rotation replaced: the old secret works until then (the rotation's
	// overlap), as the key's record under its id (its current secret's)
	// allows; Hash is the old secret's.
	ReplacedUntil int64 `dynamodbav:"replaced_until,omitempty"`
	// PreviousHash, on the record of a rotated key, is the hash of the
	// secret its last rotation replaced: the only old secret that still
	// works, until its ReplacedUntil.
	PreviousHash string `dynamodbav:"previous_hash,omitempty"`
}

// Why a key no longer works (docs/api.md "Keys"): the codes of the API's
// 401 and 403 answers, and of the rows and templates it stops.
const (
	CodeDisabled       = "api_key_disabled"
	CodeExpired        = "api_key_expired"
	CodeTenantDisabled = "tenant_disabled"
)

// Refusal says why k no longer works at now: one of the codes above and a
// reason, or "" while it works. A disabled tenant wins over the key's own
// state.
func (k Key) Refusal(now time.Time) (code, why string) {
	switch {
	case k.TenantDisabled:
		return CodeTenantDisabled, fmt.Sprintf("the tenant %s is disabled", k.Tenant)
	case k.Disabled:
		return CodeDisabled, fmt.Sprintf("the API key %s is disabled", k.ID)
	case k.ExpiresAt > 0 && now.Unix() >= k.ExpiresAt:
		return CodeExpired, fmt.Sprintf("the API key %s expired at %s", k.ID, time.Unix(k.ExpiresAt, 0).UTC().Format(time.RFC3339))
	}
	return "", ""
}

// MayUse reports whether the key may use model.
func (k Key) MayUse(model string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, model)
}

// ErrNoKey is returned by a store (auth.Store) for an unknown key.
var ErrNoKey = errors.New("auth: no such key")

// Hash is the stored form of a key.
func Hash(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}
