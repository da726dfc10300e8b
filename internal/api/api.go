// Package api is the HTTP surface of the service on net/http: the OpenAI
// Files, Uploads and Batches routes, and the Anthropic Message Batches
// routes of internal/anthropic. The same handler runs behind API Gateway
// (internal/apigw) and in the local runtime.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/anthropic"
	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batches"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/files"
	"github.com/relaybatch/relay/internal/govern"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/ijson"
	"github.com/relaybatch/relay/internal/ops"
)

// API holds what the routes need.
type API struct {
	Auth    auth.Authenticator
	Files   *files.Service
	Batches *batches.Service
	// Panel serves the web panel at / and /panel/ (nil: none).
	Panel http.Handler
	// Limiter bounds each key's requests per second (nil: no limit).
	Limiter *RateLimiter
	// Budgets, if set, adds the tenant's budget to GET /v1/usage
	// (internal/govern).
	Budgets interface {
		Report(ctx context.Context, tenant string) (govern.Status, error)
	}
	// Audit, if set, records every state-changing call (internal/audit).
	Audit interface {
		Add(audit.Entry)
		Flush(ctx context.Context) error
	}
	// Operations, if set, answers GET /v1/admin/operations to an
	// admin-scoped key: the panel's Operations page (internal/ops).
	Operations interface {
		Overview(ctx context.Context, tenant string) (ops.Overview, error)
	}
	Log *slog.Logger
}

// maxJSON bounds a JSON request body: inline batch rows may take 4 MiB.
const maxJSON = 4<<20 + 64<<10

// Handler returns the routes.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	files := a.scoped(auth.ScopeFiles)
	mux.Handle("POST /v1/files", files(a.createFile))
	mux.Handle("GET /v1/files", files(a.listFiles))
	mux.Handle("GET /v1/files/{id}", files(a.getFile))
	mux.Handle("GET /v1/files/{id}/content", files(a.fileContent))
	mux.Handle("DELETE /v1/files/{id}", files(a.deleteFile))
	mux.Handle("POST /v1/uploads", files(a.createUpload))
	mux.Handle("POST /v1/uploads/{id}/parts", files(a.addPart))
	mux.Handle("POST /v1/uploads/{id}/complete", files(a.completeUpload))
	mux.Handle("POST /v1/uploads/{id}/cancel", files(a.cancelUpload))
	a.batchRoutes(mux)
	started := time.Now()
	mux.Handle("GET /v1/models", a.scoped(auth.ScopeBatches)(a.listModels(started)))
	mux.Handle("GET /v1/models/{id...}", a.scoped(auth.ScopeBatches)(a.getModel(started)))
	if a.Operations != nil {
		mux.Handle("GET /v1/admin/operations", a.scoped(auth.ScopeAdmin)(a.operations))
	}
	anthropic.Routes(mux, &anthropic.Service{Batches: a.Batches}, a.scoped(auth.ScopeBatches), unmarshal, maxJSON)
	if a.Panel != nil {
		mux.Handle("GET /{$}", a.Panel)
		mux.Handle("GET /panel/", a.Panel)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, errs.E(errs.NotFound, "unknown_route", "", "no route %s %s", r.Method, r.URL.Path))
	})
	return a.recoverer(mux)
}

// handlerFunc is a route's handler (an alias, so that anthropic.Routes
// takes what scoped returns).
type handlerFunc = func(w http.ResponseWriter, r *http.Request, p auth.Principal) error

// scoped authenticates the request for scope, then runs h and writes its error.
func (a *API) scoped(scope string) func(handlerFunc) http.Handler {
	return func(h handlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := a.Auth.Authenticate(r.Context(), auth.FromRequest(r), scope)
			if err != nil {
				a.refuse(w, r, p, err)
				return
			}
			if err := a.limit(r.Context(), p); err != nil {
				a.fail(w, r, err)
				return
			}
			if !a.audited(r) {
				if err := h(w, r, p); err != nil {
					a.fail(w, r, err)
				}
				return
			}
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			if err := h(sw, r, p); err != nil {
				a.fail(sw, r, err)
			}
			a.audit(r, p, sw.status)
		})
	}
}

// audited reports whether r is a call the audit trail records: a
// state-changing one, when there is a trail.
func (a *API) audited(r *http.Request) bool {
	return a.Audit != nil && r.Method != http.MethodGet && r.Method != http.MethodHead
}

// refuse answers a request whose key was refused. A state-changing call
// of a key of the service's (p names it: disabled, expired, without the
// scope…) is recorded with its status, within the key's rate limit (a
// flood of refused calls writes no more entries than allowed ones); a key
// that is not one of the service's names no one, and is not recorded.
func (a *API) refuse(w http.ResponseWriter, r *http.Request, p auth.Principal, err error) {
	if p.KeyID == "" || !a.audited(r) || a.limit(r.Context(), p) != nil {
		a.fail(w, r, err)
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	a.fail(sw, r, err)
	a.audit(r, p, sw.status)
}

// audit records a state-changing call and writes it before the response
// ends (a Lambda may freeze right after). A failed write is logged: the
// entry stays kept for the next call's write.
func (a *API) audit(r *http.Request, p auth.Principal, status int) {
	e := audit.Entry{Time: time.Now().UnixMilli(), Tenant: p.Tenant, KeyID: p.KeyID, Action: r.Pattern,
		Target: r.PathValue("id"), Outcome: strconv.Itoa(status)}
	if strings.HasPrefix(e.Target, "batch_") || strings.HasPrefix(e.Target, "msgbatch_") {
		e.Batch = e.Target
	}
	a.Audit.Add(e)
	if err := a.Audit.Flush(r.Context()); err != nil {
		a.Log.WarnContext(r.Context(), "audit trail: entry kept for the next write", "err", err)
	}
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (a *API) recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v) // a stream cut short must reach the client as one
				}
				a.fail(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		h.ServeHTTP(w, r)
	})
}

