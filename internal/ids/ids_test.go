package ids

import (
	"testing"
	"time"
)

func TestNewSortsByTime(t *testing.T) {
	t.Parallel()
	a := New("file-")
	time.Sleep(2 * time.Millisecond)
	b := New("file-")
	if !(a < b) {
		t.Fatalf("got %s >= %s, want ids ordered by creation", a, b)
	}
	if !Valid("file-", a) {
		t.Fatalf("Valid(%q) = false", a)
	}
}

func TestValid(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		id   string
		want bool
	}{
		{"file-abc", true},
		{"file-", false},
		{"batch_abc", false},
		{"file-../../etc", false},
		{"file-a/b", false},
		{"file-é", false},
	} {
		if got := Valid("file-", tt.id); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
