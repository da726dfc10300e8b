package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/errs"
)

// memStore is a Store in memory that remembers everything it was given.
type memStore struct {
	keys        map[string]apikey.Key // by hash
	puts        []apikey.Key
	err         error
	offTenants  map[string]bool
	rotatedKeys map[string]string // key id → current hash, once rotated
}

func (s *memStore) KeyByID(_ context.Context, id string) (apikey.Key, error) {
	if h, ok := s.rotatedKeys[id]; ok {
		return s.keys[h], nil
	}
	for _, k := range s.keys {
		if k.ID == id && k.ReplacedUntil == 0 {
			return k, nil
		}
	}
	return apikey.Key{}, apikey.ErrNoKey
}

func (s *memStore) RotateKey(ctx context.Context, old, next apikey.Key, until time.Time) error {
	if cur, _ := s.KeyByID(ctx, old.ID); cur.Hash != old.Hash {
		return errors.New("rotated meanwhile")
	}
	s.PutKey(ctx, next)
	old.ReplacedUntil = until.Unix()
	s.keys[old.Hash] = old
	if s.rotatedKeys == nil {
		s.rotatedKeys = map[string]string{}
	}
	s.rotatedKeys[old.ID] = next.Hash
	return nil
}

func (s *memStore) FollowTenant(ctx context.Context, k apikey.Key) (bool, error) {
	if !s.offTenants[k.Tenant] {
		return false, nil
	}
	k.TenantDisabled = true
	return true, s.PutKey(ctx, k)
}

func (s *memStore) GetKey(_ context.Context, hash string) (apikey.Key, error) {
	if s.err != nil {
		return apikey.Key{}, s.err
	}
	k, ok := s.keys[hash]
	if !ok {
		return apikey.Key{}, apikey.ErrNoKey
	}
	return k, nil
}

func (s *memStore) PutKey(_ context.Context, k apikey.Key) error {
	if s.keys == nil {
		s.keys = map[string]apikey.Key{}
	}
	s.keys[k.Hash] = k
	s.puts = append(s.puts, k)
	return nil
}

func (s *memStore) ListKeys(context.Context) ([]apikey.Key, error) { return nil, nil }
func (s *memStore) DisableKey(context.Context, string) error       { return nil }
func (s *memStore) WebhookSecret(_ context.Context, _ string, fresh func() string) (string, error) {
	return fresh(), nil
}

