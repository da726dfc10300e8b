// Package part builds a chunk's part: the output, error and usage lines of
// one run of its rows, the pattern that says which file each row went to,
// and the counts its commit adds (docs/design.md "A row's journey", steps
// 6 and 7). internal/engine writes the part to S3 (Write) and commits
// it; Read reads the lines of done chunks back in input order, and readers
// of output and error files decode its Line.
package part

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/sched"
)

// Line is one line of an output or error file, as OpenAI writes them
// (docs/api.md "Output and error files").
type Line struct {
	ID       string        `json:"id"`
	CustomID string        `json:"custom_id"`
	Response *LineResponse `json:"response"`
	Error    *LineError    `json:"error"`
	Fallback bool          `json:"fallback,omitempty"`
	// Usage is on the error line of a row that used upstream tokens all
	// the same: a workflow record that failed, expired or was cancelled
	// after running requests (docs/api.md "Workflow records").
	Usage *LineUsage `json:"usage,omitempty"`
}

// LineUsage is an error line's usage, in a chat completion's names.
type LineUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Succeeded says whether l is a 2xx answer, a line of the output file
// (KindOut); any other line is one of the error file.
func (l Line) Succeeded() bool {
	return l.Response != nil && l.Response.StatusCode >= 200 && l.Response.StatusCode < 300
}

// LineResponse is the upstream's HTTP answer.
type LineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// LineError is a row that got no HTTP answer.
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// UsageEvent is one row's generation, a line of its chunk's .usage object
// (docs/api.md "Rows"): every row of a committed chunk has one, whatever
// its outcome — which model served it, whether a fallback did, how many
// upstream attempts it took and the last status, its tokens and the key
// that submitted it. GET /v1/batches/{id}/rows reads them.
type UsageEvent struct {
	Source   string `json:"source"`
	Tenant   string `json:"tenant"`
	KeyID    string `json:"key_id"`
	BatchID  string `json:"batch_id"`
	CustomID string `json:"custom_id"`
	Row      int    `json:"row"`
	// Status is "completed" (the row is in the output file) or "failed"
	// (the error file).
	Status   string `json:"status"`
	Model    string `json:"model"`
	Fallback bool   `json:"fallback"`
	Attempts int    `json:"attempts"`
	// LastStatus is the last upstream HTTP status, nil when no answer came.
	LastStatus *int `json:"last_status"`
	// Error is a failed row's code and message: its line's error, or for
	// an upstream error answer its status.
	Error        *LineError `json:"error,omitempty"`
	InputTokens  int64      `json:"input_tokens"`
	OutputTokens int64      `json:"output_tokens"`
	TotalTokens  int64      `json:"total_tokens"`
	// LatencyMS is the row's time upstream (inference.Result.Latency), 0
	// for a row never sent.
	LatencyMS int64 `json:"latency_ms"`
	At        int64 `json:"at"`
}

// DeadLetter is a row that ended failed after its retry cycle, an entry of
// GET /v1/batches/{id}/dead_letters (docs/api.md "Dead letters"): a view
// of the row's failed generation, whatever failed it (an upstream error
// answer after retries and fallback, no answer, its chunk dead-lettered,
// a governance refusal, the batch's cancel or expiry).
type DeadLetter struct {
	CustomID string `json:"custom_id"`
	Row      int    `json:"row"`
	// Reason is the error line's code, upstream_error for an upstream
	// error answer (LastStatus says which).
	Reason     string `json:"reason"`
	Error      string `json:"error"`
	Attempts   int    `json:"attempts"`
	LastStatus *int   `json:"last_status"`
	Model      string `json:"model"`
	Fallback   bool   `json:"fallback"`
}

// DeadLetter is failed generation ev as a dead letter.
func (ev UsageEvent) DeadLetter() DeadLetter {
	d := DeadLetter{CustomID: ev.CustomID, Row: ev.Row, Attempts: ev.Attempts, LastStatus: ev.LastStatus, Model: ev.Model, Fallback: ev.Fallback}
	if ev.Error != nil {
		d.Reason, d.Error = ev.Error.Code, ev.Error.Message
	}
	return d
}

