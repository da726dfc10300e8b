package part

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
)

// A chunk's usage object is written gzipped (Write): its events repeat
// their keys and their batch's fields row after row, and it is kept as
// long as the output file (docs/design.md "Data layout"), so its storage
// is paid for a month. Objects written before are plain; ReadUsage reads
// both.

// gzipped is usage object o compressed, o left read from its start.
func gzipped(o Object) (Object, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := io.Copy(zw, o.Body); err != nil {
		return o, err
	}
	if err := zw.Close(); err != nil {
		return o, err
	}
	if _, err := o.Body.Seek(0, io.SeekStart); err != nil {
		return o, err
	}
	return Object{Body: bytes.NewReader(buf.Bytes()), Size: int64(buf.Len()), Tag: o.Tag}, nil
}

// ReadUsage reads the events of a chunk's usage object, gzipped or plain
// (a JSON line never starts with gzip's magic byte).
func ReadUsage(r io.Reader) ([]UsageEvent, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if head, _ := br.Peek(2); bytes.Equal(head, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("usage object: %w", err)
		}
		defer func() { _ = zr.Close() }()
		src = zr
	}
	var evs []UsageEvent
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev UsageEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("usage object: %w", err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("usage object: %w", err)
	}
	return evs, nil
}