var statusOf = map[errs.Kind]int{
	errs.Internal:        http.StatusInternalServerError,
	errs.Invalid:         http.StatusBadRequest,
	errs.Unauthenticated: http.StatusUnauthorized,
	errs.Forbidden:       http.StatusForbidden,
	errs.NotFound:        http.StatusNotFound,
	errs.Conflict:        http.StatusConflict,
	errs.TooLarge:        http.StatusRequestEntityTooLarge,
	errs.RateLimited:     http.StatusTooManyRequests,
	errs.Unprocessable:   http.StatusUnprocessableEntity,
}

// openAITypes names the error type of each kind as OpenAI does; Anthropic's
// is the one of its status (wire.ErrorType).
var openAITypes = map[errs.Kind]string{
	errs.Internal:        "server_error",
	errs.Invalid:         "invalid_request_error",
	errs.Unauthenticated: "invalid_request_error",
	errs.Forbidden:       "invalid_request_error",
	errs.NotFound:        "invalid_request_error",
	errs.Conflict:        "invalid_request_error",
	errs.TooLarge:        "invalid_request_error",
	errs.RateLimited:     "rate_limit_error",
	errs.Unprocessable:   "invalid_request_error",
}

// fail is the one place an error becomes a status and a body. Internal
// errors are logged with detail and shown only as a request id.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *errs.Error
	if !errors.As(err, &e) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			e = errs.E(errs.TooLarge, "request_too_large", "", "the request body is larger than %d bytes, the most %s %s takes: send files over 4 MiB with the Uploads API (parts of at most 4 MiB)", mbe.Limit, r.Method, r.URL.Path)
		} else {
			rid := requestID(r)
			log := a.Log
			// internal/apigw keeps the X-Request-Id a client sent apart,
			// capped and cleaned: the request's id is the service's.
			if client := r.Header.Get("X-Client-Request-Id"); client != "" {
				log = log.With("client_request_id", client)
			}
			log.ErrorContext(r.Context(), "request failed", "request_id", rid, "method", r.Method, "path", r.URL.Path, "err", err)
			e = &errs.Error{Kind: errs.Internal, Message: "internal error (request id " + rid + ")"}
		}
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(e.RetryAfter))
	}
	if !worthRetrying(e) {
		w.Header().Set("X-Should-Retry", "false")
	}
	status := statusOf[e.Kind]
	if anthropicShaped(r) {
		body := map[string]any{"type": "error", "error": map[string]any{"type": wire.ErrorType(status), "message": e.Message}}
		if id := r.Header.Get("X-Request-Id"); id != "" {
			body["request_id"] = id // Anthropic's error bodies carry it
		}
		writeJSON(w, status, body)
		return
	}
	body := map[string]any{"message": e.Message, "type": openAITypes[e.Kind], "param": nil, "code": nil}
	if e.Param != "" {
		body["param"] = e.Param
	}
	if e.Code != "" {
		body["code"] = e.Code
	}
	for k, v := range e.Extra {
		body[k] = v
	}
	writeJSON(w, status, map[string]any{"error": body})
}

// worthRetrying tells the official SDKs which refusals to retry. They
// retry every 409, 429 and 5xx unless x-should-retry says otherwise, and
// obey a Retry-After of up to 60 s, twice by default: only an internal
// error, and a rate limit that clears within a second (the per-key
// window), may pass again soon. The in-flight limit's 429 lasts until a
// batch ends, and a 409 here is a batch's state, not a lock.
func worthRetrying(e *errs.Error) bool {
	return e.Kind == errs.Internal || e.Kind == errs.RateLimited && e.RetryAfter <= 1
}

func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" {
		return id
	}
	return ids.New("req_")
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// decodeJSON decodes one JSON value of at most limit bytes, naming the
// field when a value has the wrong type.
func decodeJSON(r *http.Request, limit int64, v any) error {
	body, err := readBody(r, limit)
	if err != nil {
		return err
	}
	return unmarshal(body, v)
}

func readBody(r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
}

func unmarshal(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		return errs.E(errs.Invalid, errs.CodeInvalidJSON, "", "the request body is empty: send a JSON object")
	}
	if err := checkJSONBody(body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return errs.E(errs.Invalid, errs.CodeInvalidType, te.Field, "%s: expected %s, got %s", te.Field, te.Type, te.Value)
		case errors.As(err, &te):
			return errs.E(errs.Invalid, errs.CodeInvalidJSON, "", "the request body must be a JSON object")
		case errors.As(err, &se):
			return errs.E(errs.Invalid, errs.CodeInvalidJSON, "", "malformed JSON at byte %d: %v", se.Offset, se)
		default:
			return errs.E(errs.Invalid, errs.CodeInvalidJSON, "", "malformed JSON: %v", err)
		}
	}
	if err := ijson.Check(body); err != nil {
		return errs.Invalidf("", "%v", err)
	}
	return nil
}

type list[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

func newList[T any](data []T, more bool, id func(T) string) list[T] {
	l := list[T]{Object: "list", Data: data, HasMore: more}
	if l.Data == nil {
		l.Data = []T{}
	}
	if len(data) > 0 {
		f, la := id(data[0]), id(data[len(data)-1])
		l.FirstID, l.LastID = &f, &la
	}
	return l
}

// operations answers GET /v1/admin/operations: the service's models,
// stuck chunks, dead-letter queues and recent upstream answers, as relay
// admin reads them, naming the caller's tenant's batches only
// (internal/ops; docs/runbook.md "Operations page").
func (a *API) operations(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	o, err := a.Operations.Overview(r.Context(), p.Tenant)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, o)
}
