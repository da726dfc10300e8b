package anthropic

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batches"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/provider"
)

// Handler is a route's handler as internal/api runs it: it writes the
// response, or returns the error the API answers with.
type Handler = func(w http.ResponseWriter, r *http.Request, p auth.Principal) error

// Routes registers the Message Batches routes (docs/api.md "Anthropic
// Message Batches") on mux, served by s. The rest is internal/api's, shared
// with its other routes: wrap authenticates a request for auth.ScopeBatches
// and answers the error a handler returns (in Anthropic's shape under
// /v1/messages), decode decodes a JSON request body, maxBody bounds one.
// auth.FromRequest takes the key from x-api-key as well as a bearer token;
// anthropic-version is accepted whatever it says, since each SDK release
// sends its own.
func Routes(mux *http.ServeMux, s *Service, wrap func(Handler) http.Handler, decode func(body []byte, v any) error, maxBody int64) {
	rt := &routes{s: s, decode: decode, maxBody: maxBody}
	mux.Handle("POST /v1/messages/batches", wrap(rt.createMessageBatch))
	mux.Handle("GET /v1/messages/batches", wrap(rt.listMessageBatches))
	mux.Handle("GET /v1/messages/batches/{id}", wrap(rt.getMessageBatch))
	mux.Handle("DELETE /v1/messages/batches/{id}", wrap(rt.deleteMessageBatch))
	mux.Handle("POST /v1/messages/batches/{id}/cancel", wrap(rt.cancelMessageBatch))
	mux.Handle("GET /v1/messages/batches/{id}/results", wrap(rt.messageBatchResults))
}

type routes struct {
	s       *Service
	decode  func(body []byte, v any) error
	maxBody int64
}

// messagesTooLarge refuses a create body over maxBody. Anthropic takes
// 256 MB, but one request to this deployment carries about 4 MiB (Lambda's
// invocation payload), so a bigger batch has to be split.
func messagesTooLarge() error {
	return errs.E(errs.TooLarge, "request_too_large", "",
		"the request body is larger than 4 MiB, the most one request to this deployment can carry (its AWS Lambda payload limit; "+
			"Anthropic's 256 MB batch limit does not fit through it): split the requests into several smaller batches")
}

// decodeMessageBatchCreate reads the requests of a create body (fuzzed).
func (rt *routes) decodeMessageBatchCreate(body []byte) ([]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := rt.decode(body, &top); err != nil {
		return nil, err
	}
	if top == nil {
		return nil, errs.E(errs.Invalid, errs.CodeInvalidJSON, "", "the request body must be a JSON object {\"requests\": [...]}")
	}
	for k := range top {
		if k != "requests" && k != "dry_run" {
			return nil, errs.Invalidf(k, "%s: unknown field: the body has only requests (and the extension dry_run)", k)
		}
	}
	var reqs []json.RawMessage
	if raw, ok := top["requests"]; !ok || json.Unmarshal(raw, &reqs) != nil || reqs == nil {
		return nil, errs.Missingf("requests", "requests: an array of {custom_id, params} is required")
	}
	return reqs, nil
}

func (rt *routes) createMessageBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if r.ContentLength > rt.maxBody {
		return messagesTooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, rt.maxBody))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return messagesTooLarge()
	}
	if err != nil {
		return err
	}
	reqs, err := rt.decodeMessageBatchCreate(body)
	if err != nil {
		return err
	}
	var flags struct {
		DryRun bool `json:"dry_run"`
	}
	if json.Unmarshal(body, &flags) != nil {
		return errs.Invalidf("dry_run", "dry_run must be a boolean")
	}
	if flags.DryRun {
		// A quote: nothing recorded, nothing run (docs/api.md "Quotes").
		q, err := rt.s.QuoteMessageBatch(r.Context(), p, reqs)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, q)
	}
	idem := batches.NewIdemKey(r.Method+" "+r.URL.Path, r.Header.Get("Idempotency-Key"), body)
	m, err := rt.s.CreateMessageBatch(r.Context(), p, reqs, idem, upstreamHeaders(r.Header))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, withResultsURL(r, m))
}

