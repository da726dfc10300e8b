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
	// KeyByID reads the key's record under its id: its current secret's.
	KeyByID(ctx context.Context, id string) (apikey.Key, error)
	PutKey(ctx context.Context, k apikey.Key) error
	// RotateKey makes next (the same key, a new secret) the key's record,
	// and marks old's secret replaced until `until`; it fails when old is
	// no longer the key's current secret.
	RotateKey(ctx context.Context, old, next apikey.Key, until time.Time) error
	// FollowTenant marks key k disabled with its tenant, in one write
	// conditional on the tenant being disabled, and reports whether it is.
	FollowTenant(ctx context.Context, k apikey.Key) (bool, error)
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

// NewKey is what a key is made with.
type NewKey struct {
	Tenant string
	Scopes []string // none: AllScopes
	Models []string // the allow-list; none: every model
	// ExpiresAt, if set, is when the key stops working.
	ExpiresAt time.Time
}

// Create makes a new key and returns it with its record. A key made for a
// disabled tenant is disabled with it: the key is marked after it is
// written, on condition the tenant is disabled (FollowTenant), and a
// disable or an enable lists the keys after it writes the tenant, so one of
// the two sees the other.
func Create(ctx context.Context, s Store, n NewKey) (string, apikey.Key, error) {
	if !ValidTenant(n.Tenant) {
		return "", apikey.Key{}, fmt.Errorf("tenant %q: use 1-64 letters, digits, '-' or '_'", n.Tenant)
	}
	scopes := n.Scopes
	if len(scopes) == 0 {
		scopes = AllScopes
	}
	for _, sc := range scopes {
		if sc != ScopeFiles && sc != ScopeBatches && sc != ScopeAdmin {
			return "", apikey.Key{}, fmt.Errorf("scope %q: use files, batches or admin", sc)
		}
	}
	raw, h := newSecret()
	k := apikey.Key{Hash: h, ID: h[:12], Tenant: n.Tenant, Scopes: slices.Compact(slices.Sorted(slices.Values(scopes))), CreatedAt: time.Now().Unix()}
	if len(n.Models) > 0 {
		k.Models = slices.Compact(slices.Sorted(slices.Values(n.Models)))
	}
	if !n.ExpiresAt.IsZero() {
		k.ExpiresAt = n.ExpiresAt.Unix()
	}
	if err := s.PutKey(ctx, k); err != nil {
		return "", apikey.Key{}, fmt.Errorf("store key: %w", err)
	}
	off, err := s.FollowTenant(ctx, k)
	if err != nil {
		return "", apikey.Key{}, fmt.Errorf("store key: %w", err)
	}
	k.TenantDisabled = off
	return raw, k, nil
}

// newSecret is a fresh key and its hash.
func newSecret() (raw, hash string) {
	raw = keyPrefix + ids.Secret(keyBytes)
	return raw, apikey.Hash(raw)
}

// Rotate gives key id a new secret and returns it: the key keeps its id,
// tenant, scopes, models and batches; its old secret keeps working for
// overlap (none: it stops at once), then answers api_key_expired.
func Rotate(ctx context.Context, s Store, id string, overlap time.Duration, now time.Time) (string, apikey.Key, error) {
	old, err := s.KeyByID(ctx, id)
	if err != nil {
		return "", apikey.Key{}, err
	}
	if code, why := old.Refusal(now); code != "" {
		return "", apikey.Key{}, fmt.Errorf("rotate: %s", why)
	}
	raw, h := newSecret()
	next := old
	next.Hash, next.PreviousHash = h, old.Hash
	if err := s.RotateKey(ctx, old, next, now.Add(overlap)); err != nil {
		return "", apikey.Key{}, fmt.Errorf("rotate key %s: %w", id, err)
	}
	return raw, next, nil
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

// Keys is what Authenticate reads of a Store.
type Keys interface {
	GetKey(ctx context.Context, hash string) (apikey.Key, error)
	KeyByID(ctx context.Context, id string) (apikey.Key, error)
}

// Authenticator checks keys against a Store.
type Authenticator struct {
	Store Keys
	// Now is the clock keys expire by; nil is time.Now.
	Now func() time.Time
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

// Authenticate resolves a raw key to a principal holding scope. A key of
// the service's that is refused (replaced, disabled, expired, its tenant
// disabled, without scope) comes back with its error and a principal
// naming it (its tenant and id, no scope): the audit trail records
// who was refused; nothing may act on it.
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
	now := time.Now()
	if a.Now != nil {
		now = a.Now()
	}
	named := Principal{Tenant: k.Tenant, KeyID: k.ID}
	if k.ReplacedUntil > 0 {
		// A secret a rotation replaced: during the overlap of the key's
		// last rotation, the key's current record decides.
		replaced := errs.E(errs.Unauthenticated, apikey.CodeExpired, "", "this secret of API key %s was replaced by a rotation and stopped working at %s: use the new one",
			k.ID, time.Unix(k.ReplacedUntil, 0).UTC().Format(time.RFC3339))
		if now.Unix() >= k.ReplacedUntil {
			return named, replaced
		}
		live, err := a.Store.KeyByID(ctx, k.ID)
		if errors.Is(err, apikey.ErrNoKey) {
			return Principal{}, errs.E(errs.Unauthenticated, "invalid_api_key", "", "incorrect API key provided")
		}
		if err != nil {
			return Principal{}, fmt.Errorf("look up key %s: %w", k.ID, err)
		}
		if live.PreviousHash != k.Hash {
			return named, replaced // a later rotation ended its overlap
		}
		k = live
	}
	switch code, why := k.Refusal(now); code {
	case apikey.CodeDisabled:
		return named, errs.E(errs.Unauthenticated, "invalid_api_key", "", "this API key is disabled")
	case apikey.CodeExpired:
		return named, errs.E(errs.Unauthenticated, code, "", "%s: make a new key (relay keys create) or rotate before expiry", why)
	case apikey.CodeTenantDisabled:
		return named, errs.E(errs.Forbidden, code, "", "%s: its keys, templates and batches are stopped", why)
	}
	p := Principal{Tenant: k.Tenant, KeyID: k.ID, Scopes: k.Scopes, Models: k.Models}
	if scope != "" && !p.Can(scope) {
		return named, errs.E(errs.Forbidden, "insufficient_scope", "", "this API key lacks the %q scope", scope)
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
