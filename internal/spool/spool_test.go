package spool

import (
	"bytes"
	"io"
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

// A Buffer reads back any section of writes of any size, across the
// blocks it keeps in memory and once spilled, as the bytes written.
func TestBufferSections(t *testing.T) {
	t.Parallel()
	for _, inMemory := range []int{10 * blockSize, 3*blockSize + 7} {
		s := Buffer{InMemory: inMemory}
		var want []byte
		for i, n := range []int{1, blockSize - 1, 5, 2*blockSize + 3, 0, blockSize, 777, 4 << 10, blockSize + 1} {
			p := bytes.Repeat([]byte{byte('a' + i)}, n)
			p = append(p[:0:0], p...)
			if n > 0 {
				p[n-1] = byte('A' + i)
			}
			if m, err := s.Write(p); m != n || err != nil {
				t.Fatalf("Write(%d bytes): %d, %v", n, m, err)
			}
			want = append(want, p...)
		}
		if s.Size() != int64(len(want)) || s.Spilled() != (len(want) > inMemory) {
			t.Fatalf("in memory %d: size %d spilled %v, want %d %v", inMemory, s.Size(), s.Spilled(), len(want), len(want) > inMemory)
		}
		for _, off := range []int{0, 1, blockSize - 1, blockSize, blockSize + 3, 3*blockSize - 2, len(want) - 10} {
			for _, n := range []int{1, 2, blockSize, 2*blockSize + 5} {
				n = min(n, len(want)-off)
				if got, err := s.Bytes(int64(off), int64(n)); err != nil || !bytes.Equal(got, want[off:off+n]) {
					t.Errorf("in memory %d: Bytes(%d, %d): %v, differs %v", inMemory, off, n, err, !bytes.Equal(got, want[off:off+n]))
				}
			}
		}
		p := make([]byte, 20)
		if n, err := s.ReadAt(p, int64(len(want)-10)); n != 10 || err != io.EOF || !bytes.Equal(p[:n], want[len(want)-10:]) {
			t.Errorf("in memory %d: ReadAt past the end: %d, %v", inMemory, n, err)
		}
		s.Close()
	}
}
