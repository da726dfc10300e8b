package provider

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/relaybatch/relay/internal/anthropic/wire"
)

// The objects of an Anthropic upstream's Message Batches API as its client
// (internal/native) reads them. Their wire shapes are the ones this service
// serves (internal/anthropic/wire); only the adapters and the served API
// speak those (docs/architecture.md "Packages").

// MessageBatch is a message batch as read or listed.
type MessageBatch struct {
	ID string
	// Created is when it was created; zero when its created_at does not
	// read as RFC 3339.
	Created time.Time
	// Requests are its requests, whatever their state.
	Requests int64
	// Ended is whether its processing ended: its results can be read.
	Ended bool
}

// UnmarshalJSON reads a message batch object; as json.Unmarshal does, a
// field of the wrong type leaves what was read and is the error.
func (m *MessageBatch) UnmarshalJSON(b []byte) error {
	var w wire.MessageBatch
	err := json.Unmarshal(b, &w)
	c := w.RequestCounts
	created, _ := time.Parse(time.RFC3339, w.CreatedAt)
	*m = MessageBatch{ID: w.ID, Created: created, Requests: c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired, Ended: w.Ended()}
	return err
}

// MessageResult is one line of an ended message batch's results.
type MessageResult struct {
	CustomID string
	// Outcome is succeeded, errored, canceled or expired.
	Outcome string
	// Message is a success's message, as the upstream answered it.
	Message json.RawMessage
	// ErrorType and Error are an error's type and its whole error body
	// (nil when the line has none).
	ErrorType string
	Error     json.RawMessage
}

// UnmarshalJSON reads a results line, as MessageBatch's does.
func (r *MessageResult) UnmarshalJSON(b []byte) error {
	var w wire.MessageResult
	err := json.Unmarshal(b, &w)
	*r = MessageResult{CustomID: w.CustomID, Outcome: w.Result.Type, Message: w.Result.Message}
	if e := w.Result.Error; e != nil {
		r.ErrorType = e.Error.Type
		r.Error, _ = json.Marshal(e) // plain fields: cannot fail
	}
	return err
}

// AnthropicStatus is the HTTP status of an Anthropic error type, the
// inverse of the table the service answers with (wire.ErrorType); 400 for
// a type it does not know.
func AnthropicStatus(typ string) int {
	for st := 400; st < 600; st++ {
		if wire.ErrorType(st) == typ {
			return st
		}
	}
	return http.StatusBadRequest
}