// A key is "rb-" and 32 random bytes; only its SHA-256 is stored, with a
// 12-hex-digit public id; no two keys are alike.
func TestCreateStoresOnlyTheHash(t *testing.T) {
	t.Parallel()
	s := &memStore{}
	seen := map[string]bool{}
	for range 100 {
		raw, k, err := Create(context.Background(), s, NewKey{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		body, ok := strings.CutPrefix(raw, "rb-")
		b, err := base64.RawURLEncoding.DecodeString(body)
		if !ok || err != nil || len(b) < 32 {
			t.Fatalf("key %q: want rb- and at least 32 random bytes", raw)
		}
		if seen[raw] {
			t.Fatalf("key %q made twice", raw)
		}
		seen[raw] = true
		if k.Hash != apikey.Hash(raw) || len(k.Hash) != 64 || k.ID != k.Hash[:12] {
			t.Fatalf("record %+v: want the SHA-256 of the key and its first 12 hex digits as id", k)
		}
	}
	for _, k := range s.puts {
		if strings.Contains(k.Hash+k.ID+k.Tenant+strings.Join(k.Scopes, ","), "rb-") {
			t.Fatalf("stored record %+v holds a key", k)
		}
	}
	if _, _, err := Create(context.Background(), s, NewKey{Tenant: "../x"}); err == nil {
		t.Fatal("a tenant name with a path was accepted")
	}
	if _, _, err := Create(context.Background(), s, NewKey{Tenant: "acme", Scopes: []string{"root"}}); err == nil {
		t.Fatal("an unknown scope was accepted")
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &memStore{}
	full, _, _ := Create(ctx, s, NewKey{Tenant: "acme"})
	filesOnly, _, _ := Create(ctx, s, NewKey{Tenant: "acme", Scopes: []string{ScopeFiles}})
	admin, _, _ := Create(ctx, s, NewKey{Tenant: "globex", Scopes: []string{ScopeAdmin}})
	off, offKey, _ := Create(ctx, s, NewKey{Tenant: "acme"})
	offKey.Disabled = true
	s.PutKey(ctx, offKey)

	tests := []struct {
		name, raw, scope string
		kind             errs.Kind // 0 (Internal) means accepted here
		tenant           string
	}{
		{"full key", full, ScopeBatches, 0, "acme"},
		{"files key for files", filesOnly, ScopeFiles, 0, "acme"},
		{"files key for batches", filesOnly, ScopeBatches, errs.Forbidden, "acme"},
		{"admin holds every scope", admin, ScopeBatches, 0, "globex"},
		{"disabled key", off, ScopeFiles, errs.Unauthenticated, "acme"},
		{"no key", "", ScopeFiles, errs.Unauthenticated, ""},
		{"unknown key", "rb-" + strings.Repeat("A", 43), ScopeFiles, errs.Unauthenticated, ""},
		{"a key one character off", full[:len(full)-1] + "_", ScopeFiles, errs.Unauthenticated, ""},
		{"the hash instead of the key", apikey.Hash(full), ScopeFiles, errs.Unauthenticated, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Authenticator{Store: s}.Authenticate(ctx, tt.raw, tt.scope)
			if tt.kind == 0 {
				if err != nil || p.Tenant != tt.tenant || p.KeyID != apikey.Hash(tt.raw)[:12] {
					t.Fatalf("got %+v, %v; want tenant %s", p, err, tt.tenant)
				}
				return
			}
			// A refused key of the service's is named (the audit trail
			// records it), holding no scope.
			if !errs.Is(err, tt.kind) || p.Tenant != tt.tenant || len(p.Scopes) != 0 || len(p.Models) != 0 {
				t.Fatalf("got %+v, %v; want kind %v, tenant %q and no scope", p, err, tt.kind, tt.tenant)
			}
		})
	}
	// A store failure is an internal error, not a 401 that would hide it.
	broken := Authenticator{Store: &memStore{err: errors.New("dynamodb down")}}
	if _, err := broken.Authenticate(ctx, full, ScopeFiles); errs.KindOf(err) != errs.Internal {
		t.Fatalf("store failure: got %v, want an internal error", err)
	}
}

// A key past its expiry is 401 api_key_expired; a rotated key answers to
// both secrets during the overlap and to the new one only after it; a
// disabled tenant's keys, and one made for it later, are 403
// tenant_disabled.
func TestAuthenticateExpiryRotationAndTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	clock := now
	s := &memStore{offTenants: map[string]bool{"frozen": true}}
	a := Authenticator{Store: s, Now: func() time.Time { return clock }}
	code := func(raw string) string {
		_, err := a.Authenticate(ctx, raw, ScopeFiles)
		if err == nil {
			return ""
		}
		var e *errs.Error
		if !errors.As(err, &e) {
			return err.Error()
		}
		return e.Code
	}
	expiring, _, _ := Create(ctx, s, NewKey{Tenant: "acme", ExpiresAt: now.Add(time.Hour)})
	old, k, _ := Create(ctx, s, NewKey{Tenant: "acme"})
	frozen, _, _ := Create(ctx, s, NewKey{Tenant: "frozen"})
	fresh, next, err := Rotate(ctx, s, k.ID, 24*time.Hour, now)
	if err != nil || next.ID != k.ID || next.Hash == k.Hash {
		t.Fatalf("rotate: %+v, %v; want the same id with a new secret", next, err)
	}
	if got := []string{code(expiring), code(old), code(fresh), code(frozen)}; !slices.Equal(got, []string{"", "", "", apikey.CodeTenantDisabled}) {
		t.Fatalf("now: %q; want the expiring key, both secrets of the rotated key, and tenant_disabled", got)
	}
	clock = now.Add(25 * time.Hour)
	if got := []string{code(expiring), code(old), code(fresh)}; !slices.Equal(got, []string{apikey.CodeExpired, apikey.CodeExpired, ""}) {
		t.Fatalf("after a day: %q; want api_key_expired twice, the new secret working", got)
	}
	p, err := a.Authenticate(ctx, fresh, ScopeFiles)
	if err != nil || p.KeyID != k.ID || p.Tenant != "acme" {
		t.Fatalf("the new secret authenticates as %+v, %v; want key %s", p, err, k.ID)
	}
	// During an overlap the key's record decides: disabling it stops both.
	clock = now
	cur, _ := s.KeyByID(ctx, k.ID)
	cur.Disabled = true
	s.PutKey(ctx, cur)
	if got := []string{code(old), code(fresh)}; !slices.Equal(got, []string{"invalid_api_key", "invalid_api_key"}) {
		t.Fatalf("disabled during the overlap: %q; want both refused", got)
	}
}

func TestFromRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header, value, want string
	}{
		{"Authorization", "Bearer rb-abc", "rb-abc"},
		{"Authorization", "Bearer  rb-abc ", "rb-abc"},
		{"Authorization", "Basic cmI6YWJj", ""},
		{"Authorization", "rb-abc", ""},
		{"x-api-key", "rb-abc", "rb-abc"},
		{"X-Api-Key", " rb-abc\t", "rb-abc"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/v1/files", nil)
		r.Header.Set(tt.header, tt.value)
		if got := FromRequest(r); got != tt.want {
			t.Errorf("%s: %q: got %q, want %q", tt.header, tt.value, got, tt.want)
		}
	}
	// A bearer token wins over x-api-key; a malformed Authorization is not
	// rescued by x-api-key.
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Basic x")
	r.Header.Set("x-api-key", "rb-abc")
	if got := FromRequest(r); got != "" {
		t.Errorf("Basic and x-api-key: got %q, want none", got)
	}
}

