package files

import (
	"context"
	stderrors "errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/errs"
)

// uploadStore is a hand-written Store of one pending Upload.
type uploadStore struct {
	Store
	mu sync.Mutex
	u  Upload
}

func (s *uploadStore) GetUpload(context.Context, string, string) (Upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.u, nil
}

func (s *uploadStore) UpdateUpload(_ context.Context, _, _ string, fn func(*Upload) error) (Upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.u
	if err := fn(&u); err != nil {
		return s.u, err
	}
	s.u = u
	return u, nil
}

// partBlobs stores parts by counting them.
type partBlobs struct {
	Blobs
	mu    sync.Mutex
	parts int
	bytes int64
}

func (b *partBlobs) PutTagged(_ context.Context, _ string, r io.Reader, _ int64, _ string) error {
	n, err := io.Copy(io.Discard, r)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.parts++
	b.bytes += n
	return err
}

// TestAddPartCaps: an Upload takes at most MaxUploadParts parts and
// MaxUploadBytes times the bytes it announced, however many parts are sent
// at once; before, AddPart stored every part it was sent.
func TestAddPartCaps(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name        string
		bytes, part int64
		sent        int
		stored      int
		code        string
	}{
		{"bytes", 100, 30, 20, 6, "upload_too_large"},
		{"parts", 1 << 30, 1, MaxUploadParts + 50, MaxUploadParts, "too_many_parts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &uploadStore{u: Upload{ID: "upload_abc", Tenant: "acme", Bytes: tt.bytes, Status: UploadPending, ExpiresAt: now.Add(time.Hour).Unix()}}
			bl := &partBlobs{}
			s := &Service{Store: st, Blobs: bl, Now: func() time.Time { return now }}
			var wg sync.WaitGroup
			refusals := make(chan error, tt.sent)
			for range tt.sent {
				wg.Go(func() {
					_, err := s.AddPart(context.Background(), "acme", "upload_abc", tt.part, strings.NewReader(strings.Repeat("x", int(tt.part))))
					if err != nil {
						refusals <- err
					}
				})
			}
			wg.Wait()
			close(refusals)
			if bl.parts != tt.stored {
				t.Errorf("%d parts stored, want %d", bl.parts, tt.stored)
			}
			refused := 0
			for err := range refusals {
				var e *errs.Error
				if !stderrors.As(err, &e) || e.Code != tt.code || !errs.Is(err, errs.Invalid) {
					t.Fatalf("refusal %v, want 400 %s", err, tt.code)
				}
				refused++
			}
			if refused != tt.sent-tt.stored {
				t.Errorf("%d refused, want %d", refused, tt.sent-tt.stored)
			}
			if st.u.Parts != tt.stored {
				t.Errorf("upload counts %d parts, want %d", st.u.Parts, tt.stored)
			}
		})
	}
}
