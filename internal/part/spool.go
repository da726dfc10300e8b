package part

import (
	"bytes"
	"cmp"
	"io"
	"os"
	"time"
)

// Spool is bytes written once and read back by section, kept in memory
// up to SpillAt bytes and in a temporary file beyond, as Lines keeps its
// lines: what native imports and workflow steps hold of their answers
// (docs/design.md "Memory"). Writes are not safe for concurrent use;
// reads of what was written are.
type Spool struct {
	// InMemory is how many bytes it keeps in memory before it moves them
	// to its file; 0 is SpillAt.
	InMemory int

	mem  bytes.Buffer
	file *os.File // once spilled, every byte is here
	size int64
	err  error
}

// Write appends p; an error (a full disk) is every later call's.
func (s *Spool) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.file == nil && s.mem.Len()+len(p) > cmp.Or(s.InMemory, SpillAt) {
		sweepOnce.Do(func() { removeStale(os.TempDir(), time.Now()) })
		if s.file, s.err = os.CreateTemp("", spoolPattern); s.err != nil {
			return 0, s.err
		}
		if _, s.err = s.file.Write(s.mem.Bytes()); s.err != nil {
			return 0, s.err
		}
		s.mem = bytes.Buffer{}
	}
	var n int
	if s.file != nil {
		n, s.err = s.file.Write(p)
	} else {
		n, _ = s.mem.Write(p)
	}
	s.size += int64(n)
	return n, s.err
}

// Size is how many bytes were written.
func (s *Spool) Size() int64 { return s.size }

// ReadAt reads what was written at off.
func (s *Spool) ReadAt(p []byte, off int64) (int, error) {
	if s.file != nil {
		return s.file.ReadAt(p, off)
	}
	return bytes.NewReader(s.mem.Bytes()).ReadAt(p, off)
}

// Section reads the n bytes written at off.
func (s *Spool) Section(off, n int64) *io.SectionReader { return io.NewSectionReader(s, off, n) }

// Bytes returns the n bytes written at off.
func (s *Spool) Bytes(off, n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := s.ReadAt(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

// Close removes the temporary file, if there is one; s is empty again.
func (s *Spool) Close() error {
	f := s.file
	*s = Spool{InMemory: s.InMemory}
	if f == nil {
		return nil
	}
	f.Close()
	return os.Remove(f.Name())
}
