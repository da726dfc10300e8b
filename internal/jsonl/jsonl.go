// Package jsonl owns the batch input file format (docs/api.md "Files"). Scan reads a
// JSONL or CSV input file once, with bounded memory, validates every row and
// hands each valid one to the caller with its byte range, so the dispatcher
// can validate a file and plan its chunks in the same pass. ParseRequests
// reads back the rows of one such range for the executor.
//
// Problems are collected as LineErrors ({code, message, param, line}), the
// way OpenAI reports them in a batch's errors.data. Nothing is repaired: a
// row without a custom_id or with an unknown model is an error, never a guess.
package jsonl

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/errs"
)

// Format is the syntax of an input file.
type Format int

// The input formats.
const (
	JSONL Format = iota
	CSV
)

func (f Format) String() string {
	switch f {
	case JSONL:
		return "jsonl"
	case CSV:
		return "csv"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatOf tells the format of an input file by its name's extension,
// .jsonl or .csv in any letter case.
func FormatOf(filename string) (Format, error) {
	ext := path.Ext(filename)
	switch strings.ToLower(ext) {
	case ".jsonl":
		return JSONL, nil
	case ".csv":
		return CSV, nil
	case "":
		return 0, fmt.Errorf("file %q has no extension: want .jsonl or .csv", filename)
	}
	return 0, fmt.Errorf("file extension %q is not supported: want .jsonl or .csv", ext)
}

// The endpoints a batch row may name (internal/endpoint).
const chatCompletions = endpoint.Chat

var endpoints = endpoint.Paths(nil)

func supportedEndpoint(url []byte) bool {
	_, ok := endpoint.Lookup(string(url))
	return ok
}

// Limits (OpenAI's; docs/api.md "Limits").
const (
	DefaultMaxRows      = 50_000
	DefaultMaxLineBytes = 10 << 20
	DefaultMaxBytes     = 200 * 1000 * 1000
	DefaultMaxErrors    = 100
)

// Options say what a valid file is. Zero limits take the defaults above.
type Options struct {
	Format   Format
	Endpoint string // the batch's endpoint; every JSONL row's url must equal it; CSV needs /v1/chat/completions
	Model    string // CSV only: the model every CSV row gets

	// KnownModel reports whether a model is configured. A nil KnownModel
	// knows no model: validation fails closed rather than passing rows the
	// executor could not route.
	KnownModel func(string) bool
	// DefaultModel, if set, is the model a row whose body.model is absent
	// or null gets (endpoint.DefaultModel), checked as a model it named.
	DefaultModel string
	// AllowedModel, if set, reports whether the batch's key may use a
	// configured model (docs/api.md "Budgets, revocation and allow-lists"); nil allows all.
	AllowedModel func(string) bool

	MaxRows      int   // rows per file
	MaxLineBytes int   // bytes per line (JSONL, not counting the line break) or record (CSV, counting it)
	MaxBytes     int64 // bytes per file
	MaxErrors    int   // errors collected before scanning stops
}

func (o Options) withDefaults() Options {
	if o.MaxRows <= 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = DefaultMaxLineBytes
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxErrors <= 0 {
		o.MaxErrors = DefaultMaxErrors
	}
	if o.KnownModel == nil {
		o.KnownModel = func(string) bool { return false }
	}
	return o
}

// Row is one valid request row.
type Row struct {
	Index      int   // 0-based index among rows: blank lines are not rows, invalid ones are
	Line       int   // 1-based physical line where the row starts
	Start, End int64 // byte range [Start, End) of the row in the input, End after its line break
	CustomID   string
	Model      string
	// JSON is the row as one normalized request object without a line
	// break: the line itself for JSONL (minus BOM and CR/LF), synthesized
	// for CSV. It is only valid until the callback returns.
	JSON []byte
	// Body is the request's body, the object within JSON, so that a
	// caller need not find it again; valid as long as JSON is.
	Body []byte
}

// Error codes of LineError, one per rule.
const (
	CodeInvalidJSON         = "invalid_json"         // a line is not a JSON object
	CodeInvalidUTF8         = "invalid_utf8"         // a line or CSV field is not UTF-8
	CodeMissingCustomID     = "missing_custom_id"    // custom_id absent, null or ""
	CodeInvalidCustomID     = "invalid_custom_id"    // custom_id not a string
	CodeDuplicateCustomID   = "duplicate_custom_id"  // custom_id used on an earlier line
	CodeInvalidMethod       = "invalid_method"       // method is not "POST"
	CodeInvalidURL          = "invalid_url"          // url absent or not a supported endpoint
	CodeMismatchedURL       = "mismatched_url"       // url is not the batch's endpoint
	CodeInvalidBody         = "invalid_body"         // body absent or not an object
	CodeMissingModel        = "missing_model"        // body.model absent, null or "" (or Options.Model empty for CSV)
	CodeInvalidModel        = "invalid_model"        // body.model not a string
	CodeModelNotFound       = "model_not_found"      // body.model (or Options.Model) not configured
	CodeModelNotAllowed     = "model_not_allowed"    // body.model (or Options.Model) not on the key's allow-list
	CodeStreamUnsupported   = "stream_unsupported"   // body.stream is true
	CodeLineTooLong         = "line_too_long"        // line (or CSV record) over MaxLineBytes
	CodeTooManyRows         = "too_many_rows"        // more than MaxRows rows
	CodeFileTooLarge        = "file_too_large"       // more than MaxBytes bytes
	CodeEmptyFile           = "empty_file"           // no rows at all
	CodeInvalidCSV          = "invalid_csv"          // CSV syntax or column count
	CodeEmptyPrompt         = "empty_prompt"         // CSV or simple row prompt blank
	CodeInvalidPrompt       = "invalid_prompt"       // a simple row's prompt not a string
	CodeInvalidMessages     = "invalid_messages"     // a simple row's messages not an array of objects
	CodeInvalidRow          = "invalid_row"          // a simple row with a member it does not take
	CodeUnsupportedEndpoint = "unsupported_endpoint" // the batch's endpoint cannot take this file
)

// LineError is one problem of an input file, as in a batch's errors.data.
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"` // names the problem and, when there is one, the line
	Param   string `json:"param"`   // the offending field, e.g. "body.model"; "" when none
	Line    int    `json:"line"`    // 1-based; 0 when the error is about the whole file
}

func (e LineError) Error() string { return e.Code + ": " + e.Message }

// MarshalJSON writes param and line as null when there is none, as OpenAI
// does (docs/api.md "Batches"): an SDK reads null as "not set", "" and 0
// as values.
func (e LineError) MarshalJSON() ([]byte, error) {
	w := struct {
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
		Line    *int    `json:"line"`
	}{Code: e.Code, Message: e.Message}
	if e.Param != "" {
		w.Param = &e.Param
	}
	if e.Line != 0 {
		w.Line = &e.Line
	}
	return json.Marshal(w)
}

// Result sums up a scan.
type Result struct {
	Rows   int         // rows read; it stops at MaxRows+1 when a file has too many
	Bytes  int64       // bytes read: the file's size, unless scanning stopped early
	Model  string      // the model when every row names the same one, else ""
	Errors []LineError // at most MaxErrors; non-empty means the file is invalid
}

// Scan reads r once and validates it as opts say. It calls fn (which may be
// nil) for every row that is valid in itself, in input order, even after
// other rows were found invalid: the caller discards its work when
// Result.Errors is non-empty. Scanning stops after MaxErrors errors, at the
// row past MaxRows and at the byte past MaxBytes.
//
// Memory stays bounded whatever the input: one line (up to MaxLineBytes)
// plus a read buffer, and a few dozen bytes per custom_id seen.
//
// A non-nil error means reading failed or fn failed; a file that breaks a
// rule is not an error but a Result with Errors.
func Scan(r io.Reader, opts Options, fn func(Row) error) (Result, error) {
	opts = opts.withDefaults()
	if fn == nil {
		fn = func(Row) error { return nil }
	}
	s := &scanner{opts: opts, fn: fn, ids: make(map[idKey]int)}
	if !s.checkOptions() {
		return s.res, nil
	}
	in := &countingReader{r: r, max: opts.MaxBytes}
	var err error
	switch opts.Format {
	case JSONL:
		err = s.scanJSONL(in)
	case CSV:
		err = s.scanCSV(in)
	default:
		return s.res, fmt.Errorf("scan input: unknown format %v", opts.Format)
	}
	s.res.Bytes = in.n
	if errors.Is(err, errTooLarge) {
		s.fail(0, CodeFileTooLarge, "", "the file is larger than %d bytes", opts.MaxBytes)
		err = nil
	}
	if err != nil {
		return s.res, err
	}
	if s.res.Rows == 0 && len(s.res.Errors) == 0 {
		s.fail(0, CodeEmptyFile, "", "the file has no requests")
	}
	if s.mixedModels {
		s.res.Model = ""
	}
	return s.res, nil
}

// idKey is a truncated SHA-256 of a custom_id: with 128 bits a false
// duplicate is out of reach, and 50,000 ids cost about 2 MB whatever their
// length.
type idKey [16]byte

type scanner struct {
	opts Options
	fn   func(Row) error
	res  Result
	ids  map[idKey]int // custom_id → line of its first use

	simple simpleEncoder // writes the requests of simple rows

	// The model of the last row and whether it is known: files name one
	// model almost always, so this spares a lookup and a string per row.
	lastModel   string
	lastKnown   bool
	lastAllowed bool
	mixedModels bool
}

// checkOptions reports the batch-level problems that make reading the file
// pointless.
func (s *scanner) checkOptions() bool {
	o := s.opts
	if !supportedEndpoint([]byte(o.Endpoint)) {
		s.fail(0, CodeUnsupportedEndpoint, "endpoint", "endpoint %q is not supported: want one of %s", o.Endpoint, strings.Join(endpoints, ", "))
		return false
	}
	if o.Format != CSV {
		return true
	}
	switch {
	case o.Endpoint != chatCompletions:
		s.fail(0, CodeUnsupportedEndpoint, "endpoint", "a CSV file can only be used with %s, not %s", chatCompletions, o.Endpoint)
	case o.Model == "":
		s.fail(0, CodeMissingModel, "model", "a CSV file needs the batch's model")
	case !o.KnownModel(o.Model):
		s.fail(0, CodeModelNotFound, "model", "model %q is not a configured model (GET /v1/models lists them)", o.Model)
	case o.AllowedModel != nil && !o.AllowedModel(o.Model):
		s.fail(0, CodeModelNotAllowed, "model", "model %q is not one this API key may use", o.Model)
	default:
		return true
	}
	return false
}

// problem builds a LineError whose message starts with the line it is about.
func problem(line int, code, param, format string, args ...any) *LineError {
	msg := fmt.Sprintf(format, args...)
	if line > 0 {
		msg = fmt.Sprintf("line %d: %s", line, msg)
	}
	return &LineError{Code: code, Message: msg, Param: param, Line: line}
}

// fail records a problem and reports whether scanning should go on.
func (s *scanner) fail(line int, code, param, format string, args ...any) bool {
	return s.add(problem(line, code, param, format, args...))
}

func (s *scanner) add(e *LineError) bool {
	if len(s.res.Errors) < s.opts.MaxErrors {
		s.res.Errors = append(s.res.Errors, *e)
	}
	return len(s.res.Errors) < s.opts.MaxErrors
}

// newRow counts a row and reports whether the file may still have it.
func (s *scanner) newRow(line int) bool {
	s.res.Rows++
	if s.res.Rows > s.opts.MaxRows {
		s.fail(line, CodeTooManyRows, "", "the file has more than %d requests", s.opts.MaxRows)
		return false
	}
	return true
}

// useID records a custom_id and reports the line of its first use, 0 if new.
func (s *scanner) useID(id []byte, line int) (firstLine int) {
	sum := sha256.Sum256(id)
	k := idKey(sum[:len(idKey{})])
	if first, dup := s.ids[k]; dup {
		return first
	}
	s.ids[k] = line
	return 0
}

// knownModel checks a model and remembers it for Result.Model.
func (s *scanner) knownModel(m []byte) (string, bool) {
	if string(m) != s.lastModel {
		s.lastModel = string(m)
		s.lastKnown = s.opts.KnownModel(s.lastModel)
		s.lastAllowed = s.opts.AllowedModel == nil || s.opts.AllowedModel(s.lastModel)
	}
	if s.lastKnown {
		if s.res.Model == "" {
			s.res.Model = s.lastModel
		} else if s.res.Model != s.lastModel {
			s.mixedModels = true
		}
	}
	return s.lastModel, s.lastKnown
}

func (s *scanner) emit(r Row) error {
	if err := s.fn(r); err != nil {
		return fmt.Errorf("row on line %d: %w", r.Line, err)
	}
	return nil
}

// scanJSONL validates one JSON request object per non-blank line.
func (s *scanner) scanJSONL(in io.Reader) error {
	lr := newLineReader(in, s.opts.MaxLineBytes)
	for {
		l, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !l.tooLong && isBlank(l.text) {
			continue
		}
		if !s.newRow(l.num) {
			return nil
		}
		row, bad := s.checkLine(l)
		if bad != nil {
			if !s.add(bad) {
				return nil
			}
			continue
		}
		row.Index = s.res.Rows - 1
		if err := s.emit(row); err != nil {
			return err
		}
	}
}

// checkLine validates one non-blank JSONL line and returns its first problem.
func (s *scanner) checkLine(l line) (Row, *LineError) {
	n := l.num
	if l.tooLong {
		return Row{}, problem(n, CodeLineTooLong, "", "the line is longer than %d bytes", s.opts.MaxLineBytes)
	}
	if !utf8.Valid(l.text) {
		return Row{}, problem(n, CodeInvalidUTF8, "", "the line is not valid UTF-8")
	}
	req, err := splitRequest(l.text)
	if err != nil {
		return Row{}, problem(n, CodeInvalidJSON, "", "%v", err)
	}
	if req.body == nil && (req.messages != nil || req.prompt != nil) {
		return s.checkSimple(l, req)
	}

	id, isString := stringValue(req.customID)
	switch {
	case isNull(req.customID):
		return Row{}, problem(n, CodeMissingCustomID, "custom_id", "custom_id is missing")
	case !isString:
		return Row{}, problem(n, CodeInvalidCustomID, "custom_id", "custom_id must be a string, not %s", clip(req.customID))
	case len(id) == 0:
		return Row{}, problem(n, CodeMissingCustomID, "custom_id", "custom_id is empty")
	}
	if first := s.useID(id, n); first != 0 {
		return Row{}, problem(n, CodeDuplicateCustomID, "custom_id", "custom_id %s is already used on line %d", clip(req.customID), first)
	}

	if m, ok := stringValue(req.method); !ok || string(m) != "POST" {
		return Row{}, problem(n, CodeInvalidMethod, "method", `method must be "POST", not %s`, clipOrMissing(req.method))
	}

	url, ok := stringValue(req.url)
	switch {
	case !ok || !supportedEndpoint(url):
		return Row{}, problem(n, CodeInvalidURL, "url", "url must be one of %s, not %s", strings.Join(endpoints, ", "), clipOrMissing(req.url))
	case string(url) != s.opts.Endpoint:
		return Row{}, problem(n, CodeMismatchedURL, "url", "url %s is not the batch's endpoint %q", clip(req.url), s.opts.Endpoint)
	}

	if req.body == nil {
		return Row{}, problem(n, CodeInvalidBody, "body", "body is missing: send body, or messages or prompt with the batch's model")
	}
	if !isObject(req.body) {
		return Row{}, problem(n, CodeInvalidBody, "body", "body must be a JSON object, not %s", clip(req.body))
	}
	body := splitBody(req.body)
	m, isString := stringValue(body.model)
	shown := clip(body.model)
	switch {
	case isNull(body.model) && s.opts.DefaultModel != "":
		m, shown = []byte(s.opts.DefaultModel), strconv.Quote(s.opts.DefaultModel)
	case isNull(body.model) && s.opts.Endpoint == endpoint.Moderations:
		return Row{}, problem(n, CodeMissingModel, "body.model", "body.model is missing, and no default moderation model is configured (moderation_model in the models file)")
	case isNull(body.model):
		return Row{}, problem(n, CodeMissingModel, "body.model", "body.model is missing")
	case !isString:
		return Row{}, problem(n, CodeInvalidModel, "body.model", "body.model must be a string, not %s", shown)
	case len(m) == 0:
		return Row{}, problem(n, CodeMissingModel, "body.model", "body.model is empty")
	}
	model, known := s.knownModel(m)
	if !known {
		return Row{}, problem(n, CodeModelNotFound, "body.model", "model %s is not a configured model (GET /v1/models lists them)", shown)
	}
	if !s.lastAllowed {
		return Row{}, problem(n, CodeModelNotAllowed, "body.model", "model %s is not one this API key may use", shown)
	}
	if string(body.stream) == "true" {
		return Row{}, problem(n, CodeStreamUnsupported, "body.stream", "body.stream: true is not supported in a batch")
	}

	return Row{
		Line:     n,
		Start:    l.start,
		End:      l.end,
		CustomID: string(id),
		Model:    model,
		JSON:     l.text,
		Body:     req.body,
	}, nil
}

// clip shows a JSON value in a message, cut short (errs.Clip).
func clip(v []byte) string { return errs.Clip(v) }

func clipOrMissing(v []byte) string {
	if v == nil {
		return "missing"
	}
	return clip(v)
}
