package batch

// WebhookSummary is the webhook_deliveries field of a batch: how its
// completion webhook's delivery went (internal/webhook's Summarize).
type WebhookSummary struct {
	Status         string  `json:"status"`
	Attempts       int     `json:"attempts"`
	LastAttemptAt  *int64  `json:"last_attempt_at"`
	LastStatusCode *int    `json:"last_status_code"`
	LastError      *string `json:"last_error"`
}
