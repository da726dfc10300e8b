package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/auth"
)

// trail is a hand-written audit chain keeping what it is given.
type trail struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (t *trail) Add(e audit.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries = append(t.entries, e)
}

func (t *trail) Flush(context.Context) error { return nil }

func (t *trail) take() []audit.Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	es := t.entries
	t.entries = nil
	return es
}

// A state-changing call refused to a key of the service (without the
// route's scope, disabled) left no entry: a leaked, disabled key tried on
// cancels and deletes was invisible in the trail. It is recorded with its
// key and status; a key that is not one of the service's has no one to
// name and records nothing; neither the key nor its hash is in an entry.
func TestAuditRecordsRefusalsOfKnownKeys(t *testing.T) {
	t.Parallel()
	const (
		filesOnly = "rb-audit-files-only-key-----------------------"
		disabled  = "rb-audit-disabled-key-------------------------"
		unknown   = "rb-audit-unknown-key--------------------------"
	)
	ks := keyStore{keys: map[string]apikey.Key{}}
	for raw, k := range map[string]apikey.Key{
		filesOnly: {Tenant: "acme", Scopes: []string{auth.ScopeFiles}},
		disabled:  {Tenant: "acme", Scopes: auth.AllScopes, Disabled: true},
	} {
		k.Hash = apikey.Hash(raw)
		k.ID = k.Hash[:12]
		ks.keys[k.Hash] = k
	}
	tr := &trail{}
	h := (&API{Auth: auth.Authenticator{Store: ks}, Audit: tr, Log: slog.New(slog.DiscardHandler)}).Handler()
	do := func(key string) (int, []audit.Entry) {
		r := httptest.NewRequest(http.MethodPost, "/v1/batches/batch_abc/cancel", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, tr.take()
	}
	for _, tt := range []struct {
		name, key string
		status    int
		keyID     string
	}{
		{"without the scope", filesOnly, http.StatusForbidden, apikey.Hash(filesOnly)[:12]},
		{"disabled", disabled, http.StatusUnauthorized, apikey.Hash(disabled)[:12]},
		{"unknown", unknown, http.StatusUnauthorized, ""},
	} {
		code, es := do(tt.key)
		if code != tt.status {
			t.Fatalf("%s: status %d, want %d", tt.name, code, tt.status)
		}
		if tt.keyID == "" {
			if len(es) != 0 {
				t.Errorf("%s: entries %+v, want none", tt.name, es)
			}
			continue
		}
		want := audit.Entry{Tenant: "acme", KeyID: tt.keyID, Action: "POST /v1/batches/{id}/cancel", Target: "batch_abc", Batch: "batch_abc", Outcome: strconv.Itoa(tt.status)}
		if len(es) != 1 {
			t.Fatalf("%s: entries %+v, want one", tt.name, es)
		}
		got := es[0]
		got.Time = 0
		if got != want {
			t.Errorf("%s: entry %+v, want %+v", tt.name, got, want)
		}
		line, _ := json.Marshal(es[0])
		if strings.Contains(string(line), tt.key) || strings.Contains(string(line), apikey.Hash(tt.key)) {
			t.Errorf("%s: the entry holds the key or its hash: %s", tt.name, line)
		}
	}
}
