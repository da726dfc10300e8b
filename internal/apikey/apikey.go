// Package apikey is the record of an API key as it is stored (never the
// key itself, only its SHA-256): internal/auth makes and checks keys,
// internal/store keeps them (docs/api.md "Overview").
package apikey

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
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
