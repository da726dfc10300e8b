package queue

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		wait, want time.Duration
	}{
		{0, 0},
		{time.Millisecond, time.Second}, // never back before it is due
		{time.Second, time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
		{10 * time.Minute, 10 * time.Minute},
		{time.Hour, 15 * time.Minute}, // SQS's longest delay; the rest is chained
	} {
		if got := Delay(tt.wait); got != tt.want {
			t.Errorf("Delay(%s) = %s, want %s", tt.wait, got, tt.want)
		}
	}
}
