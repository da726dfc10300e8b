package files

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/errs"
)

type getStore struct {
	Store
	f File
}

func (s *getStore) GetFile(_ context.Context, tenant, id string) (File, error) {
	if tenant != s.f.Tenant || id != s.f.ID {
		return File{}, ErrNotFound
	}
	return s.f, nil
}

// A file past its expires_at is gone, like at OpenAI; one without an
// expiry or before it is served.
func TestExpiredFileIsNotFound(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) *int64 { v := now.Add(d).Unix(); return &v }
	for _, tt := range []struct {
		name    string
		expires *int64
		found   bool
	}{
		{"no expiry", nil, true},
		{"expires later", at(time.Hour), true},
		{"expired", at(-time.Second), false},
		{"expires now", at(0), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &getStore{f: File{ID: "file-abc", Tenant: "acme", Status: StatusProcessed, ExpiresAt: tt.expires}}
			s := &Service{Store: st, Now: func() time.Time { return now }}
			_, err := s.Get(context.Background(), "acme", "file-abc")
			if tt.found && err != nil {
				t.Fatalf("got %v, want the file", err)
			}
			if !tt.found && !errs.Is(err, errs.NotFound) {
				t.Fatalf("got %v, want 404", err)
			}
		})
	}
}
