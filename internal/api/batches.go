package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/batches"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/store"
)

func (a *API) batchRoutes(mux *http.ServeMux) {
	scoped := a.scoped(auth.ScopeBatches)
	mux.Handle("POST /v1/batches", scoped(a.createBatch))
	mux.Handle("GET /v1/batches", scoped(a.listBatches))
	mux.Handle("GET /v1/batches/{id}", scoped(a.getBatch))
	mux.Handle("POST /v1/batches/{id}/cancel", scoped(a.cancelBatch))
	mux.Handle("GET /v1/batches/{id}/results", scoped(a.batchResults))
	mux.Handle("GET /v1/batches/{id}/dead_letters", scoped(a.deadLetters))
	mux.Handle("GET /v1/batches/{id}/rows", scoped(a.batchRows))
	mux.Handle("POST /v1/batches/{id}/retry", scoped(a.retryBatch))
	mux.Handle("GET /v1/usage", scoped(a.usage))
}

// decodeCreate is the request decoder of POST /v1/batches (fuzzed).
func decodeCreate(body []byte) (batches.CreateRequest, error) {
	var req batches.CreateRequest
	err := unmarshal(body, &req)
	return req, err
}

func (a *API) createBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	body, err := readBody(r, maxJSON)
	if err != nil {
		return err
	}
	req, err := decodeCreate(body)
	if err != nil {
		return err
	}
	if req.DryRun {
		// A quote: nothing recorded, nothing run (docs/api.md "Quotes").
		q, err := a.Batches.Quote(r.Context(), p, req)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, q)
	}
	b, err := a.Batches.Create(r.Context(), p, req, idemKey(r, body))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}

// idemKey is the request's Idempotency-Key, scoped to its method and path
// and bound to body (the retry route takes none).
func idemKey(r *http.Request, body []byte) store.IdemKey {
	return batches.NewIdemKey(r.Method+" "+r.URL.Path, r.Header.Get("Idempotency-Key"), body)
}

// intParam reads an integer query parameter within [lo, hi].
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, errs.Invalidf(name, "%s must be an integer between %d and %d", name, lo, hi)
	}
	return n, nil
}

func (a *API) listBatches(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	limit, err := intParam(r, "limit", 20, 1, 100)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	bs, more, err := a.Batches.List(r.Context(), p.Tenant, q.Get("after"), limit, q.Get("template_id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(bs, more, func(b batch.Batch) string { return b.ID }))
}

func (a *API) getBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	b, err := a.Batches.Get(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}

func (a *API) cancelBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	b, err := a.Batches.Cancel(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}

func (a *API) batchResults(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	id, partial := r.PathValue("id"), r.URL.Query().Get("partial") == "true"
	if err := a.Batches.StartResults(r.Context(), p.Tenant, id, partial); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.WriteHeader(http.StatusOK)
	if err := a.Batches.Results(r.Context(), p.Tenant, id, partial, w); err != nil {
		a.Log.ErrorContext(r.Context(), "stream results", "batch_id", id, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// deadLetters lists the rows of a batch that ended failed (docs/api.md
// "Dead letters").
func (a *API) deadLetters(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	limit, err := intParam(r, "limit", 100, 1, 1000)
	if err != nil {
		return err
	}
	after, err := intParam(r, "after", -1, 0, 1<<30)
	if err != nil {
		return err
	}
	dls, page, err := a.Batches.DeadLetters(r.Context(), p.Tenant, r.PathValue("id"), after, limit)
	if err != nil {
		return err
	}
	resp := map[string]any{"object": "list", "data": dls, "has_more": page.More}
	if page.Last >= 0 {
		resp["last_id"] = strconv.Itoa(page.Last)
	}
	return writeJSON(w, http.StatusOK, resp)
}

// batchRows lists the generations of a batch's committed rows
// (docs/api.md "Rows").
func (a *API) batchRows(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	q := batches.RowsQuery{CustomID: r.URL.Query().Get("custom_id")}
	var err error
	if q.Limit, err = intParam(r, "limit", 100, 1, 1000); err != nil {
		return err
	}
	if q.After, err = intParam(r, "after", -1, 0, 1<<30); err != nil {
		return err
	}
	switch st := r.URL.Query().Get("status"); st {
	case "", "failed":
		q.Failed = st == "failed"
	default:
		return errs.Invalidf("status", "status must be failed, or left out for every row")
	}
	page, err := a.Batches.Rows(r.Context(), p.Tenant, r.PathValue("id"), q)
	if err != nil {
		return err
	}
	if page.Data == nil {
		page.Data = []part.UsageEvent{}
	}
	resp := map[string]any{"object": "list", "data": page.Data, "has_more": page.More}
	if page.Last >= 0 {
		resp["last_id"] = strconv.Itoa(page.Last)
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (a *API) retryBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	b, err := a.Batches.Retry(r.Context(), p, r.PathValue("id"), idemKey(r, nil))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}

func (a *API) usage(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	q := r.URL.Query()
	if s := q.Get("source"); s != "" && s != "batch" {
		return errs.Invalidf("source", "source must be batch")
	}
	unix := func(name string, def time.Time) (time.Time, error) {
		v := q.Get(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, errs.Invalidf(name, "%s must be a Unix time in seconds", name)
		}
		return time.Unix(n, 0), nil
	}
	now := time.Now()
	from, err := unix("start_time", now.AddDate(0, 0, -30))
	if err != nil {
		return err
	}
	to, err := unix("end_time", now)
	if err != nil {
		return err
	}
	groupBy, err := batches.ParseGroupBy(q.Get("group_by"))
	if err != nil {
		return err
	}
	rows, err := a.Batches.Usage(r.Context(), p.Tenant, from, to, groupBy)
	if err != nil {
		return err
	}
	out := map[string]any{"object": "list", "source": "batch", "data": rows}
	if a.Budgets != nil {
		st, err := a.Budgets.Report(r.Context(), p.Tenant)
		if err != nil {
			return err
		}
		out["budget"] = st.View()
	}
	return writeJSON(w, http.StatusOK, out)
}
