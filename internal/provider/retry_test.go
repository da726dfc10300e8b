package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestTransient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		err    error
		want   bool
	}{
		{200, nil, false},
		{400, nil, false},
		{401, nil, false},
		{404, nil, false},
		{422, nil, false},
		{408, nil, true},
		{409, nil, true},
		{429, nil, true},
		{500, nil, true},
		{503, nil, true},
		{529, nil, true},
		{0, context.DeadlineExceeded, true},
		{0, errors.New("connection reset by peer"), true},
		{0, fmt.Errorf("post: %w", context.Canceled), false},
	}
	for _, tt := range tests {
		if got := Transient(tt.status, tt.err); got != tt.want {
			t.Errorf("Transient(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"none", http.Header{}, 0},
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{"milliseconds win", http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"2500"}}, 2500 * time.Millisecond},
		{"HTTP date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{"date in the past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"negative", http.Header{"Retry-After": {"-4"}}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"NaN", http.Header{"Retry-After": {"NaN"}}, 0},
		{"absurd is bounded", http.Header{"Retry-After": {"1e300"}}, maxRetryAfter},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.header, now); got != tt.want {
			t.Errorf("%s: retryAfter = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPolicyDelay(t *testing.T) {
	t.Parallel()
	p := Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}.withDefaults()
	for n := 1; n <= 70; n++ {
		limit := min(100*time.Millisecond<<min(n-1, 20), time.Second)
		for range 50 {
			if d := p.delay(n, 0); d < 0 || d > limit {
				t.Fatalf("delay(%d) = %v, want within [0, %v]", n, d, limit)
			}
		}
	}
	if d := p.delay(1, 5*time.Second); d != 5*time.Second {
		t.Errorf("delay with Retry-After 5s = %v, want 5s (past MaxDelay)", d)
	}
}

func TestPolicyDefaults(t *testing.T) {
	t.Parallel()
	p := Policy{}.withDefaults()
	if p.MaxAttempts != 4 || p.BaseDelay != 500*time.Millisecond || p.MaxDelay != 30*time.Second || p.Sleep == nil {
		t.Errorf("defaults = %+v, want 4 attempts, 500ms base, 30s max, a Sleep", p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled ctx = %v, want context.Canceled at once", err)
	}
}