// Error codes of lines the service writes itself (LineError.Code).
const (
	// CodeNotJSON is a row whose upstream answer is not JSON, so cannot go
	// into a line.
	CodeNotJSON = "invalid_upstream_response"
	// CodeCancelled, CodeExpired and CodeDeadLetter are rows that got no
	// upstream answer: the batch's cancel or the end of its window came
	// first, or their chunk failed on every attempt.
	CodeCancelled  = "batch_cancelled"
	CodeExpired    = "batch_expired"
	CodeDeadLetter = "dead_letter"
	// CodeUpstream is the error of a generation whose row the upstream
	// answered with an error status (UsageEvent.Error).
	CodeUpstream = "upstream_error"
)

// Outcome is one row's result.
type Outcome struct {
	CustomID string
	Result   inference.Result
	// Code and Message are set when the row got no HTTP answer.
	Code, Message string
	// Expired and Cancelled are set by the engine only, for a row its
	// batch's window ended or its cancel came before: they are counted
	// (and expired rows make the batch expired). A code a workflow callback
	// chose never is (docs/design.md "Liveness").
	Expired, Cancelled bool
	// Counted says the row's tokens are in the tenant's daily usage already:
	// a workflow record's steps add theirs as they are checkpointed
	// (docs/design.md "Governance"). The row still counts as a request
	// there, and its tokens in the batch's usage.
	Counted bool
}

// Expire makes o a row its batch's window ended before: a counted
// batch_expired line.
func (o *Outcome) Expire() {
	o.Code, o.Message, o.Expired = CodeExpired, "the batch's completion window ended before this request ran", true
}

// Cancel makes o a row its batch's cancel came before: a counted
// batch_cancelled line.
func (o *Outcome) Cancel() {
	o.Code, o.Message, o.Cancelled = CodeCancelled, "the batch was cancelled before this request ran", true
}

// Part is a chunk's part and the counts its commit adds.
type Part struct {
	// Usage is the .usage object (batch.Chunk.Parts): a usage event per
	// row that used upstream tokens.
	Usage []byte
	// Pattern has a letter per row: KindOut for a line in .out (a 2xx
	// answer), KindErr for one in .err.
	Pattern            string
	Completed, Failed  int64 // rows in .out, in .err
	Expired, Cancelled int64 // rows of Outcome.Expired, Outcome.Cancelled
	Tokens             batch.Usage
	// ByModel is the requests and tokens of each model that answered.
	ByModel map[string]sched.UsageAgg
}

// LineID is the stable id of row row's line in batch batchID.
func LineID(batchID string, row int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s:%d", batchID, row))
	return "batch_req_" + hex.EncodeToString(sum[:12])
}

// builder renders a row's line, counting it into p and writing its usage
// event to usage.
type builder struct {
	b   batch.Batch
	row int
	// model is the row's chunk's: the model a row that got no answer was
	// for. prior is the upstream attempts the rows of a chunk of fallback
	// rows made on their own model (batch.Chunk.PriorAttempts).
	model string
	prior int
	now   time.Time
	usage bytes.Buffer
	p     Part
	// counted says the row's tokens were counted (addUsage).
	counted bool
}

// render returns a row's line and its letter (KindOut for the output file,
// KindErr for the error file), counting the row.
func (w *builder) render(id string, o Outcome) ([]byte, byte) {
	l := w.line(id, o)
	line, err := marshalLine(l, o.Result.Compact)
	if err != nil {
		// An upstream body that is not JSON cannot go into a line: the
		// row gets an error line instead of an empty one.
		l = Line{ID: l.ID, CustomID: l.CustomID, Error: &LineError{Code: CodeNotJSON, Message: "the upstream's answer is not valid JSON"}}
		line, _ = json.Marshal(l)
	}
	if l.Succeeded() {
		w.p.Completed++
		w.event(o, l)
		return line, KindOut
	}
	w.p.Failed++
	w.event(o, l)
	return line, KindErr
}