// upstreamHeaders are the create's headers its rows carry upstream: the
// betas of anthropic-beta (comma-separated, in one header or several, as
// the SDKs send them) and anthropic-user-profile-id.
func upstreamHeaders(h http.Header) provider.Anthropic {
	var a provider.Anthropic
	for _, v := range h.Values("anthropic-beta") {
		for b := range strings.SplitSeq(v, ",") {
			if b = strings.TrimSpace(b); b != "" && !slices.Contains(a.Betas, b) {
				a.Betas = append(a.Betas, b)
			}
		}
	}
	a.UserProfile = strings.TrimSpace(h.Get("anthropic-user-profile-id"))
	return a
}

// messageBatchList is Anthropic's page of a list.
type messageBatchList struct {
	Data    []wire.MessageBatch `json:"data"`
	HasMore bool                `json:"has_more"`
	FirstID *string             `json:"first_id"`
	LastID  *string             `json:"last_id"`
}

func (rt *routes) listMessageBatches(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return errs.Invalidf("limit", "limit must be an integer between 1 and 1000")
		}
		limit = n
	}
	ms, more, err := rt.s.ListMessageBatches(r.Context(), p.Tenant, MessagePage{
		AfterID: q.Get("after_id"), BeforeID: q.Get("before_id"), Limit: limit,
	})
	if err != nil {
		return err
	}
	l := messageBatchList{Data: make([]wire.MessageBatch, len(ms)), HasMore: more}
	for i, m := range ms {
		l.Data[i] = withResultsURL(r, m)
	}
	if len(ms) > 0 {
		l.FirstID, l.LastID = &ms[0].ID, &ms[len(ms)-1].ID
	}
	return writeJSON(w, http.StatusOK, l)
}

func (rt *routes) getMessageBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	m, err := rt.s.GetMessageBatch(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, withResultsURL(r, m))
}

func (rt *routes) cancelMessageBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	m, err := rt.s.CancelMessageBatch(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, withResultsURL(r, m))
}

func (rt *routes) deleteMessageBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	id := r.PathValue("id")
	if err := rt.s.DeleteMessageBatch(r.Context(), p.Tenant, id); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "message_batch_deleted"})
}

func (rt *routes) messageBatchResults(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	id := r.PathValue("id")
	write, err := rt.s.MessageResults(r.Context(), p.Tenant, id)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-jsonl")
	w.WriteHeader(http.StatusOK)
	if err := write(w); err != nil {
		// The status is out: only breaking the stream tells the client.
		rt.s.Batches.Log.ErrorContext(r.Context(), "stream message batch results", "batch_id", id, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// withResultsURL sets the results URL of an ended batch, on the base URL
// the client called.
func withResultsURL(r *http.Request, m wire.MessageBatch) wire.MessageBatch {
	if m.Ended() {
		u := baseURL(r) + "/v1/messages/batches/" + m.ID + "/results"
		m.ResultsURL = &u
	}
	return m
}

// baseURL is the scheme and host the client called, from the proxy's
// X-Forwarded-Proto when there is one, then the path prefix a proxy
// strips (X-Forwarded-Prefix: an API Gateway stage, say).
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	if proto = strings.ToLower(strings.TrimSpace(proto)); proto == "http" || proto == "https" {
		scheme = proto
	}
	return scheme + "://" + r.Host + forwardedPrefix(r.Header.Get("X-Forwarded-Prefix"))
}

// forwardedPrefix keeps a prefix made of plain path segments, else none.
func forwardedPrefix(p string) string {
	p = strings.Trim(strings.TrimSpace(p), "/")
	if p == "" || len(p) > 128 {
		return ""
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/') {
			return ""
		}
	}
	if strings.Contains("/"+p+"/", "/../") || strings.Contains("/"+p+"/", "/./") || strings.Contains(p, "//") {
		return ""
	}
	return "/" + p
}
