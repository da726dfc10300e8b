package workflow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/ijson"
	"github.com/relaybatch/relay/internal/inference"
)

// Event kinds.
const (
	EventStart   = "start"
	EventResults = "results"
)

// Event is what the service POSTs to the callback (docs/api.md "Workflow
// records").
type Event struct {
	EventID    string
	Event      string // EventStart or EventResults
	WorkflowID string // "<batch>:<custom_id>"
	RecordID   string // the record's custom_id
	Step       int
	Attempt    int
	Context    json.RawMessage
	// Results of the step's requests, in the order the answer listed them
	// (empty after a wait); only results events carry them.
	Results *Results
}

// eventHead is an event's wire shape but its results.
type eventHead struct {
	EventID    string          `json:"event_id"`
	Event      string          `json:"event"`
	WorkflowID string          `json:"workflow_id"`
	RecordID   string          `json:"record_id"`
	Step       int             `json:"step"`
	Attempt    int             `json:"attempt"`
	Context    json.RawMessage `json:"context"`
}

// Body is the event's wire shape (docs/api.md "Workflow records") and its
// size, its results read from their spool as it is sent: start events
// have no results, and a results event always has its list, empty or
// not.
func (e Event) Body() (io.Reader, int64, error) {
	w := eventHead{e.EventID, e.Event, e.WorkflowID, e.RecordID, e.Step, e.Attempt, e.Context}
	if w.Context == nil {
		w.Context = json.RawMessage(`{}`)
	}
	head, err := json.Marshal(w)
	if err != nil || e.Event != EventResults {
		return bytes.NewReader(head), int64(len(head)), err
	}
	results, size, err := e.Results.Array()
	if err != nil {
		return nil, 0, err
	}
	head = append(head[:len(head)-1], `,"results":`...)
	return io.MultiReader(bytes.NewReader(head), results, strings.NewReader("}")), int64(len(head)) + size + 1, nil
}

// MarshalJSON writes Body whole.
func (e Event) MarshalJSON() ([]byte, error) {
	r, size, err := e.Body()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	_, err = io.ReadFull(r, data)
	return data, err
}

// Result is one request's answer in a results event: StageID names the
// step that ran it (StageID), Attempt counts its upstream attempts (0: not
// sent).
type Result struct {
	ID         string          `json:"id"`
	CustomID   string          `json:"custom_id"`
	StageID    string          `json:"stage_id"`
	Attempt    int             `json:"attempt"`
	StatusCode int             `json:"status_code"`
	Body       json.RawMessage `json:"body"`
	Usage      ResultUsage     `json:"usage"`
}

// ResultUsage is a result's token usage, in the wire's names.
type ResultUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// StageID names step n of a record in its results: "step-<n>".
func StageID(step int) string { return "step-" + strconv.Itoa(step) }

// EventID names an event of a record: the same for every attempt and every
// executor that sends it, so a callback dedupes retries and re-deliveries
// after a crash on it.
func EventID(workflowID string, step int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", workflowID, step))
	return "wf_evt_" + hex.EncodeToString(sum[:12])
}

// Answer states.
const (
	StateContinue  = "continue"
	StateWait      = "wait"
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// Answer is the callback's reply to an event.
type Answer struct {
	State    string
	Requests []Request       // continue
	Wait     time.Duration   // wait
	Output   json.RawMessage // completed: a JSON object
	Failure  *Error          // failed: the record's error
}

// Request is one request of a continue answer.
type Request struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Body     json.RawMessage `json:"body"`
}

// maxCodeLen bounds an error code taken from a failed answer.
const maxCodeLen = 64

// ParseAnswer reads a callback's answer. One that is not one of the four
// shapes of docs/api.md "Workflow records" is an *Error with code
// workflow_invalid_response.
func ParseAnswer(data []byte) (Answer, error) {
	bad := func(format string, args ...any) (Answer, error) {
		return Answer{}, badAnswer(format, args...)
	}
	if !gjson.ValidBytes(data) || !gjson.ParseBytes(data).IsObject() {
		return bad("is not a JSON object: %s", clip(bytes.TrimSpace(data)))
	}
	if err := ijson.Check(data); err != nil {
		return bad("is not I-JSON: %v", err)
	}
	var raw struct {
		State    json.RawMessage `json:"state"`
		Requests json.RawMessage `json:"requests"`
		Seconds  json.RawMessage `json:"seconds"`
		Output   json.RawMessage `json:"output"`
		Error    json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return bad("is not valid: %v", err)
	}
	var state string
	if json.Unmarshal(raw.State, &state) != nil {
		return bad("has no state (continue, wait, completed or failed)")
	}
	a := Answer{State: state}
	switch state {
	case StateContinue:
		var err error
		if a.Requests, err = parseRequests(raw.Requests); err != nil {
			return Answer{}, err
		}
	case StateWait:
		secs := gjson.ParseBytes(raw.Seconds)
		if secs.Type != gjson.Number || secs.Float() < 0 || secs.Float() > MaxWait.Seconds() || math.IsNaN(secs.Float()) {
			return bad("wait must carry seconds, a number from 0 to %d, not %s", int(MaxWait.Seconds()), clipOrMissing(raw.Seconds))
		}
		a.Wait = time.Duration(secs.Float() * float64(time.Second))
	case StateCompleted:
		if !gjson.ParseBytes(raw.Output).IsObject() {
			return bad("completed must carry an output object, not %s", clipOrMissing(raw.Output))
		}
		var buf bytes.Buffer
		json.Compact(&buf, raw.Output)
		a.Output = buf.Bytes()
	case StateFailed:
		var err error
		if a.Failure, err = parseFailure(raw.Error); err != nil {
			return Answer{}, err
		}
	default:
		return bad("has state %s; want continue, wait, completed or failed", clip(raw.State))
	}
	return a, nil
}

