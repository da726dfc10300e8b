package mockup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/batch"
)

// batchAPI is the mock's side of the providers' own batch APIs, what
// internal/native calls for a model with batch: native: OpenAI's Files and
// Batch (POST /v1/files with purpose batch, GET /v1/files/{id}/content,
// POST/GET /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel)
// and Anthropic's Message Batches (POST/GET /v1/messages/batches, GET
// /v1/messages/batches/{id}, …/cancel, …/results). Wire objects are the
// service's own (batch.Batch, internal/anthropic/wire); result lines are
// OpenAI's (resultLine).
//
// A provider batch ends Options.BatchDelay after it was created: every row
// is then answered as the row's own request would be (markers included),
// except rows carrying [[mock:batch_expire]], which expire unrun. Its rows
// finish evenly over that delay, in order, as a provider works through a
// batch: one cancelled before it ends keeps the answers of the rows it
// had finished (OpenAI's output file, Anthropic's succeeded results, as
// theirs do) and gives the others a cancelled result. Everything is kept
// in memory.
type batchAPI struct {
	s   *Server
	mux *http.ServeMux

	mu     sync.Mutex
	seq    int
	files  map[string][]byte
	oai    map[string]*batch.Batch
	anth   map[string]*wire.MessageBatch
	result map[string][]byte // a message batch's results JSONL
	order  []string          // batch ids, oldest first (listings are newest first)
	// started is when each batch was created; msgs are each message
	// batch's requests, ending those whose results are being written.
	started map[string]time.Time
	msgs    map[string][]messageRequest
	ending  map[string]bool
}

func newBatchAPI(s *Server) *batchAPI {
	a := &batchAPI{s: s, mux: http.NewServeMux(), files: map[string][]byte{}, oai: map[string]*batch.Batch{},
		anth: map[string]*wire.MessageBatch{}, result: map[string][]byte{}, started: map[string]time.Time{},
		msgs: map[string][]messageRequest{}, ending: map[string]bool{}}
	a.mux.HandleFunc("POST /v1/files", a.auth(shapeOpenAI, a.uploadFile))
	a.mux.HandleFunc("GET /v1/files/{id}/content", a.auth(shapeOpenAI, a.fileContent))
	a.mux.HandleFunc("POST /v1/batches", a.auth(shapeOpenAI, a.createBatch))
	a.mux.HandleFunc("GET /v1/batches", a.auth(shapeOpenAI, a.listBatches))
	a.mux.HandleFunc("GET /v1/batches/{id}", a.auth(shapeOpenAI, withBatch(a, a.oai, shapeOpenAI, "batch", a.getBatch)))
	a.mux.HandleFunc("POST /v1/batches/{id}/cancel", a.auth(shapeOpenAI, withBatch(a, a.oai, shapeOpenAI, "batch", a.cancelBatch)))
	a.mux.HandleFunc("POST /v1/messages/batches", a.auth(shapeAnthropic, a.createMessageBatch))
	a.mux.HandleFunc("GET /v1/messages/batches", a.auth(shapeAnthropic, a.listMessageBatches))
	a.mux.HandleFunc("GET /v1/messages/batches/{id}", a.auth(shapeAnthropic, withBatch(a, a.anth, shapeAnthropic, "message batch", a.getMessageBatch)))
	a.mux.HandleFunc("POST /v1/messages/batches/{id}/cancel", a.auth(shapeAnthropic, withBatch(a, a.anth, shapeAnthropic, "message batch", a.cancelMessageBatch)))
	a.mux.HandleFunc("GET /v1/messages/batches/{id}/results", a.auth(shapeAnthropic, withBatch(a, a.anth, shapeAnthropic, "message batch", a.messageResults)))
	return a
}

// serves reports whether path is one of the batch API's.
func (a *batchAPI) serves(path string) bool {
	for _, p := range []string{"/v1/files", "/v1/batches", "/v1/messages/batches"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

func (a *batchAPI) auth(sh shape, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, sh) {
			writeJSON(w, http.StatusUnauthorized, errorBody(sh, http.StatusUnauthorized, missingKeyMessage[sh], ""))
			return
		}
		h(w, r)
	}
}

func (a *batchAPI) newID(prefix string) string {
	a.seq++
	return fmt.Sprintf("%s%06d", prefix, a.seq)
}

func (a *batchAPI) delay() time.Duration {
	if d := a.s.options().BatchDelay; d > 0 {
		return d
	}
	return time.Second
}

// now is the provider batches' time (Options.Clock).
func (a *batchAPI) now() time.Time {
	if c := a.s.options().Clock; c != nil {
		return c()
	}
	return time.Now()
}

// finished is how many of the n rows of a batch started at start have
// been answered by now: they finish evenly over the batch's delay.
func (a *batchAPI) finished(n int, start time.Time) int {
	return min(n, int(float64(n)*float64(a.now().Sub(start))/float64(a.delay())))
}

