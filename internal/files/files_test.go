package files

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
)

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
			st := newMemStore()
			st.files["acme/file-abc"] = file.File{ID: "file-abc", Tenant: "acme", Status: StatusProcessed, ExpiresAt: tt.expires}
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

// Files list by created_at, as at OpenAI, not by id: an output file's id is
// its batch's, older than its creation. Expired files are not listed.
func TestPageOf(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	past := now.Unix() - 1
	all := func() []file.File {
		return []file.File{
			{ID: "file-001", CreatedAt: 10},
			{ID: "file-batch_000-output", CreatedAt: 30}, // id of a batch created at 5
			{ID: "file-002", CreatedAt: 20},
			{ID: "file-003", CreatedAt: 40, ExpiresAt: &past},
			{ID: "file-004", CreatedAt: 20},
		}
	}
	ids := func(fs []file.File) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	for _, tt := range []struct {
		name     string
		p        file.Page
		want     []string
		wantMore bool
	}{
		{"newest first", file.Page{Limit: 10, Order: "desc"}, []string{"file-batch_000-output", "file-004", "file-002", "file-001"}, false},
		{"oldest first", file.Page{Limit: 10, Order: "asc"}, []string{"file-001", "file-002", "file-004", "file-batch_000-output"}, false},
		{"a page", file.Page{Limit: 2, Order: "desc"}, []string{"file-batch_000-output", "file-004"}, true},
		{"the next page", file.Page{Limit: 2, Order: "desc", After: "file-004"}, []string{"file-002", "file-001"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, more, err := pageOf(all(), tt.p, now)
			if err != nil || !slices.Equal(ids(got), tt.want) || more != tt.wantMore {
				t.Fatalf("got %v, more %v, %v; want %v, more %v", ids(got), more, err, tt.want, tt.wantMore)
			}
			if got[0].Object != "file" {
				t.Fatalf("object = %q", got[0].Object)
			}
		})
	}
	if _, _, err := pageOf(all(), file.Page{Limit: 10, Order: "desc", After: "file-003"}, now); !errs.Is(err, errs.Invalid) {
		t.Fatalf("after an expired file: got %v, want 400", err)
	}
}

// A batch file uploaded without expires_after expires after 30 days, as at
// OpenAI.
func TestDefaultExpiry(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for _, tt := range []struct {
		seconds int64
		want    int64
	}{{0, now.Unix() + 30*24*3600}, {3600, now.Unix() + 3600}} {
		got, err := expiry(now, tt.seconds)
		if err != nil || got == nil || *got != tt.want {
			t.Errorf("expiry(%d) = %v, %v; want %d", tt.seconds, got, err, tt.want)
		}
	}
}
