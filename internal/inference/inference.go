// Package inference is what one row's call to a model upstream gave: its
// Result (an answer, or the code of why there was none) and the Usage it
// reports. internal/provider makes Results; the part, fanout and workflow
// packages read them.
package inference

import (
	"encoding/json"
	"time"
)

// Error codes of a Result that got no HTTP answer. They become the code of
// the row's error line.
const (
	CodeModelNotFound      = "model_not_found"
	CodeCrossShapeDispatch = "cross_shape_dispatch"
	CodeRequestTimeout     = "request_timeout"
	// CodeRequestTimeLimit is a workflow step's call that passed its
	// model's call_time_limit (provider.Route.TimeLimit): stopped, never
	// retried, not billed.
	CodeRequestTimeLimit  = "request_time_limit"
	CodeRequestCancelled  = "request_cancelled"
	CodeConnectionError   = "connection_error"
	CodeInvalidRequest    = "invalid_request"
	CodeAPIKeyUnavailable = "api_key_unavailable"
	// CodeModelNotAllowed is a row of a model its batch's key may not use
	// (provider.Route.Allowed), which is never sent.
	CodeModelNotAllowed = "model_not_allowed"
	// CodeResponseTooLarge is an upstream answer over provider.Client.MaxResponseBytes:
	// the row fails on its first such answer, never retried (the upstream
	// would spend the tokens again) and never falling back.
	CodeResponseTooLarge = "response_too_large"
)

// Usage is the token usage of one row. CachedTokens (part of InputTokens)
// and ReasoningTokens (part of OutputTokens) are what the batch object
// reports as usage.input_tokens_details and output_tokens_details.
type Usage struct {
	InputTokens     int64 `json:"input_tokens"`
	OutputTokens    int64 `json:"output_tokens"`
	TotalTokens     int64 `json:"total_tokens"`
	CachedTokens    int64 `json:"cached_tokens"`
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// Result of one row. Exactly one of (StatusCode != 0) or (ErrCode != "")
// holds: an upstream answer, whatever its status, is reported as it came;
// ErrCode is only for rows that got no HTTP answer.
type Result struct {
	StatusCode int             // the last upstream answer: 2xx, or the final non-2xx
	Body       json.RawMessage // that answer's body, JSON on one line
	RequestID  string          // upstream x-request-id / request-id, else a generated req_…
	Usage      Usage           // parsed from Body
	Model      string          // the configured model name that served the final attempt
	Fallback   bool            // the fallback model served it
	// Compact says Body is valid JSON on one line for certain: the
	// provider checked or compacted it (or wrapped a body that is not
	// JSON), so a row's line
	// takes it in as it is rather than checking it again (internal/part).
	// Whoever sets Body sets Compact; a Body of any other source may be
	// anything, which the line checks. Not carried in JSON.
	Compact bool `json:"-"`
	// Native says a provider's batch API answered it (internal/native),
	// billed at its discount (config.NativeDiscount).
	Native   bool
	Attempts int // upstream attempts made, all models
	// Latency is the row's time upstream: every attempt and the waits
	// between them, the fallback's included.
	Latency    time.Duration
	ErrCode    string // one of the Code… constants, when there was no HTTP answer
	ErrMessage string
	// FallbackTo names the fallback a row of a provider.Route.Defer run is owed:
	// its model's attempts failed transiently and nothing was sent there.
	FallbackTo string
}

// OK reports a 2xx answer.
func (r Result) OK() bool { return r.StatusCode >= 200 && r.StatusCode < 300 }
