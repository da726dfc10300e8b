package spool

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// removeStale removes the spool files of a dead process, not those of a
// live run (nor other files).
func TestRemoveStale(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	for name, age := range map[string]time.Duration{"relay-spool-old": 2 * time.Hour, "relay-spool-new": time.Minute, "other-old": 2 * time.Hour} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, now.Add(-age), now.Add(-age))
	}
	removeStale(dir, now)
	for name, want := range map[string]bool{"relay-spool-old": false, "relay-spool-new": true, "other-old": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", name, err == nil, want)
		}
	}
}

// A Buffer reads back what it was written, in memory and once spilled to
// its temporary file, which Close removes.
func TestBuffer(t *testing.T) {
	t.Parallel()
	var s Buffer
	small := []byte("first")
	big := bytes.Repeat([]byte("x"), DefaultInMemory)
	for _, p := range [][]byte{small, big, small} {
		if n, err := s.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	if s.file == nil || s.Size() != int64(2*len(small)+len(big)) {
		t.Fatalf("spilled %v, size %d", s.file != nil, s.Size())
	}
	name := s.file.Name()
	for _, tc := range []struct{ off, n int64 }{{0, 5}, {5 + DefaultInMemory, 5}} {
		if got, err := s.Bytes(tc.off, tc.n); err != nil || string(got) != "first" {
			t.Errorf("Bytes(%d, %d): %q, %v", tc.off, tc.n, got, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Errorf("%s after Close: %v", name, err)
	}
}
