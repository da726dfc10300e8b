package mockup

import (
	"encoding/json"
	"maps"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options are the knobs that apply to every request. The zero value is a
// fast, always successful provider.
type Options struct {
	Latency       time.Duration // every request's least time from its arrival to its answer
	ErrorRate     float64       // fraction of requests answered 500 (0..1)
	RateLimitRate float64       // fraction answered 429 with Retry-After (0..1)
	RetryAfter    time.Duration // Retry-After on 429s; 0 means 1s
	Seed          int64         // seeds the RNG behind the two rates
	// Region is the AWS region the Bedrock routes answer for: a request
	// signed for another is refused, as Bedrock's endpoint refuses it.
	// Default us-east-1.
	Region string
	// BatchDelay is how long a provider batch (OpenAI Batch, Anthropic
	// Message Batches) runs before it ends; 0 means 1s.
	BatchDelay time.Duration
	// Clock is the provider batches' time (when they started, how many of
	// their rows are finished); nil is time.Now. Tests set it to place a
	// cancel within a batch's delay without sleeping.
	Clock func() time.Time
	// Record keeps every model request (Requests, GET /mock/requests)
	// until the next Reset; off by default, so a long make dev keeps
	// nothing.
	Record bool
	// RPM and TPM are each API key's requests and tokens per minute (0: no
	// limit), counted in a sliding window of RateWindow (default 1m; the
	// limits scale with it, so a 1s window admits RPM/60): a request over
	// either is answered 429 with a Retry-After of when it would fit, and
	// every answer to the key carries the provider's rate-limit headers
	// (limits.go). A request's tokens are its prompt's plus max_tokens, or
	// the reply's when it sets none. Changing them mid-run keeps the
	// windows.
	RPM, TPM   int
	RateWindow time.Duration
	// RevokedKeys are API keys answered 401, as a provider answers a
	// revoked key or a placeholder (docs/runbook.md "every-row-401").
	RevokedKeys []string
}

// normalized makes any Options usable: SetOptions has no error to return,
// so out-of-range values are clamped instead of rejected.
func (o Options) normalized() Options {
	o.Latency = max(o.Latency, 0)
	o.ErrorRate = min(max(o.ErrorRate, 0), 1)
	o.RateLimitRate = min(max(o.RateLimitRate, 0), 1)
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	o.RPM, o.TPM = max(o.RPM, 0), max(o.TPM, 0)
	if o.RateWindow <= 0 {
		o.RateWindow = time.Minute
	}
	return o
}

// Stats counts the model requests the server has seen. Requests, ByModel
// and ByPath count on arrival and ByStatus when the answer is written, so
// while requests are in flight the statuses add up to less than Requests.
// Control requests (/mock/…) are not counted.
type Stats struct {
	Requests int64            `json:"requests"`
	ByModel  map[string]int64 `json:"by_model"`
	ByPath   map[string]int64 `json:"by_path"`
	ByStatus map[int]int64    `json:"by_status"`
	// PeakInFlight is the most requests per model that were in flight at
	// once: capacity tests check it against max_concurrency.
	PeakInFlight map[string]int64 `json:"peak_in_flight"`
	// BatchRows counts the rows run inside provider batches, by model;
	// BatchesCreated and BatchCancels the provider batches created and the
	// cancel calls (batchapi.go).
	BatchRows      map[string]int64 `json:"batch_rows"`
	BatchesCreated int64            `json:"batches_created"`
	BatchCancels   int64            `json:"batch_cancels"`
	// ByKey counts the model requests by API key (Options.RPM), and
	// LimitedByKey those of them answered 429 for a key's limit.
	ByKey        map[string]int64 `json:"by_key"`
	LimitedByKey map[string]int64 `json:"limited_by_key"`
}

func newStats() Stats {
	return Stats{ByModel: map[string]int64{}, ByPath: map[string]int64{}, ByStatus: map[int]int64{}, PeakInFlight: map[string]int64{},
		BatchRows: map[string]int64{}, ByKey: map[string]int64{}, LimitedByKey: map[string]int64{}}
}

// Server is the mock provider. It is safe for concurrent use.
type Server struct {
	control *http.ServeMux

	mu    sync.Mutex
	opts  Options
	rng   *rand.Rand
	stats Stats
	// rows counts requests per row content, for fail=N and 429x=N. Only
	// bodies carrying those markers are counted, so it stays small.
	rows map[[32]byte]int
	// inFlight counts requests per model being served now.
	inFlight map[string]int64
	// requests are the requests recorded (Options.Record).
	requests []Request
	// windows are the API keys' rate windows (limits.go).
	windows map[string]*window

	// batches are the provider batches and files (batchapi.go).
	batches *batchAPI
}

var _ http.Handler = (*Server)(nil)

// New returns a server with the given options.
func New(opts Options) *Server {
	s := &Server{stats: newStats(), rows: map[[32]byte]int{}, inFlight: map[string]int64{}, windows: map[string]*window{}}
	s.SetOptions(opts)
	s.control = s.controlRoutes()
	s.batches = newBatchAPI(s)
	return s
}

// SetOptions replaces the options at run time. It re-seeds the RNG, so the
// failures after a SetOptions are repeatable whatever came before.
func (s *Server) SetOptions(o Options) {
	o = o.normalized()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts = o
	s.rng = newRNG(o.Seed)
}

func (s *Server) options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// Stats returns a copy of the counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Requests: s.stats.Requests,
		ByModel:  maps.Clone(s.stats.ByModel),
		ByPath:   maps.Clone(s.stats.ByPath),
		ByStatus: maps.Clone(s.stats.ByStatus),

		PeakInFlight: maps.Clone(s.stats.PeakInFlight),
		BatchRows:    maps.Clone(s.stats.BatchRows), BatchesCreated: s.stats.BatchesCreated, BatchCancels: s.stats.BatchCancels,
		ByKey: maps.Clone(s.stats.ByKey), LimitedByKey: maps.Clone(s.stats.LimitedByKey),
	}
}

