// Package workflow owns workflow records (docs/api.md "Workflow records"):
// a /v1/chat/completions row whose body carries relay.workflow is driven by
// a callback service instead of being sent upstream. The service POSTs a
// start event, runs the requests each answer returns, POSTs their results,
// and so on until the callback answers completed or failed. This package
// holds the contract — the workflow object, the wire shapes, the budgets,
// the callback client with its retries — and the driver that runs a record
// step by step from a checkpointed State (Driver, over the step machine
// Runner). Where the state is stored, how requests reach the providers and
// how capacity is held are the engine's business; the driver reaches them
// through a Host.
package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/tidwall/gjson"
)

// Failure codes of a record: the code of its error line (docs/api.md
// "Workflow records").
const (
	CodeInvalid             = "invalid_workflow"
	CodeBudgetExceeded      = "workflow_budget_exceeded"
	CodeCallbackRejected    = "workflow_callback_rejected"
	CodeInvalidResponse     = "workflow_invalid_response"
	CodeCallbackUnreachable = "workflow_callback_unreachable"
	// CodeFailed: the callback answered failed.
	CodeFailed = "workflow_failed"
)

// Error fails a record: Code and Message become its error line. Errors of
// any other type are the service's own (a store write failed, the
// invocation ran out of time) and leave the record to be resumed.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Defaults of the workflow object (docs/api.md "Workflow records") and the
// bounds a record may set.
const (
	DefaultMaxSteps        = 16
	DefaultMaxRequests     = 64
	DefaultMaxTokens       = 2_000_000
	DefaultCallbackTimeout = 60 * time.Second

	// Upper bounds keep one record inside what a chunk can hold: every
	// event carries its step's results, and four attempts of one event
	// must fit in one executor invocation.
	maxSteps           = 1_000
	maxRequests        = 10_000
	maxTokens          = 1_000_000_000
	maxCallbackTimeout = 60 * time.Second

	// MaxWait is the longest wait answer (docs/api.md "Workflow records").
	MaxWait = 60 * time.Second
	// Attempts is how many times one event is POSTed before the record
	// fails with workflow_callback_unreachable.
	Attempts = 4
)

// Spec is a record's relay.workflow object, validated, with defaults.
type Spec struct {
	URL           string
	Authorization string
	// Context is echoed in every event, as given ({} when absent).
	Context         json.RawMessage
	MaxSteps        int
	MaxRequests     int
	MaxTokens       int64
	CallbackTimeout time.Duration
}

var knownFields = map[string]bool{"url": true, "authorization": true, "context": true, "max_steps": true,
	"max_requests": true, "max_tokens": true, "callback_timeout_ms": true}

var relayKey = []byte(`"relay"`)

// InBody reports whether a request body carries relay.workflow, the mark
// of a workflow record. Bodies that never mention "relay" are not parsed.
func InBody(body []byte) bool {
	return bytes.Contains(body, relayKey) && gjson.GetBytes(body, "relay.workflow").Exists()
}

// Check is the validation of a record the plan makes, before any capacity
// is taken, and its run makes again: the spec (ParseSpec), and a batch
// endpoint of chat completions. A problem is an *Error with code
// invalid_workflow.
func Check(body []byte, batchEndpoint string, policy egress.Policy) (Spec, error) {
	s, err := ParseSpec(body, policy)
	if err == nil && batchEndpoint != endpoint.Chat {
		err = errorf(CodeInvalid, "workflow records are %s rows, not %s", endpoint.Chat, batchEndpoint)
	}
	return s, err
}

// CheckRow is Check for a whole input row that InRow marks.
func CheckRow(row []byte, batchEndpoint string, policy egress.Policy) error {
	reqs, err := jsonl.ParseRequests(row)
	if err != nil || len(reqs) != 1 {
		return errorf(CodeInvalid, "the row cannot be read")
	}
	_, err = Check(reqs[0].Body, batchEndpoint, policy)
	return err
}

// InRow is InBody for a whole input row (custom_id, method, url, body): the
// planner gives such a row a chunk of its own. It agrees with InBody on the
// body the executor reads from the row: the row is read with
// jsonl.ParseRequests, whose last "body" wins, as it does for the executor
// (a path lookup would take the first, and a row with two bodies would be
// planned as one thing and run as another).
func InRow(row []byte) bool {
	if !bytes.Contains(row, relayKey) {
		return false
	}
	reqs, err := jsonl.ParseRequests(row)
	return err == nil && len(reqs) == 1 && InBody(reqs[0].Body)
}

