package mockup

import (
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// The headers relay's executor sends with every upstream request of a
// chunk run (internal/provider, WithRun): the run, and the end of its
// lease as it last wrote it, in unix milliseconds.
const (
	HeaderRun        = "X-Relay-Run"
	HeaderLeaseUntil = "X-Relay-Lease-Until"
)

// Request is one model request as the mock saw it, kept while
// Options.Record is on: chaos runs check from these that no row was sent
// by two runs at once and none after its run's lease.
type Request struct {
	// Key is the row: the first 16 hex digits of the sha256 of its
	// messages, input and prompt, as for fail=N, so an attempt on a
	// fallback model is the same row.
	Key   string `json:"key"`
	Model string `json:"model"`
	// Run and LeaseUntil are the X-Relay-Run and X-Relay-Lease-Until
	// headers, when sent (LeaseUntil 0 when absent or not a number).
	Run        string `json:"run,omitempty"`
	LeaseUntil int64  `json:"lease_until,omitempty"`
	// Beta and UserProfile are the anthropic-beta and
	// anthropic-user-profile-id headers, when sent.
	Beta        string `json:"beta,omitempty"`
	UserProfile string `json:"user_profile,omitempty"`
	// Start is when the body was read, End when the answer was written
	// or the client was seen gone (Status 499).
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Status int       `json:"status"`
}

// newRecord starts the record of a request that arrived now; record
// finishes it.
func newRecord(r *http.Request, req *request) Request {
	lease, _ := strconv.ParseInt(r.Header.Get(HeaderLeaseUntil), 10, 64)
	return Request{Model: req.model, Run: r.Header.Get(HeaderRun), LeaseUntil: lease, Start: time.Now(),
		Beta: r.Header.Get("anthropic-beta"), UserProfile: r.Header.Get("anthropic-user-profile-id")}
}

// record keeps a request that ended with status, if recording is on. The
// row's key is made only then: it hashes the whole conversation.
func (s *Server) record(rec Request, req *request, status int, opts Options) {
	if !opts.Record {
		return
	}
	if req.err == nil {
		k := req.rowKey()
		rec.Key = hex.EncodeToString(k[:8])
	}
	rec.End, rec.Status = time.Now(), status
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, rec)
}

// Requests returns the requests recorded since the last Reset, in the
// order they ended.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}