// countingStore counts the key lookups a request costs.
type countingStore struct {
	memStore
	gets int
}

func (s *countingStore) GetKey(ctx context.Context, hash string) (apikey.Key, error) {
	s.gets++
	return s.memStore.GetKey(ctx, hash)
}

// A key that is not in the shape Create makes is refused with the same 401
// as an unknown one, without a lookup: a flood of garbage keys costs the
// table nothing (SECURITY.md "Limits and abuse").
func TestAuthenticateMalformedKeyCostsNoLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &countingStore{}
	good, _, _ := Create(ctx, s, NewKey{Tenant: "acme"})
	for _, raw := range []string{
		"garbage", "sk-proj-" + strings.Repeat("a", 40), "rb-", "rb-" + strings.Repeat("A", 42), "rb-" + strings.Repeat("A", 44),
		"rb-" + strings.Repeat("A", 42) + "+", "rb-" + strings.Repeat("A", 42) + "=", apikey.Hash(good), strings.Repeat("x", 10_000),
	} {
		_, err := Authenticator{Store: s}.Authenticate(ctx, raw, ScopeFiles)
		var e *errs.Error
		if !errors.As(err, &e) || e.Kind != errs.Unauthenticated || e.Code != "invalid_api_key" {
			t.Errorf("key %.20q: got %v, want 401 invalid_api_key", raw, err)
		}
	}
	if s.gets != 0 {
		t.Fatalf("malformed keys cost %d lookups, want none", s.gets)
	}
	if _, err := (Authenticator{Store: s}).Authenticate(ctx, good, ScopeFiles); err != nil || s.gets != 1 {
		t.Fatalf("a well-formed key: %v after %d lookups, want accepted after one", err, s.gets)
	}
}