// ParseSpec reads and validates the relay.workflow object of a record's
// body. The callback URL must be http(s) and pass policy, the same rules as
// webhook URLs (the dialer checks the address again on every connection),
// and authorization is required.
// A problem is an *Error with code invalid_workflow.
func ParseSpec(body []byte, policy egress.Policy) (Spec, error) {
	relay := gjson.GetBytes(body, "relay")
	if !relay.IsObject() {
		return Spec{}, errorf(CodeInvalid, "relay must be an object")
	}
	wf := relay.Get("workflow")
	if !wf.IsObject() {
		return Spec{}, errorf(CodeInvalid, "relay.workflow must be an object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(wf.Raw), &fields); err != nil {
		return Spec{}, errorf(CodeInvalid, "relay.workflow is not valid JSON: %v", err)
	}
	s := Spec{
		Context:         json.RawMessage(`{}`),
		MaxSteps:        DefaultMaxSteps,
		MaxRequests:     DefaultMaxRequests,
		MaxTokens:       DefaultMaxTokens,
		CallbackTimeout: DefaultCallbackTimeout,
	}
	for name, raw := range fields {
		switch {
		case !knownFields[name]:
			return Spec{}, errorf(CodeInvalid, "relay.workflow has no field %q (known: url, authorization, context, max_steps, max_requests, max_tokens, callback_timeout_ms)", name)
		case isNull(raw):
			continue // an explicit null takes the default
		}
		if err := s.set(name, raw); err != nil {
			return Spec{}, err
		}
	}
	if err := checkURL(s.URL, policy); err != nil {
		return Spec{}, err
	}
	if s.Authorization == "" {
		// The callback must be able to tell the service's events from
		// anyone's: a record without a credential for it is refused.
		return Spec{}, errorf(CodeInvalid, "relay.workflow.authorization is required: the Authorization header the callback checks")
	}
	return s, nil
}

// set sets the known field name of s from its raw JSON value, not null.
func (s *Spec) set(name string, raw json.RawMessage) *Error {
	var err *Error
	switch name {
	case "url":
		s.URL, err = str(name, raw)
	case "authorization":
		s.Authorization, err = str(name, raw)
		if err == nil && !validHeaderValue(s.Authorization) {
			err = errorf(CodeInvalid, "relay.workflow.authorization must be a valid HTTP header value (no control characters)")
		}
	case "context":
		var buf bytes.Buffer
		if json.Compact(&buf, raw) != nil {
			err = errorf(CodeInvalid, "relay.workflow.context is not valid JSON")
		}
		s.Context = buf.Bytes()
	case "max_steps":
		var n int64
		n, err = integer(name, raw, 1, maxSteps)
		s.MaxSteps = int(n)
	case "max_requests":
		var n int64
		n, err = integer(name, raw, 1, maxRequests)
		s.MaxRequests = int(n)
	case "max_tokens":
		s.MaxTokens, err = integer(name, raw, 1, maxTokens)
	case "callback_timeout_ms":
		var n int64
		n, err = integer(name, raw, 1, maxCallbackTimeout.Milliseconds())
		s.CallbackTimeout = time.Duration(n) * time.Millisecond
	}
	return err
}

func checkURL(raw string, policy egress.Policy) *Error {
	if raw == "" {
		return errorf(CodeInvalid, "relay.workflow.url is required")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errorf(CodeInvalid, "relay.workflow.url is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errorf(CodeInvalid, "relay.workflow.url must be an http(s) URL, got scheme %q", u.Scheme)
	case u.User != nil:
		return errorf(CodeInvalid, "relay.workflow.url must not carry credentials; put them in relay.workflow.authorization")
	case u.Hostname() == "":
		return errorf(CodeInvalid, "relay.workflow.url has no host")
	}
	// The webhook policy: https only and public addresses only in a
	// deployment. Its messages name webhook_url; say what was checked.
	if err := policy.CheckURL(raw); err != nil {
		msg := strings.ReplaceAll(err.Error(), "webhook_url", "relay.workflow.url")
		return errorf(CodeInvalid, "%s", strings.ReplaceAll(msg, "webhooks only go", "workflow callbacks only go"))
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func str(name string, raw json.RawMessage) (string, *Error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errorf(CodeInvalid, "relay.workflow.%s must be a string, not %s", name, clip(raw))
	}
	return s, nil
}

func integer(name string, raw json.RawMessage, lo, hi int64) (int64, *Error) {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, errorf(CodeInvalid, "relay.workflow.%s must be an integer from %d to %d, not %s", name, lo, hi, clip(raw))
	}
	return n, nil
}

// validHeaderValue refuses what net/http would refuse at send time, which
// would otherwise look like a connection failure on every attempt.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// clip shows a JSON value in a message, cut short (errs.Clip).
func clip(v []byte) string { return errs.Clip(v) }
