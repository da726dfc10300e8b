package files

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/relaybatch/relay/internal/errs"
)

func TestCleanFilename(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		wantIn string // "" means accepted
	}{
		{"input.jsonl", ""},
		{"résumé prompts.csv", ""},
		{"..jsonl", ""},
		{"../../x.jsonl", "without a directory"},
		{"/etc/passwd.jsonl", "without a directory"},
		{"a/b.jsonl", "without a directory"},
		{`a\b.jsonl`, "without a directory"},
		{`..\..\x.jsonl`, "without a directory"},
		{"..", "has no name"},
		{".", "has no name"},
		{"", "has no name"},
		{"a\x00.jsonl", "control character"},
		{"a\r\nContent-Type: text/html.jsonl", "control character"},
		{"a\n.jsonl", "control character"},
		{"a\x7f.jsonl", "control character"},
		{`a".jsonl`, "quote"},
		{"\xff.jsonl", "UTF-8"},
		{strings.Repeat("a", 250) + ".jsonl", "255 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := CleanFilename(tt.name)
			switch {
			case tt.wantIn == "" && (err != nil || got != tt.name):
				t.Fatalf("got %q, %v; want the name unchanged", got, err)
			case tt.wantIn != "" && (!errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), tt.wantIn)):
				t.Fatalf("got %q, %v; want a 400 containing %q", got, err, tt.wantIn)
			}
		})
	}
}

func FuzzCleanFilename(f *testing.F) {
	for _, s := range []string{"a.jsonl", "../../x.jsonl", `a\b.csv`, "a\x00b", "a\r\nb", "..", "\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := CleanFilename(name)
		if err != nil {
			if !errs.Is(err, errs.Invalid) {
				t.Fatalf("CleanFilename(%q): %v is not a 400", name, err)
			}
			return
		}
		if got != name || got == "" || got == "." || got == ".." || len(got) > 255 || !utf8.ValidString(got) ||
			strings.ContainsAny(got, "/\\\"\x7f") || strings.IndexFunc(got, func(r rune) bool { return r < 0x20 }) >= 0 {
			t.Fatalf("CleanFilename(%q) accepted %q", name, got)
		}
	})
}

// The presigned upload of a file is for the one object under its tenant's
// prefix that the file record points at, at the announced size, for 15
// minutes.
func TestPresignScopedToOneObject(t *testing.T) {
	t.Parallel()
	b, st := newMemBlobs(), newMemStore()
	s := &Service{Store: st, Blobs: b, Now: time.Now}
	f, err := s.Presign(context.Background(), "acme", "big.jsonl", PurposeBatch, 123_456, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "files/acme/" + f.ID + "/000000"
	if len(b.presigned) != 1 || b.presigned[0] != (presigned{want, 123_456, 15 * time.Minute}) || 15*time.Minute > PresignTTL {
		t.Fatalf("presigned %+v; want %q, 123456 bytes, 15m", b.presigned, want)
	}
	put := st.files["acme/"+f.ID]
	if len(put.Objects) != 1 || put.Objects[0] != want || put.Tenant != "acme" || f.UploadURL == "" {
		t.Fatalf("recorded %+v; want the one object %q of tenant acme", put, want)
	}
	for _, name := range []string{"../x.jsonl", "a/b.jsonl"} {
		if _, err := s.Presign(context.Background(), "acme", name, PurposeBatch, 10, 0); !errs.Is(err, errs.Invalid) {
			t.Errorf("presign of %q: got %v, want a 400", name, err)
		}
	}
}