func badAnswer(format string, args ...any) *Error {
	return errorf(CodeInvalidResponse, "the callback's answer "+format, args...)
}

// parseRequests reads the requests of a continue answer.
func parseRequests(raw json.RawMessage) ([]Request, error) {
	if gjson.ParseBytes(raw).Type != gjson.JSON || !gjson.ParseBytes(raw).IsArray() {
		return nil, badAnswer("continue must carry a requests array")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badAnswer("has bad requests: %v", err)
	}
	var reqs []Request
	for i, item := range items {
		var q Request
		if !gjson.ParseBytes(item).IsObject() || json.Unmarshal(item, &q) != nil {
			return nil, badAnswer("request %d must be an object with string id and custom_id and an object body", i)
		}
		if !gjson.ParseBytes(q.Body).IsObject() {
			return nil, badAnswer("request %d has no object body", i)
		}
		switch {
		case q.ID == "" && q.CustomID == "":
			q.ID = "request-" + strconv.Itoa(i)
			q.CustomID = q.ID
		case q.ID == "":
			q.ID = q.CustomID
		case q.CustomID == "":
			q.CustomID = q.ID
		}
		reqs = append(reqs, q)
	}
	return reqs, nil
}

// parseFailure reads the error of a failed answer: the record's error,
// workflow_failed, its message the callback's, after the callback's own
// code if it names one.
func parseFailure(raw json.RawMessage) (*Error, error) {
	f := &Error{Code: CodeFailed, Message: "the workflow callback answered failed"}
	if len(raw) == 0 || isNull(raw) {
		return f, nil
	}
	var e struct {
		Message *string `json:"message"`
		Code    *string `json:"code"`
	}
	if !gjson.ParseBytes(raw).IsObject() || json.Unmarshal(raw, &e) != nil {
		return nil, badAnswer("failed must carry an error object with a string message")
	}
	if e.Message != nil && *e.Message != "" {
		f.Message = *e.Message
	}
	if e.Code != nil && *e.Code != "" {
		if len(*e.Code) > maxCodeLen {
			return nil, badAnswer("failed has an error code longer than %d characters", maxCodeLen)
		}
		f.Message = *e.Code + ": " + f.Message
	}
	return f, nil
}

func clipOrMissing(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "missing"
	}
	return clip(raw)
}

// Admit checks a step's request against what a step may run: the record's
// model only (a request without a model gets it), no streaming, no nested
// workflow, a valid relay.tool_config if any. It returns the body to send upstream, without the relay key,
// with its tools, or, for a request that may not run, the 400 result the
// callback gets for it instead.
func Admit(q Request, model string, policy egress.Policy) (Call, *Result) {
	reject := func(code, param, format string, args ...any) (Call, *Result) {
		body, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": fmt.Sprintf(format, args...), "type": "invalid_request_error", "param": param, "code": code,
		}})
		return Call{}, &Result{ID: q.ID, CustomID: q.CustomID, StatusCode: http.StatusBadRequest, Body: body}
	}
	body := q.Body
	switch m := gjson.GetBytes(body, "model"); {
	case !m.Exists() || m.Type == gjson.Null:
		body, _ = sjson.SetBytes(bytes.Clone(body), "model", model)
	case m.Type != gjson.String || m.Str != model:
		return reject("model_not_allowed", "model", "a workflow step may only use the record's model %q, not %s", model, clip([]byte(m.Raw)))
	}
	if s := gjson.GetBytes(body, "stream"); s.Type == gjson.True {
		return reject("stream_unsupported", "stream", "a workflow step cannot stream")
	}
	if InBody(body) {
		return reject("nested_workflow", "relay.workflow", "a workflow step cannot start another workflow")
	}
	tools, bad := parseTools(body, policy)
	if bad != "" {
		return reject("invalid_tool_config", "relay.tool_config", "%s", bad)
	}
	if gjson.GetBytes(body, "relay").Exists() {
		body, _ = sjson.DeleteBytes(bytes.Clone(body), "relay")
	}
	return Call{Body: body, Tools: tools}, nil
}

// Call is a step request as it goes upstream: its body, and its tools if
// it has a relay.tool_config (RunTools).
type Call struct {
	Body  json.RawMessage
	Tools *Tools
}

// resultOf is a provider answer as the callback sees it. A request that got
// no HTTP answer is given the status a gateway would have answered.
func resultOf(q Request, r inference.Result) Result {
	res := Result{ID: q.ID, CustomID: q.CustomID, Attempt: r.Attempts, StatusCode: r.StatusCode, Body: r.Body,
		Usage: ResultUsage{InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens}}
	if r.ErrCode == "" {
		return res
	}
	status := http.StatusBadGateway
	switch r.ErrCode {
	case inference.CodeRequestTimeout:
		status = http.StatusGatewayTimeout
	case inference.CodeInvalidRequest, inference.CodeCrossShapeDispatch:
		status = http.StatusBadRequest
	case inference.CodeModelNotFound:
		status = http.StatusNotFound
	case inference.CodeAPIKeyUnavailable, inference.CodeRequestTimeLimit:
		status = http.StatusInternalServerError
	}
	res.StatusCode = status
	res.Body, _ = json.Marshal(map[string]any{"error": map[string]any{"message": r.ErrMessage, "type": "relay_error", "param": nil, "code": r.ErrCode}})
	return res
}
