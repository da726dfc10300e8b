package files

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
)

// TestDeleteWhileBatchesRead: a file two unfinished batches read is gone
// for the API as soon as it is deleted, and its bytes stay until the last
// of them ends (docs/api.md "Files"); a file nothing reads goes at once.
// Before, a delete removed the bytes under a running batch, which then
// failed with input_file_missing.
func TestDeleteWhileBatchesRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, objs := newMemStore(), newMemBlobs()
	s := &Service{Store: st, Blobs: objs, Now: time.Now}
	for id, key := range map[string]string{"file-a1": "files/t/in", "file-b1": "files/t/other"} {
		objs.objects[key] = []byte("{}\n")
		st.files["t/"+id] = file.File{ID: id, Tenant: "t", Status: StatusProcessed, Objects: []string{key}}
	}
	has := func(key string) bool { _, err := objs.object(key); return err == nil }
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
	if fs, _, _ := s.List(ctx, "t", file.Page{}); slices.ContainsFunc(fs, func(f file.File) bool { return f.ID == "file-a1" }) {
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
	if !has("files/t/in") {
		t.Fatal("the bytes went while two batches read them")
	}
	if err := s.Release(ctx, "t", "file-a1", "batch_1"); err != nil {
		t.Fatal(err)
	}
	if !has("files/t/in") {
		t.Fatal("the bytes went while a batch still reads them")
	}
	for range 2 { // the second release is the terminal hook run again
		if err := s.Release(ctx, "t", "file-a1", "batch_2"); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := st.files["t/file-a1"]; ok || has("files/t/in") {
		t.Fatalf("after the last reader: record kept %v, bytes kept %v", ok, has("files/t/in"))
	}
	if err := s.Hold(ctx, "t", "file-a1", "batch_4"); err == nil {
		t.Fatal("a batch held a removed file")
	}

	if err := s.Delete(ctx, "t", "file-b1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.files["t/file-b1"]; ok || has("files/t/other") {
		t.Fatal("a file nothing reads was not removed at once")
	}
}
