package files

import (
	"context"
	stderrors "errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
)

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
			st, bl := newMemStore(), newMemBlobs()
			st.uploads["acme/upload_abc"] = file.Upload{ID: "upload_abc", Tenant: "acme", Bytes: tt.bytes, Status: UploadPending, ExpiresAt: now.Add(time.Hour).Unix()}
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
			if parts, _ := bl.bytesStored(); parts != tt.stored {
				t.Errorf("%d parts stored, want %d", parts, tt.stored)
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
			if u := st.uploads["acme/upload_abc"]; u.Parts != tt.stored {
				t.Errorf("upload counts %d parts, want %d", u.Parts, tt.stored)
			}
		})
	}
}
