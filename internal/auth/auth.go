// Package auth owns API keys and tenants (docs/api.md "Overview"): keys are random, shown
// once, stored only as their SHA-256; each belongs to one tenant and carries
// scopes.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/ids"
)

// Scopes a key may carry.
const (
	ScopeFiles   = "files"
	ScopeBatches = "batches"
	ScopeAdmin   = "admin"
)

// AllScopes is what a key gets when none are named.
var AllScopes = []string{ScopeFiles, ScopeBatches}

// Principal is an authenticated caller.
type Principal struct {
	Tenant string
	KeyID  string
	Scopes []string
	Models []string // the key's allow-list; none: every model
}

// MayUse reports whether the principal's key may use model.
func (p Principal) MayUse(model string) bool {
	return apikey.Key{Models: p.Models}.MayUse(model)
}

// Can reports whether the principal holds scope (admin holds all).
func (p Principal) Can(scope string) bool {
	return slices.Contains(p.Scopes, scope) || slices.Contains(p.Scopes, ScopeAdmin)
}

// Store persists keys and tenant secrets.
type Store interface {
	GetKey(ctx context.Context, hash string) (apikey.Key, error)
	PutKey(ctx context.Context, k apikey.Key) error
	ListKeys(ctx context.Context) ([]apikey.Key, error)
	DisableKey(ctx context.Context, id string) error
	// WebhookSecret returns the tenant's signing secret, creating it with
	// fresh if it does not exist yet.
	WebhookSecret(ctx context.Context, tenant string, fresh func() string) (string, error)
}

// ValidTenant reports whether name can be a tenant: it goes into keys of
// the table and the bucket, so it is kept to a safe alphabet.
func ValidTenant(name string) bool {
	return name != "" && len(name) <= 64 && ids.Valid("", name)
}

// Create makes a new key for tenant and returns it with its record.
func Create(ctx context.Context, s Store, tenant string, scopes, models []string) (string, apikey.Key, error) {
	if !ValidTenant(tenant) {
		return "", apikey.Key{}, fmt.Errorf("tenant %q: use 1-64 letters, digits, '-' or '_'", tenant)
	}
	if len(scopes) == 0 {
		scopes = AllScopes
	}
	for _, sc := range scopes {
		if sc != ScopeFiles && sc != ScopeBatches && sc != ScopeAdmin {
			return "", apikey.Key{}, fmt.Errorf("scope %q: use files, batches or admin", sc)
		}
	}
	raw := keyPrefix + ids.Secret(keyBytes)
	h := apikey.Hash(raw)
	k := apikey.Key{Hash: h, ID: h[:12], Tenant: tenant, Scopes: slices.Compact(slices.Sorted(slices.Values(scopes))), CreatedAt: time.Now().Unix()}
	if len(models) > 0 {
		k.Models = slices.Compact(slices.Sorted(slices.Values(models)))
	}
	if err := s.PutKey(ctx, k); err != nil {
		return "", apikey.Key{}, fmt.Errorf("store key: %w", err)
	}
	return raw, k, nil
}

// Secrets keeps the tenants' webhook signing secrets (Store's
// WebhookSecret).
type Secrets interface {
	WebhookSecret(ctx context.Context, tenant string, fresh func() string) (string, error)
}

// WebhookSecret returns tenant's Standard Webhooks secret (whsec_…).
func WebhookSecret(ctx context.Context, s Secrets, tenant string) (string, error) {
	if !ValidTenant(tenant) {
		return "", fmt.Errorf("tenant %q: use 1-64 letters, digits, '-' or '_'", tenant)
	}
	return s.WebhookSecret(ctx, tenant, func() string {
		b := make([]byte, 32)
		rand.Read(b)
		return "whsec_" + base64.StdEncoding.EncodeToString(b)
	})
}

// FromRequest extracts the raw key: Authorization: Bearer (OpenAI SDKs) or
// x-api-key (Anthropic SDKs).
func FromRequest(r *http.Request) string {
	if v := r.Header.Get("Authorization"); v != "" {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return strings.TrimSpace(r.Header.Get("x-api-key"))
}

// Authenticator checks keys against a Store.
type Authenticator struct {
	Store Store
	// UnknownKeyHint, if set, ends the message for a key the store does not
	// hold (the local runtime says its keys do not survive a restart).
	UnknownKeyHint string
}

// A key is keyPrefix and keyBytes random bytes in unpadded base64url.
const (
	keyPrefix = "rb-"
	keyBytes  = 32
)

// wellFormed reports whether raw has the shape Create gives keys: anything
// else is refused before a lookup, so garbage keys cost the table nothing.
func wellFormed(raw string) bool {
	return len(raw) == len(keyPrefix)+(keyBytes*8+5)/6 && ids.Valid(keyPrefix, raw)
}

// Authenticate resolves a raw key to a principal holding scope.
func (a Authenticator) Authenticate(ctx context.Context, raw, scope string) (Principal, error) {
	if raw == "" {
		return Principal{}, errs.E(errs.Unauthenticated, "missing_api_key", "", "no API key: send Authorization: Bearer <key> or x-api-key: <key>")
	}
	if !wellFormed(raw) {
		return Principal{}, a.incorrect()
	}
	h := apikey.Hash(raw)
	k, err := a.Store.GetKey(ctx, h)
	if errors.Is(err, apikey.ErrNoKey) || (err == nil && subtle.ConstantTimeCompare([]byte(k.Hash), []byte(h)) != 1) {
		return Principal{}, a.incorrect()
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up key: %w", err)
	}
	if k.Disabled {
		return Principal{}, errs.E(errs.Unauthenticated, "invalid_api_key", "", "this API key is disabled")
	}
	p := Principal{Tenant: k.Tenant, KeyID: k.ID, Scopes: k.Scopes, Models: k.Models}
	if scope != "" && !p.Can(scope) {
		return Principal{}, errs.E(errs.Forbidden, "insufficient_scope", "", "this API key lacks the %q scope", scope)
	}
	return p, nil
}

// incorrect is the 401 of a key that is not one of the service's.
func (a Authenticator) incorrect() error {
	msg := "incorrect API key provided"
	if a.UnknownKeyHint != "" {
		msg += ": " + a.UnknownKeyHint
	}
	return errs.E(errs.Unauthenticated, "invalid_api_key", "", "%s", msg)
}
