// Package errs is the service's one error type. Domain packages return
// *Error with a Kind; the API turns the Kind into an HTTP status and an
// OpenAI- or Anthropic-shaped body in one place (internal/api).
package errs

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Kind classifies an error for the client.
type Kind int

const (
	Internal Kind = iota
	Invalid
	Unauthenticated
	Forbidden
	NotFound
	Conflict
	TooLarge
	RateLimited
	Unprocessable // 422: well-formed, but refused (a reused Idempotency-Key)
)

// Error is a failure the client may see.
type Error struct {
	Kind    Kind
	Code    string // machine-readable, e.g. "invalid_purpose"
	Param   string // the request field at fault, if any
	Message string
	// RetryAfter, in seconds, for RateLimited.
	RetryAfter int
	// Extra are more members of an OpenAI-shaped error body: a create
	// refused with budget_exceeded carries its quote.
	Extra map[string]any
}

func (e *Error) Error() string { return e.Message }

// E builds an *Error with a formatted message.
func E(kind Kind, code, param, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

// Codes of 400s (docs/api.md "Errors"): as OpenAI's, a refusal says what
// kind of mistake it is, and Param names the field.
const (
	CodeInvalidValue = "invalid_value"              // a field has a value the API does not take
	CodeMissing      = "missing_required_parameter" // a required field is absent or empty
	CodeInvalidType  = "invalid_type"               // a field has the wrong JSON type
	CodeInvalidJSON  = "invalid_json"               // the body is not a JSON object
	CodeMultipart    = "invalid_multipart"          // the body is not the multipart form the route takes
)

// Invalidf is a 400 naming the field at fault (CodeInvalidValue).
func Invalidf(param, format string, args ...any) *Error {
	return E(Invalid, CodeInvalidValue, param, format, args...)
}

// Missingf is a 400 naming a required field that was not sent.
func Missingf(param, format string, args ...any) *Error {
	return E(Invalid, CodeMissing, param, format, args...)
}

// NotFoundf is a 404; other tenants' objects get it too. It has no code:
// OpenAI answers a missing object with code null (docs/api.md "Errors").
func NotFoundf(format string, args ...any) *Error {
	return E(NotFound, "", "", format, args...)
}

// KindOf returns the Kind of err, Internal when it is not an *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// Is reports whether err is an *Error of kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// Clip shows a value in an error message, cut short at a rune boundary: a
// message should name the problem, not echo a megabyte back.
func Clip(v []byte) string {
	const max = 64
	if len(v) <= max {
		return string(v)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return string(v[:cut]) + "…"
}
