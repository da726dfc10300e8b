package webhook

import (
	"time"

	"github.com/relaybatch/relay/internal/backoff"
	"github.com/relaybatch/relay/internal/batch"
)

// The retry schedule (docs/api.md "Webhooks"): waits double from firstWait up to maxWait,
// and a webhook is given up once retryFor has passed since its first
// attempt: about 40 attempts in all.
const (
	firstWait = 5 * time.Second
	maxWait   = time.Hour
	retryFor  = 24 * time.Hour
)

// Backoff is the wait before attempt n+1 after n failed attempts: 5 s, 10 s,
// 20 s… capped at 1 h, each with "equal jitter" (a random point in its upper
// half) so receivers that fail together are not retried in lockstep, while
// waits still grow and never pass the cap.
func Backoff(n int) time.Duration {
	return backoff.Upper(backoff.Exponential(n, firstWait, maxWait))
}

// GiveUp reports whether a webhook first attempted at first is out of time
// at now.
func GiveUp(first, now time.Time) bool {
	return now.Sub(first) >= retryFor
}

// Delivery statuses of a batch.WebhookSummary.
const (
	StatusPending   = "pending"   // not attempted yet, or failing and still retried
	StatusDelivered = "delivered" // a receiver answered 2xx
	StatusFailed    = "failed"    // given up
)

// Summarize describes attempts, in the order they were made; gaveUp is the
// caller's decision to stop (GiveUp, or a Permanent attempt).
func Summarize(attempts []Attempt, gaveUp bool) batch.WebhookSummary {
	s := batch.WebhookSummary{Status: StatusPending, Attempts: len(attempts)}
	if len(attempts) == 0 {
		if gaveUp {
			s.Status = StatusFailed
		}
		return s
	}
	last := attempts[len(attempts)-1]
	s.LastAttemptAt = &last.At
	if last.StatusCode != 0 {
		s.LastStatusCode = &last.StatusCode
	}
	if last.Error != "" {
		s.LastError = &last.Error
	}
	for _, a := range attempts {
		if a.Delivered() {
			s.Status = StatusDelivered
			return s
		}
	}
	if gaveUp {
		s.Status = StatusFailed
	}
	return s
}