func notFound(w http.ResponseWriter, sh shape, what string) {
	writeJSON(w, http.StatusNotFound, errorBody(sh, http.StatusNotFound, what+" not found", ""))
}

// withBatch runs h on the batch of byID (one API's batches) the path's id
// names, under the lock, or answers 404 in that API's shape.
func withBatch[T any](a *batchAPI, byID map[string]T, sh shape, what string, h func(http.ResponseWriter, *http.Request, T)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		b, ok := byID[r.PathValue("id")]
		if !ok {
			notFound(w, sh, what)
			return
		}
		h(w, r, b)
	}
}

// uploadFile reads the multipart upload as it streams in.
func (a *batchAPI) uploadFile(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(shapeOpenAI, http.StatusBadRequest, err.Error(), ""))
		return
	}
	var data []byte
	var purpose, name string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody(shapeOpenAI, http.StatusBadRequest, err.Error(), ""))
			return
		}
		b, _ := io.ReadAll(p)
		switch p.FormName() {
		case "purpose":
			purpose = string(b)
		case "file":
			data, name = b, p.FileName()
		}
	}
	if purpose != "batch" || data == nil {
		writeJSON(w, http.StatusBadRequest, errorBody(shapeOpenAI, http.StatusBadRequest, "purpose batch and a file are required", "purpose"))
		return
	}
	a.mu.Lock()
	id := a.newID("file-mock")
	a.files[id] = data
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, object{"id": id, "object": "file", "bytes": len(data), "created_at": a.now().Unix(),
		"filename": name, "purpose": purpose, "status": "processed"})
}

func (a *batchAPI) fileContent(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	data, ok := a.files[r.PathValue("id")]
	a.mu.Unlock()
	if !ok {
		notFound(w, shapeOpenAI, "file")
		return
	}
	w.Header().Set("Content-Type", "application/jsonl")
	_, _ = w.Write(data)
}

func (a *batchAPI) createBatch(w http.ResponseWriter, r *http.Request) {
	var in struct {
		InputFileID      string            `json:"input_file_id"`
		Endpoint         string            `json:"endpoint"`
		CompletionWindow string            `json:"completion_window"`
		Metadata         map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(shapeOpenAI, http.StatusBadRequest, err.Error(), ""))
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	data, ok := a.files[in.InputFileID]
	if !ok {
		notFound(w, shapeOpenAI, "input file")
		return
	}
	if len(data) == 0 {
		writeJSON(w, http.StatusBadRequest, errorBody(shapeOpenAI, http.StatusBadRequest, "the input file is empty", "input_file_id"))
		return
	}
	now := a.now().Unix()
	exp := now + 24*3600
	b := &batch.Batch{ID: a.newID("batch_mock"), Endpoint: in.Endpoint, InputFileID: in.InputFileID, CompletionWindow: in.CompletionWindow,
		Status: batch.InProgress, CreatedAt: now, InProgressAt: &now, ExpiresAt: &exp, Metadata: in.Metadata}
	b.RequestCounts.Total = int64(bytes.Count(data, []byte("\n")))
	a.oai[b.ID] = b
	a.started[b.ID] = a.now()
	a.order = append(a.order, b.ID)
	a.s.countBatch(false)
	time.AfterFunc(a.delay(), func() { a.runBatch(b.ID, data) })
	writeJSON(w, http.StatusOK, b.Out())
}

// runBatch ends an OpenAI batch that was not cancelled: every row answered.
func (a *batchAPI) runBatch(id string, data []byte) {
	a.mu.Lock()
	b := a.oai[id]
	if b.Status != batch.InProgress {
		a.mu.Unlock()
		return
	}
	b.Status = batch.Finalizing
	a.mu.Unlock()
	a.endBatch(b, data, -1)
}

// endBatch ends OpenAI batch b, finalizing or cancelling: its rows' lines
// go to its output and error files as OpenAI writes them, the first done
// rows answered and the rest batch_cancelled (done < 0: every row
// answered).
func (a *batchAPI) endBatch(b *batch.Batch, data []byte, done int) {
	var out, errs bytes.Buffer
	expired, completed, failed := false, int64(0), int64(0)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxBodyBytes)
	for i := 0; sc.Scan(); i++ {
		l, exp := a.resultOf(b.ID, i, sc.Bytes(), done >= 0 && i >= done)
		expired = expired || exp
		line, _ := json.Marshal(l)
		dst := &errs
		if l.Response != nil && l.Response.StatusCode < 300 {
			dst = &out
			completed++
		} else {
			failed++
		}
		dst.Write(append(line, '\n'))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.Status != batch.Finalizing && b.Status != batch.Cancelling {
		return
	}
	now := a.now().Unix()
	b.RequestCounts.Completed, b.RequestCounts.Failed = completed, failed
	for kind, buf := range map[string]*bytes.Buffer{"out": &out, "err": &errs} {
		if buf.Len() == 0 {
			continue
		}
		fid := a.newID("file-mock")
		a.files[fid] = buf.Bytes()
		if kind == "out" {
			b.OutputFileID = &fid
		} else {
			b.ErrorFileID = &fid
		}
	}
	switch {
	case b.Status == batch.Cancelling:
		b.Status, b.CancelledAt = batch.Cancelled, &now
	case expired:
		b.Status, b.ExpiredAt = batch.Expired, &now
	default:
		b.Status, b.CompletedAt = batch.Completed, &now
	}
}

