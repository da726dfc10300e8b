package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/engine"
	"github.com/relaybatch/relay/internal/errs"
)

// The Anthropic Message Batches routes (SPEC §9). fail answers every path
// under /v1/messages in Anthropic's error shape; auth.FromRequest takes the
// key from x-api-key as well as a bearer token; anthropic-version is
// accepted whatever it says, since each SDK release sends its own.
func (a *API) anthropicRoutes(mux *http.ServeMux) {
	batches := a.scoped(auth.ScopeBatches)
	mux.Handle("POST /v1/messages/batches", batches(a.createMessageBatch))
	mux.Handle("GET /v1/messages/batches", batches(a.listMessageBatches))
	mux.Handle("GET /v1/messages/batches/{id}", batches(a.getMessageBatch))
	mux.Handle("DELETE /v1/messages/batches/{id}", batches(a.deleteMessageBatch))
	mux.Handle("POST /v1/messages/batches/{id}/cancel", batches(a.cancelMessageBatch))
	mux.Handle("GET /v1/messages/batches/{id}/results", batches(a.messageBatchResults))
}

// messagesTooLarge refuses a create body over maxJSON. Anthropic takes
// 256 MB, but one request to this deployment carries about 4 MiB (Lambda's
// invocation payload), so a bigger batch has to be split.
func messagesTooLarge() error {
	return errs.E(errs.TooLarge, "request_too_large", "",
		"the request body is larger than 4 MiB, the most one request to this deployment can carry (its AWS Lambda payload limit; "+
			"Anthropic's 256 MB batch limit does not fit through it): split the requests into several smaller batches")
}

// decodeMessageBatchCreate reads the requests of a create body (fuzzed).
func decodeMessageBatchCreate(body []byte) ([]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := unmarshal(body, &top); err != nil {
		return nil, err
	}
	if top == nil {
		return nil, errs.Invalidf("", "the request body must be a JSON object {\"requests\": [...]}")
	}
	for k := range top {
		if k != "requests" {
			return nil, errs.Invalidf(k, "%s: unknown field: the body has only requests", k)
		}
	}
	var reqs []json.RawMessage
	if raw, ok := top["requests"]; !ok || json.Unmarshal(raw, &reqs) != nil || reqs == nil {
		return nil, errs.Invalidf("requests", "requests: an array of {custom_id, params} is required")
	}
	return reqs, nil
}

func (a *API) createMessageBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if r.ContentLength > maxJSON {
		return messagesTooLarge()
	}
	body, err := readBody(r, maxJSON)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return messagesTooLarge()
	}
	if err != nil {
		return err
	}
	reqs, err := decodeMessageBatchCreate(body)
	if err != nil {
		return err
	}
	m, err := a.Engine.CreateMessageBatch(r.Context(), p, reqs, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, withResultsURL(r, m))
}

// messageBatchList is Anthropic's page of a list.
type messageBatchList struct {
	Data    []engine.MessageBatch `json:"data"`
	HasMore bool                  `json:"has_more"`
	FirstID *string               `json:"first_id"`
	LastID  *string               `json:"last_id"`
}

func (a *API) listMessageBatches(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	limit, err := intParam(r, "limit", 20, 1, 1000)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	ms, more, err := a.Engine.ListMessageBatches(r.Context(), p.Tenant, engine.MessagePage{
		AfterID: q.Get("after_id"), BeforeID: q.Get("before_id"), Limit: limit,
	})
	if err != nil {
		return err
	}
	l := messageBatchList{Data: make([]engine.MessageBatch, len(ms)), HasMore: more}
	for i, m := range ms {
		l.Data[i] = withResultsURL(r, m)
	}
	if len(ms) > 0 {
		l.FirstID, l.LastID = &ms[0].ID, &ms[len(ms)-1].ID
	}
	return writeJSON(w, http.StatusOK, l)
}

func (a *API) getMessageBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	m, err := a.Engine.GetMessageBatch(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, withResultsURL(r, m))
}

func (a *API) cancelMessageBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	m, err := a.Engine.CancelMessageBatch(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, withResultsURL(r, m))
}

func (a *API) deleteMessageBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	id := r.PathValue("id")
	if err := a.Engine.DeleteMessageBatch(r.Context(), p.Tenant, id); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "message_batch_deleted"})
}

func (a *API) messageBatchResults(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	id := r.PathValue("id")
	write, err := a.Engine.MessageResults(r.Context(), p.Tenant, id)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-jsonl")
	w.WriteHeader(http.StatusOK)
	if err := write(w); err != nil {
		// The status is out: only breaking the stream tells the client.
		a.Log.ErrorContext(r.Context(), "stream message batch results", "batch_id", id, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// withResultsURL sets the results URL of an ended batch, on the base URL
// the client called.
func withResultsURL(r *http.Request, m engine.MessageBatch) engine.MessageBatch {
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
