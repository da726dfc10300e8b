package jsonl

import "testing"

func TestRowOffset(t *testing.T) {
	t.Parallel()
	data := []byte("\ufeff{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}")
	tests := []struct{ n, want int }{{0, 3}, {1, 16}, {2, 24}, {3, len(data)}}
	for _, tt := range tests {
		if got := RowOffset(data, tt.n); got != tt.want {
			t.Errorf("RowOffset(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}
