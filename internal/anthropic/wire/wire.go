// Package wire holds the objects of Anthropic's Message Batches API and its
// table of error types, as they go over the wire. It imports nothing of
// the service, so that both the service (internal/anthropic, internal/api)
// and the mock provider (internal/mockup) can use it.
package wire

import (
	"encoding/json"
	"net/http"
)

// Processing statuses of a Message Batch.
const (
	ProcessingInProgress = "in_progress"
	ProcessingCanceling  = "canceling"
	ProcessingEnded      = "ended"
)

// MessageBatch is Anthropic's Message Batch object. ResultsURL is left for
// the routes to fill: only they know the base URL the client called.
type MessageBatch struct {
	ID                string               `json:"id"`
	Type              string               `json:"type"`
	ProcessingStatus  string               `json:"processing_status"`
	RequestCounts     MessageRequestCounts `json:"request_counts"`
	CreatedAt         string               `json:"created_at"`
	EndedAt           *string              `json:"ended_at"`
	ExpiresAt         *string              `json:"expires_at"`
	CancelInitiatedAt *string              `json:"cancel_initiated_at"`
	ArchivedAt        *string              `json:"archived_at"`
	ResultsURL        *string              `json:"results_url"`
	// EstimatedCompletionAt is Relay's extension (docs/api.md "Anthropic
	// Message Batches"): when a batch in progress should end; absent until
	// known.
	EstimatedCompletionAt *string `json:"estimated_completion_at,omitempty"`
	// Cost and Modes are Relay's extensions too, the Batch object's
	// (docs/api.md "Extensions"): what its tokens cost in USD, and its
	// rows and cost by execution mode (the service's batch.Modes as JSON);
	// absent without a price.
	Cost  *float64        `json:"cost,omitempty"`
	Modes json.RawMessage `json:"modes,omitempty"`
}

// MessageRequestCounts always add up to the batch's number of requests.
type MessageRequestCounts struct {
	Processing int64 `json:"processing"`
	Succeeded  int64 `json:"succeeded"`
	Errored    int64 `json:"errored"`
	Canceled   int64 `json:"canceled"`
	Expired    int64 `json:"expired"`
}

// Ended reports whether processing has ended (results can be read).
func (m MessageBatch) Ended() bool { return m.ProcessingStatus == ProcessingEnded }

// MessageResult is one line of a Message Batch's results.
type MessageResult struct {
	CustomID string         `json:"custom_id"`
	Result   MessageOutcome `json:"result"`
}

// MessageOutcome is a request's result: succeeded with the upstream's
// message, errored with an error response, canceled or expired.
type MessageOutcome struct {
	Type    string          `json:"type"`
	Message json.RawMessage `json:"message,omitempty"`
	Error   *ErrorResponse  `json:"error,omitempty"`
}

// ErrorResponse is Anthropic's error body.
type ErrorResponse struct {
	Type      string      `json:"type"`
	Error     ErrorObject `json:"error"`
	RequestID *string     `json:"request_id"`
}

// ErrorObject is the error inside an ErrorResponse.
type ErrorObject struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// errorTypes names Anthropic's error type of each HTTP status it answers.
var errorTypes = map[int]string{
	http.StatusBadRequest:            "invalid_request_error",
	http.StatusUnauthorized:          "authentication_error",
	http.StatusPaymentRequired:       "billing_error",
	http.StatusForbidden:             "permission_error",
	http.StatusNotFound:              "not_found_error",
	http.StatusRequestEntityTooLarge: "request_too_large",
	http.StatusTooManyRequests:       "rate_limit_error",
	http.StatusInternalServerError:   "api_error",
	http.StatusGatewayTimeout:        "timeout_error",
	529:                              "overloaded_error",
}

// ErrorType is the type of Anthropic's error body for an HTTP status:
// api_error for another 5xx, invalid_request_error for another 4xx.
func ErrorType(status int) string {
	if t, ok := errorTypes[status]; ok {
		return t
	}
	if status >= 500 {
		return errorTypes[http.StatusInternalServerError]
	}
	return errorTypes[http.StatusBadRequest]
}
