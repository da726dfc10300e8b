package backoff

import (
	"context"
	"testing"
	"time"
)

func TestExponential(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n    int
		want time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second},
		{7, time.Minute}, {1000, time.Minute}, // capped, no overflow
	} {
		if got := Exponential(tt.n, time.Second, time.Minute); got != tt.want {
			t.Errorf("Exponential(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestJitterStaysInItsWindow(t *testing.T) {
	t.Parallel()
	d := 100 * time.Millisecond
	for range 1000 {
		if w := Full(d); w < 0 || w > d {
			t.Fatalf("Full(%v) = %v, outside [0, %v]", d, w, d)
		}
		if w := Upper(d); w < d/2 || w > d {
			t.Fatalf("Upper(%v) = %v, outside [%v, %v]", d, w, d/2, d)
		}
	}
	if Full(0) != 0 || Upper(-1) != 0 {
		t.Fatal("a wait of nothing must be nothing")
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a cancelled context = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}
