package batches

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
)

func TestRunKey(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 7, 6, 0, 0, 0, time.FixedZone("CET", 3600))
	if runKey("batch_t", at) != runKey("batch_t", at.UTC()) {
		t.Error("one instant in two zones gave two run keys")
	}
	if runKey("batch_t", at) == runKey("batch_t", at.Add(time.Minute)) || runKey("batch_t", at) == runKey("batch_u", at) {
		t.Error("different firings share a run key")
	}
	// No HTTP header value holds a NUL: a client's Idempotency-Key cannot
	// take a run's.
	if !strings.Contains(runKey("batch_t", at), "\x00") {
		t.Error("run key could collide with an Idempotency-Key header")
	}
}

func TestKeyRefusal(t *testing.T) {
	t.Parallel()
	tpl := batch.Batch{ID: "batch_t", Tenant: "acme", KeyID: "0123456789ab"}
	active := apikey.Key{ID: "0123456789ab", Tenant: "acme", Scopes: []string{auth.ScopeBatches}}
	now := time.Unix(1_800_000_000, 0)
	for _, tt := range []struct {
		name  string
		key   func(k *apikey.Key)
		found bool
		want  string // a word of the reason, "" when the template may run
		code  string
	}{
		{"active", func(*apikey.Key) {}, true, "", ""},
		{"admin", func(k *apikey.Key) { k.Scopes = []string{auth.ScopeAdmin} }, true, "", ""},
		{"disabled", func(k *apikey.Key) { k.Disabled = true }, true, "is disabled", CodeKeyDisabled},
		{"gone", func(*apikey.Key) {}, false, "no longer exists", CodeKeyDisabled},
		{"other tenant", func(k *apikey.Key) { k.Tenant = "globex" }, true, "another tenant", CodeKeyDisabled},
		{"files only", func(k *apikey.Key) { k.Scopes = []string{auth.ScopeFiles} }, true, "batches scope", CodeKeyDisabled},
		{"expired", func(k *apikey.Key) { k.ExpiresAt = now.Unix() }, true, "expired", apikey.CodeExpired},
		{"not expired yet", func(k *apikey.Key) { k.ExpiresAt = now.Unix() + 1 }, true, "", ""},
		{"tenant disabled", func(k *apikey.Key) { k.TenantDisabled = true }, true, "tenant acme is disabled", apikey.CodeTenantDisabled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := active
			k.Scopes = slices.Clone(active.Scopes)
			tt.key(&k)
			code, got := keyRefusal(tpl, k, tt.found, now)
			if code != tt.code || tt.want == "" && got != "" || !strings.Contains(got, tt.want) || tt.want != "" && !strings.Contains(got, tpl.KeyID) {
				t.Errorf("keyRefusal = %s %q, want %s %q naming the key id", code, got, tt.code, tt.want)
			}
		})
	}
}
