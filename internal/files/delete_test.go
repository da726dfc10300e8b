package files

import (
	"context"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/errs"
)

// memFiles is an in-memory Store of file records: UpdateFile applies fn to
// a copy and keeps it only when fn succeeds, as the table's conditional
// write does.
type memFiles struct {
	mu    sync.Mutex
	files map[string]File
}

func (m *memFiles) PutFile(_ context.Context, f File) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[f.ID] = f
	return nil
}

func (m *memFiles) GetFile(_ context.Context, _, id string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[id]
	if !ok {
		return File{}, ErrNotFound
	}
	return f, nil
}

func (m *memFiles) ListFiles(context.Context, string, Page) ([]File, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.files)), false, nil
}

func (m *memFiles) UpdateFile(_ context.Context, _, id string, fn func(*File) error) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[id]
	if !ok {
		return File{}, ErrNotFound
	}
	f.Readers = slices.Clone(f.Readers)
	if err := fn(&f); err != nil {
		return f, err
	}
	m.files[id] = f
	return f, nil
}

func (m *memFiles) DeleteFile(_ context.Context, _, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.files, id)
	return nil
}

func (m *memFiles) PutUpload(context.Context, Upload) error { return nil }
func (m *memFiles) GetUpload(context.Context, string, string) (Upload, error) {
	return Upload{}, ErrNotFound
}
func (m *memFiles) UpdateUpload(context.Context, string, string, func(*Upload) error) (Upload, error) {
	return Upload{}, ErrNotFound
}

// memObjects is a bucket that records which objects exist.
type memObjects struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (b *memObjects) Put(_ context.Context, key string, r io.Reader, _ int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keys[key] = true
	return nil
}
func (b *memObjects) PutTagged(ctx context.Context, key string, r io.Reader, n int64, _ string) error {
	return b.Put(ctx, key, r, n)
}
func (b *memObjects) SetExpiry(context.Context, string, ...string) error { return nil }
func (b *memObjects) Size(context.Context, string) (int64, error)        { return 0, nil }
func (b *memObjects) Head(context.Context, string) (int64, string, error) {
	return 0, "", nil
}
func (b *memObjects) Concat(context.Context, []string) io.ReadCloser {
	return io.NopCloser(strings.NewReader(""))
}
func (b *memObjects) Delete(_ context.Context, keys ...string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		delete(b.keys, k)
	}
	return nil
}
func (b *memObjects) List(context.Context, string) ([]string, error) { return nil, nil }
func (b *memObjects) PresignPut(context.Context, string, int64, time.Duration) (string, error) {
	return "", nil
}

func (b *memObjects) has(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.keys[key]
}

// TestDeleteWhileBatchesRead: a file two unfinished batches read is gone
// for the API as soon as it is deleted, and its bytes stay until the last
// of them ends (docs/api.md "Files"); a file nothing reads goes at once.
// Before, a delete removed the bytes under a running batch, which then
// failed with input_file_missing.
func TestDeleteWhileBatchesRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, objs := &memFiles{files: map[string]File{}}, &memObjects{keys: map[string]bool{"files/t/in": true, "files/t/other": true}}
	s := &Service{Store: st, Blobs: objs}
	st.files["file-a1"] = File{ID: "file-a1", Tenant: "t", Status: StatusProcessed, Objects: []string{"files/t/in"}}
	st.files["file-b1"] = File{ID: "file-b1", Tenant: "t", Status: StatusProcessed, Objects: []string{"files/t/other"}}
	for _, b := range []string{"batch_1", "batch_2"} {
		if err := s.Hold(ctx, "t", "file-a1", b); err != nil {
			t.Fatal(err)
		}
	}

	if err := s.Delete(ctx, "t", "file-a1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := s.Get(ctx, "t", "file-a1"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("get after delete: %v, want 404", err)
	}
	if fs, _, _ := s.List(ctx, "t", Page{}); slices.ContainsFunc(fs, func(f File) bool { return f.ID == "file-a1" }) {
		t.Fatal("a deleted file is listed")
	}
	if err := s.Delete(ctx, "t", "file-a1"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("second delete: %v, want 404", err)
	}
	// A template's run holds its template's file, deleted or not.
	if err := s.Hold(ctx, "t", "file-a1", "batch_3"); err != nil {
		t.Fatalf("a run held its template's deleted file: %v", err)
	}
	if err := s.Release(ctx, "t", "file-a1", "batch_3"); err != nil {
		t.Fatal(err)
	}
	if !objs.has("files/t/in") {
		t.Fatal("the bytes went while two batches read them")
	}
	if err := s.Release(ctx, "t", "file-a1", "batch_1"); err != nil {
		t.Fatal(err)
	}
	if !objs.has("files/t/in") {
		t.Fatal("the bytes went while a batch still reads them")
	}
	for range 2 { // the second release is the terminal hook run again
		if err := s.Release(ctx, "t", "file-a1", "batch_2"); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := st.files["file-a1"]; ok || objs.has("files/t/in") {
		t.Fatalf("after the last reader: record kept %v, bytes kept %v", ok, objs.has("files/t/in"))
	}
	if err := s.Hold(ctx, "t", "file-a1", "batch_4"); err == nil {
		t.Fatal("a batch held a removed file")
	}

	if err := s.Delete(ctx, "t", "file-b1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.files["file-b1"]; ok || objs.has("files/t/other") {
		t.Fatal("a file nothing reads was not removed at once")
	}
}
