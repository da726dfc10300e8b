package jsonl

import "bytes"

// RowOffset is where row n of data starts, rows counted as ParseRequests
// counts them (a leading byte-order mark and blank lines are no rows);
// len(data) when data holds n rows or fewer.
func RowOffset(data []byte, n int) int {
	off, row := 0, 0
	if bytes.HasPrefix(data, bom) {
		off = len(bom)
	}
	for off < len(data) {
		next := len(data)
		if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
			next = off + i + 1
		}
		text := bytes.TrimSuffix(bytes.TrimSuffix(data[off:next], []byte("\n")), []byte("\r"))
		if !isBlank(text) {
			if row == n {
				return off
			}
			row++
		}
		off = next
	}
	return len(data)
}
