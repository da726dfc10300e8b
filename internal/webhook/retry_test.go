package webhook

import (
	"encoding/json"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	// Equal jitter: attempt n waits within [d/2, d], d = 5 s·2^(n-1) capped
	// at 1 h, so each range starts where the previous one ends.
	for _, tt := range []struct {
		n      int
		lo, hi time.Duration
	}{
		{-1, 2500 * time.Millisecond, 5 * time.Second},
		{0, 2500 * time.Millisecond, 5 * time.Second},
		{1, 2500 * time.Millisecond, 5 * time.Second},
		{2, 5 * time.Second, 10 * time.Second},
		{3, 10 * time.Second, 20 * time.Second},
		{8, 320 * time.Second, 640 * time.Second},
		{10, 1280 * time.Second, 2560 * time.Second},
		{11, 30 * time.Minute, time.Hour}, // 5120 s, capped
		{40, 30 * time.Minute, time.Hour},
		{64, 30 * time.Minute, time.Hour},
		{1 << 30, 30 * time.Minute, time.Hour},
	} {
		for range 200 {
			if got := Backoff(tt.n); got < tt.lo || got > tt.hi {
				t.Fatalf("Backoff(%d) = %s, want within [%s, %s]", tt.n, got, tt.lo, tt.hi)
			}
		}
	}
}

func TestGiveUp(t *testing.T) {
	t.Parallel()
	first := time.Unix(1700000000, 0)
	for _, tt := range []struct {
		after time.Duration
		want  bool
	}{
		{0, false},
		{time.Hour, false},
		{24*time.Hour - time.Second, false},
		{24 * time.Hour, true},
		{30 * time.Hour, true},
	} {
		if got := GiveUp(first, first.Add(tt.after)); got != tt.want {
			t.Errorf("GiveUp after %s = %v, want %v", tt.after, got, tt.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	failed := Attempt{N: 1, At: 100, StatusCode: 500, Error: "receiver answered 500 Internal Server Error", DurationMS: 12}
	timedOut := Attempt{N: 2, At: 110, Error: "no answer within 10s", DurationMS: 10000}
	ok := Attempt{N: 3, At: 130, StatusCode: 204, DurationMS: 8}
	for _, tt := range []struct {
		name     string
		attempts []Attempt
		gaveUp   bool
		want     string
	}{
		{"none yet", nil, false,
			`{"status":"pending","attempts":0,"last_attempt_at":null,"last_status_code":null,"last_error":null}`},
		{"refused before any attempt", nil, true,
			`{"status":"failed","attempts":0,"last_attempt_at":null,"last_status_code":null,"last_error":null}`},
		{"failing, still retried", []Attempt{failed}, false,
			`{"status":"pending","attempts":1,"last_attempt_at":100,"last_status_code":500,"last_error":"receiver answered 500 Internal Server Error"}`},
		{"timed out last", []Attempt{failed, timedOut}, false,
			`{"status":"pending","attempts":2,"last_attempt_at":110,"last_status_code":null,"last_error":"no answer within 10s"}`},
		{"given up", []Attempt{failed, timedOut}, true,
			`{"status":"failed","attempts":2,"last_attempt_at":110,"last_status_code":null,"last_error":"no answer within 10s"}`},
		{"delivered on the third", []Attempt{failed, timedOut, ok}, false,
			`{"status":"delivered","attempts":3,"last_attempt_at":130,"last_status_code":204,"last_error":null}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(Summarize(tt.attempts, tt.gaveUp))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}
