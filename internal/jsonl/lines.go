package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

var bom = []byte("\xef\xbb\xbf")

// readBufferSize is the read buffer: lines shorter than this are validated
// in place, without a copy.
const readBufferSize = 64 << 10

var (
	errTooLarge      = errors.New("input larger than the limit")
	errRecordTooLong = errors.New("record longer than the limit")
)

// countingReader counts the bytes read and refuses to read past two
// limits, so that no input can make a scan read or hold more than allowed:
// max is the file limit (one byte more is read to tell that a file is over
// it), stop the end of the current CSV record's allowance (0: none).
type countingReader struct {
	r    io.Reader
	n    int64
	max  int64
	stop int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, errTooLarge
	}
	room := c.max + 1 - c.n
	if c.stop > 0 {
		if c.n >= c.stop {
			return 0, errRecordTooLong
		}
		room = min(room, c.stop-c.n)
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max && err == nil {
		err = errTooLarge
	}
	return n, err
}

// skipBOM drops a UTF-8 byte order mark at the start of br and returns
// its length.
func skipBOM(br *bufio.Reader) (int64, error) {
	b, err := br.Peek(len(bom))
	if bytes.Equal(b, bom) {
		_, err = br.Discard(len(bom))
		return int64(len(bom)), err
	}
	if err == io.EOF || err == bufio.ErrBufferFull {
		err = nil // a short file: the line reader will see the end
	}
	return 0, err
}

// line is one physical line of the input.
type line struct {
	text       []byte // without BOM and line break; nil when tooLong
	num        int    // 1-based
	start, end int64  // byte range, end after the line break
	tooLong    bool
}

// lineReader splits its input into lines while holding at most one line of
// max bytes (plus the read buffer) in memory: the rest of a longer line is
// read and dropped, so the lines after it can still be checked. This is
// why it does not use bufio.Scanner, which stops at a line over its limit.
type lineReader struct {
	br   *bufio.Reader
	long []byte // a line longer than the read buffer, put together
	max  int
	off  int64
	num  int
	err  error
}

func newLineReader(r io.Reader, max int) *lineReader {
	lr := &lineReader{br: bufio.NewReaderSize(r, readBufferSize), max: max}
	lr.off, lr.err = skipBOM(lr.br)
	return lr
}

// next returns the next line; its text is valid until the next call. At the
// end of the input it returns io.EOF.
func (lr *lineReader) next() (line, error) {
	if lr.err != nil {
		return line{}, lr.err
	}
	frag, err := lr.br.ReadSlice('\n')
	text, n := frag, len(frag)
	tooLong := false
	if err == bufio.ErrBufferFull {
		// Keep up to max bytes of content plus "\r\n": past that the line
		// is too long whatever follows.
		lr.long = append(lr.long[:0], frag...)
		for err == bufio.ErrBufferFull {
			frag, err = lr.br.ReadSlice('\n')
			n += len(frag)
			if !tooLong && len(lr.long)+len(frag) <= lr.max+2 {
				lr.long = append(lr.long, frag...)
			} else {
				tooLong = true
			}
		}
		text = lr.long
	}
	if err != nil && err != io.EOF {
		lr.err = err
		return line{}, err
	}
	if n == 0 {
		lr.err = io.EOF
		return line{}, io.EOF
	}
	l := line{num: lr.num + 1, start: lr.off, end: lr.off + int64(n)}
	lr.num, lr.off = l.num, l.end
	text = bytes.TrimSuffix(text, []byte("\n"))
	text = bytes.TrimSuffix(text, []byte("\r"))
	if tooLong || len(text) > lr.max {
		l.tooLong = true
	} else {
		l.text = text
	}
	return l, nil
}

// isBlank reports whether a line holds only JSON whitespace.
func isBlank(b []byte) bool {
	for _, c := range b {
		if !isSpace(c) {
			return false
		}
	}
	return true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