// resultOf is row i (input line raw) of OpenAI batch id's result line,
// run unless cancelled, and whether it expired unrun.
func (a *batchAPI) resultOf(id string, i int, raw []byte, cancelled bool) (resultLine, bool) {
	var row struct {
		CustomID string          `json:"custom_id"`
		URL      string          `json:"url"`
		Body     json.RawMessage `json:"body"`
	}
	_ = json.Unmarshal(raw, &row)
	l := resultLine{ID: fmt.Sprintf("batch_req_%s_%d", id, i), CustomID: row.CustomID}
	if cancelled {
		l.Error = &lineError{Code: "batch_cancelled", Message: "This request was cancelled before it ran."}
		return l, false
	}
	status, body, reqID, exp := a.s.runRow(row.URL, row.Body)
	if exp {
		l.Error = &lineError{Code: "batch_expired", Message: "This request could not be executed before the completion window expired."}
		return l, true
	}
	b, _ := json.Marshal(body)
	l.Response = &lineResponse{StatusCode: status, RequestID: reqID, Body: b}
	return l, false
}

func (a *batchAPI) getBatch(w http.ResponseWriter, _ *http.Request, b *batch.Batch) {
	out := b.Out()
	if out.Status == batch.Finalizing {
		out.Status = batch.InProgress
	}
	writeJSON(w, http.StatusOK, out)
}

// cancelBatch cancels a batch in progress: it is cancelling while the
// results of the rows it had finished are written, then cancelled.
func (a *batchAPI) cancelBatch(w http.ResponseWriter, _ *http.Request, b *batch.Batch) {
	a.s.countBatch(true)
	if b.Status == batch.InProgress {
		now := a.now().Unix()
		b.Status, b.CancellingAt = batch.Cancelling, &now
		done := a.finished(int(b.RequestCounts.Total), a.started[b.ID])
		go a.endBatch(b, a.files[b.InputFileID], done)
	}
	writeJSON(w, http.StatusOK, b.Out())
}

// listed is a page of byID's batches (one API's), newest first, each as
// out makes it: at most limit (20 by default, 100 at most) after the id in
// query parameter afterParam (exclusive), and whether more follow.
func listed[T, O any](order []string, byID map[string]T, r *http.Request, afterParam string, out func(T) O) (ids []string, page []O, more bool) {
	for _, id := range slices.Backward(order) {
		if _, ok := byID[id]; ok {
			ids = append(ids, id)
		}
	}
	if after := r.URL.Query().Get(afterParam); after != "" {
		if i := slices.Index(ids, after); i >= 0 {
			ids = ids[i+1:]
		}
	}
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 20
	}
	if len(ids) > limit {
		ids, more = ids[:limit], true
	}
	page = make([]O, len(ids))
	for i, id := range ids {
		page[i] = out(byID[id])
	}
	return ids, page, more
}

func (a *batchAPI) listBatches(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, data, more := listed(a.order, a.oai, r, "after", (*batch.Batch).Out)
	writeJSON(w, http.StatusOK, object{"object": "list", "data": data, "has_more": more})
}

// runRow answers one row of a provider batch as its own request to path
// would be answered, and counts it; expired is a row that expires unrun.
func (s *Server) runRow(path string, raw []byte) (status int, body object, reqID string, expired bool) {
	req := parseRequest(raw)
	if m, err := findMarkers(req.body); err == nil && m.expire {
		return 0, nil, "", true
	}
	rt, known := routes[path]
	s.mu.Lock()
	s.stats.BatchRows[req.model]++
	s.mu.Unlock()
	r, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, path, nil)
	r.Header.Set("Authorization", "Bearer provider-batch") // the batch's own key was checked at create
	out := s.answer(r, rt, known, req, nil, Options{}, time.Now())
	if out.body == nil {
		out.body = errorBody(rt.shape, out.status, out.message, out.param)
	}
	return out.status, out.body, "req_" + req.id(), false
}

func (s *Server) countBatch(cancel bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel {
		s.stats.BatchCancels++
	} else {
		s.stats.BatchesCreated++
	}
}

// resultLine is a line of an OpenAI batch's output or error file. It is the
// mock's own (internal/part's Line is the service's; part imports provider,
// whose tests use the mock).
type resultLine struct {
	ID       string        `json:"id"`
	CustomID string        `json:"custom_id"`
	Response *lineResponse `json:"response"`
	Error    *lineError    `json:"error"`
}

type lineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type lineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