// InFlight is how many requests of model are being served now.
func (s *Server) InFlight(model string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight[model]
}

// Reset zeroes the stats and the fail=N/429x=N counters and re-seeds the
// RNG, so one server can serve several independent runs.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = newStats()
	s.rows = map[[32]byte]int{}
	s.requests = nil
	s.windows = map[string]*window{}
	s.rng = newRNG(s.opts.Seed)
}

func newRNG(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), uint64(seed)))
}

// ServeHTTP serves the model routes and the /mock/ control routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/mock/") {
		s.control.ServeHTTP(w, r)
		return
	}
	if s.batches.serves(r.URL.Path) {
		s.batches.mux.ServeHTTP(w, r)
		return
	}
	s.serveModel(w, r)
}

// arrive counts a request and returns the options it will be served with,
// so a SetOptions in the middle of a request does not change its answer.
func (s *Server) arrive(path, model string) Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Requests++
	s.stats.ByPath[path]++
	if model != "" {
		s.stats.ByModel[model]++
	}
	if model != "" {
		s.inFlight[model]++
		s.stats.PeakInFlight[model] = max(s.stats.PeakInFlight[model], s.inFlight[model])
	}
	return s.opts
}

func (s *Server) leave(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if model != "" {
		s.inFlight[model]--
	}
}

func (s *Server) answered(status int, key string, limited bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.ByStatus[status]++
	if key != "" {
		s.stats.ByKey[key]++
		if limited {
			s.stats.LimitedByKey[key]++
		}
	}
}

// countRow returns how many requests for this row have arrived, this one
// included.
func (s *Server) countRow(key [32]byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[key]++
	return s.rows[key]
}

// roll draws once from the seeded RNG and returns 429, 500 or 0 (no failure).
func (s *Server) roll() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.rng.Float64()
	switch {
	case u < s.opts.RateLimitRate:
		return http.StatusTooManyRequests
	case u < s.opts.RateLimitRate+s.opts.ErrorRate:
		return http.StatusInternalServerError
	}
	return 0
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// An encoding error here means the client went away; nobody to tell.
	_ = json.NewEncoder(w).Encode(v)
}
