// Package spool holds bytes too many to keep in memory: a Buffer keeps
// the first of them in memory and the rest in a temporary file of the
// function's /tmp (4 GiB), which the runs of part.Lines, native imports
// and workflow steps read back by section (docs/design.md "Memory").
package spool

import (
	"cmp"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// DefaultInMemory is how many bytes a Buffer keeps in memory unless told.
const DefaultInMemory = 8 << 20

// blockSize is the size of the blocks a Buffer keeps its bytes in before
// it spills: it grows a block at a time and never copies what it holds,
// where one slice that doubles would allocate, zero and copy about twice
// its size as it grows (the lines of a chunk of 4 KB answers are
// megabytes).
const blockSize = 64 << 10

// Buffer is bytes written once and read back by section, kept in memory
// up to InMemory bytes and in a temporary file beyond. Writes are not
// safe for concurrent use; reads of what was written are.
type Buffer struct {
	// InMemory is how many bytes it keeps in memory before it moves them
	// to its file; 0 is DefaultInMemory.
	InMemory int

	mem  [][]byte // blocks of blockSize bytes, the last one filling
	file *os.File // once spilled, every byte is here
	size int64
	err  error
}

// Write appends p; an error (a full disk) is every later call's.
func (s *Buffer) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.file == nil && s.size+int64(len(p)) > int64(cmp.Or(s.InMemory, DefaultInMemory)) {
		if s.err = s.spill(); s.err != nil {
			return 0, s.err
		}
	}
	n := len(p)
	if s.file != nil {
		n, s.err = s.file.Write(p)
	} else {
		s.keep(p)
	}
	s.size += int64(n)
	return n, s.err
}

// keep appends p to the blocks in memory.
func (s *Buffer) keep(p []byte) {
	for len(p) > 0 {
		switch {
		case len(s.mem) == 0:
			s.mem = [][]byte{nil} // the first block grows as it fills: a small Buffer stays small
		case len(s.mem[len(s.mem)-1]) == blockSize:
			s.mem = append(s.mem, make([]byte, 0, blockSize))
		}
		last := &s.mem[len(s.mem)-1]
		n := min(len(p), blockSize-len(*last))
		*last, p = append(*last, p[:n]...), p[n:]
	}
}

// spill moves the bytes in memory to a new temporary file.
func (s *Buffer) spill() error {
	sweepOnce.Do(func() { removeStale(os.TempDir(), time.Now()) })
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return err
	}
	s.file = f
	for _, b := range s.mem {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	s.mem = nil
	return nil
}

// Spilled reports whether the bytes are in the temporary file.
func (s *Buffer) Spilled() bool { return s.file != nil }

// Name is the temporary file's name, "" before it spills.
func (s *Buffer) Name() string {
	if s.file == nil {
		return ""
	}
	return s.file.Name()
}

// Size is how many bytes were written.
func (s *Buffer) Size() int64 { return s.size }

// ReadAt reads what was written at off.
func (s *Buffer) ReadAt(p []byte, off int64) (int, error) {
	if s.file != nil {
		return s.file.ReadAt(p, off)
	}
	if off < 0 {
		return 0, errors.New("spool: negative offset")
	}
	n := 0
	for n < len(p) && off < s.size {
		m := copy(p[n:], s.mem[off/blockSize][off%blockSize:])
		n, off = n+m, off+int64(m)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Section reads the n bytes written at off.
func (s *Buffer) Section(off, n int64) *io.SectionReader { return io.NewSectionReader(s, off, n) }

// Bytes returns the n bytes written at off.
func (s *Buffer) Bytes(off, n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := s.ReadAt(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

// Close removes the temporary file, if there is one; s is empty again.
func (s *Buffer) Close() error {
	f := s.file
	*s = Buffer{InMemory: s.InMemory}
	if f == nil {
		return nil
	}
	f.Close()
	return os.Remove(f.Name())
}

// pattern names the temporary files of Buffers.
const pattern = "relay-spool-*"

// staleAfter is the age past which a spool file belongs to no live run:
// a run ends within its invocation's 15 minutes.
const staleAfter = time.Hour

var sweepOnce sync.Once

// removeStale removes the spool files in dir older than staleAfter at now:
// those of a process that died before its runs closed them (Lambda keeps
// /tmp across its process's restarts in a warm environment).
func removeStale(dir string, now time.Time) {
	names, _ := filepath.Glob(filepath.Join(dir, pattern))
	for _, name := range names {
		if fi, err := os.Stat(name); err == nil && now.Sub(fi.ModTime()) > staleAfter {
			os.Remove(name)
		}
	}
}