// marshalLine is json.Marshal(l). A line of an answer whose body is
// valid JSON on one line (inference.Result.Compact: every answer the
// provider gives) is written here instead, its body taken in with the escaping
// json.Marshal gives <, >, & and U+2028/U+2029 (json.HTMLEscape), where
// json.Marshal would compact and check a body of kilobytes again. Its
// fields are Line's and LineResponse's, in their order (TestMarshalLine).
func marshalLine(l Line, compact bool) ([]byte, error) {
	r := l.Response
	if !compact || r == nil || len(r.Body) == 0 || l.Error != nil || l.Usage != nil {
		return json.Marshal(l)
	}
	id, _ := json.Marshal(l.ID) // strings cannot fail
	customID, _ := json.Marshal(l.CustomID)
	requestID, _ := json.Marshal(r.RequestID)
	var b bytes.Buffer
	b.Grow(len(r.Body) + len(id) + len(customID) + len(requestID) + 128)
	b.WriteString(`{"id":`)
	b.Write(id)
	b.WriteString(`,"custom_id":`)
	b.Write(customID)
	b.WriteString(`,"response":{"status_code":`)
	b.WriteString(strconv.Itoa(r.StatusCode))
	b.WriteString(`,"request_id":`)
	b.Write(requestID)
	b.WriteString(`,"body":`)
	json.HTMLEscape(&b, r.Body)
	b.WriteString(`},"error":null`)
	if l.Fallback {
		b.WriteString(`,"fallback":true`)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// event writes the row's usage event, its generation.
func (w *builder) event(o Outcome, l Line) {
	ev := UsageEvent{Source: "batch", Tenant: w.b.Tenant, KeyID: w.b.KeyID, BatchID: w.b.ID, CustomID: o.CustomID, Row: w.row,
		Status: "failed", Model: cmp.Or(o.Result.Model, w.model), Fallback: o.Result.Fallback, Attempts: w.prior + o.Result.Attempts,
		Error: l.Error, LatencyMS: o.Result.Latency.Milliseconds(), At: w.now.Unix()}
	if st := o.Result.StatusCode; st > 0 {
		ev.LastStatus = &st
	}
	if l.Succeeded() {
		ev.Status = "completed"
	} else if ev.Error == nil && l.Response != nil {
		ev.Error = &LineError{Code: CodeUpstream, Message: fmt.Sprintf("the upstream answered %d", l.Response.StatusCode)}
	}
	if w.counted {
		u := o.Result.Usage
		ev.InputTokens, ev.OutputTokens, ev.TotalTokens = u.InputTokens, u.OutputTokens, u.TotalTokens
	}
	line, _ := json.Marshal(ev) // plain fields, cannot fail
	w.usage.Write(line)
	w.usage.WriteByte('\n')
}

// line is a row's line; it counts the row's usage, and the rows the engine
// expired or cancelled.
func (w *builder) line(id string, o Outcome) Line {
	l := Line{ID: id, CustomID: o.CustomID}
	switch {
	case o.Code != "":
		l.Error = &LineError{Code: o.Code, Message: o.Message}
		if o.Expired {
			w.p.Expired++
		}
		if o.Cancelled {
			w.p.Cancelled++
		}
		// A workflow record that failed after running requests used
		// upstream tokens all the same.
		if u := o.Result.Usage; o.Result.Model != "" && u != (inference.Usage{}) {
			w.addUsage(o)
			l.Usage = &LineUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
		}
	case o.Result.ErrCode != "":
		l.Error = &LineError{Code: o.Result.ErrCode, Message: o.Result.ErrMessage}
	default:
		l.Response = &LineResponse{StatusCode: o.Result.StatusCode, RequestID: o.Result.RequestID, Body: o.Result.Body}
		l.Fallback = o.Result.Fallback
		w.addUsage(o)
	}
	return l
}

// addUsage counts a row's usage.
func (w *builder) addUsage(o Outcome) {
	u := o.Result.Usage
	w.p.Tokens.InputTokens += u.InputTokens
	w.p.Tokens.OutputTokens += u.OutputTokens
	w.p.Tokens.TotalTokens += u.TotalTokens
	w.p.Tokens.CachedTokens += u.CachedTokens
	w.p.Tokens.ReasoningTokens += u.ReasoningTokens
	add := sched.UsageAgg{Requests: 1}
	if !o.Counted {
		add.Input, add.Output, add.Total = u.InputTokens, u.OutputTokens, u.TotalTokens
	}
	mode := sched.ModeAgg{Requests: 1, Input: add.Input, Output: add.Output}
	switch {
	case o.Result.Native:
		add.Native = mode
	case o.Result.Fallback:
		add.Fallback = mode
	}
	agg := w.p.ByModel[o.Result.Model]
	agg.Add(add)
	w.p.ByModel[o.Result.Model] = agg
	w.counted = true
}
