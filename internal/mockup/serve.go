package mockup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/backoff"
)

// maxBodyBytes bounds a request body; relay's own rows are far smaller.
const maxBodyBytes = 32 << 20

// statusClientGone is recorded, never sent, for a request whose client gave
// up before the answer (nginx's "client closed request").
const statusClientGone = 499

// shape is the wire dialect of a route: it decides the auth header and the
// error body.
type shape int

const (
	shapeOpenAI shape = iota
	shapeAnthropic
	// shapeBedrock is Amazon Bedrock's runtime: SigV4 or a bearer API key
	// (sigv4.go), AWS's error bodies and headers.
	shapeBedrock
)

type route struct {
	shape shape
	reply func(*request) object
	check func(*request) string // the route's own reasons for a 400
}

// bedrockInvoke is InvokeModel, POST /model/{modelId}/invoke, with an
// Anthropic Messages body as Bedrock takes it.
var bedrockInvoke = route{shapeBedrock, message, checkInvoke}

// lookupRoute finds the route of path and, for InvokeModel, the model id
// the path names.
func lookupRoute(path string) (rt route, model string, ok bool) {
	if rt, ok := routes[path]; ok {
		return rt, "", true
	}
	id, ok := strings.CutPrefix(path, "/model/")
	if id, ok = strings.CutSuffix(id, "/invoke"); ok && id != "" && !strings.Contains(id, "/") {
		return bedrockInvoke, id, true
	}
	return route{}, "", false
}

func checkInvoke(req *request) string {
	if _, ok := req.body["model"]; ok {
		return "extraneous key [model] is not permitted: InvokeModel names the model in its path"
	}
	if v := req.body["anthropic_version"]; v != "bedrock-2023-05-31" {
		return fmt.Sprintf("anthropic_version: %v is not bedrock-2023-05-31", v)
	}
	return ""
}

var routes = map[string]route{
	"/v1/chat/completions":   {shapeOpenAI, chatCompletion, nil},
	"/v1/embeddings":         {shapeOpenAI, embeddings, nil},
	"/v1/responses":          {shapeOpenAI, response, nil},
	"/v1/completions":        {shapeOpenAI, completion, nil},
	"/v1/moderations":        {shapeOpenAI, moderation, nil},
	"/v1/images/generations": {shapeOpenAI, imageGeneration, nil},
	"/v1/messages":           {shapeAnthropic, message, nil},
	// Bedrock's OpenAI-compatible Chat Completions.
	"/openai/v1/chat/completions": {shapeBedrock, chatCompletion, nil},
}

// request is one model request's body, parsed once.
type request struct {
	hash  string         // hex sha256 of the raw body; ids derive from it
	body  map[string]any // nil when err is set
	err   error          // why the body is not a JSON object
	model string
}

func parseRequest(raw []byte) *request {
	sum := sha256.Sum256(raw)
	req := &request{hash: hex.EncodeToString(sum[:])}
	req.body, req.err = decodeBody(raw)
	if req.err == nil && req.body == nil {
		req.err = errors.New("the body is null, not a JSON object")
	}
	req.model, _ = req.body["model"].(string)
	return req
}

// id is the suffix of every id in the answer: the same body, the same ids.
func (req *request) id() string { return req.hash[:24] }

// rowKey identifies a row across retries by what it says, not by the
// model it was sent to, so an attempt on a fallback model counts against
// the same fail=N budget.
func (req *request) rowKey() [32]byte {
	b, _ := json.Marshal([]any{req.body["messages"], req.body["input"], req.body["prompt"]})
	return sha256.Sum256(b)
}

// outcome is the answer to one model request: a success body, or an error
// status and message that serveModel puts in the route's shape.
type outcome struct {
	status  int
	body    object
	message string
	param   string
	awsType string    // on a Bedrock route: the exception, when not the status's
	rate    rateState // the key's rate limits (Options.RPM), for the headers
	key     string    // the API key (not on Bedrock routes)
}

func failure(status int, message, param string) outcome {
	return outcome{status: status, message: message, param: param}
}

// forced is a failure the mock was told to produce; the message says who
// told it, so a test that fails unexpectedly explains itself.
func forced(status int, why string) outcome {
	return failure(status, fmt.Sprintf("%s (mockup: %s)", statusMessage(status), why), "")
}

var clientGone = outcome{status: statusClientGone}

func (s *Server) serveModel(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	rt, pathModel, known := lookupRoute(r.URL.Path)
	req, readErr := readRequest(w, r)
	if pathModel != "" {
		req.model = pathModel
	}
	rec := newRecord(r, req)
	opts := s.arrive(r.URL.Path, req.model)
	defer s.leave(req.model)

	out := s.answer(r, rt, known, req, readErr, opts, arrived)
	s.answered(out.status, out.key, out.rate.overRequests || out.rate.overTokens)
	s.record(rec, req, out.status, opts)
	if out.status == statusClientGone {
		return
	}

	h := w.Header()
	h.Set("x-request-id", "req_"+req.id())
	switch rt.shape {
	case shapeAnthropic:
		h.Set("request-id", "req_"+req.id()) // what the Anthropic SDK reads
	case shapeBedrock:
		setBedrockHeaders(h, req, out)
	}
	setRateHeaders(h, rt.shape, out.rate, time.Now())
	// Bedrock sends no Retry-After: clients back off on their own.
	if out.status == http.StatusTooManyRequests && rt.shape != shapeBedrock {
		wait := opts.RetryAfter
		if out.rate.overRequests || out.rate.overTokens {
			wait = max(out.rate.retryAfter, time.Millisecond)
		}
		setRetryAfter(h, wait)
	}
	if out.body == nil {
		out.body = errorBody(rt.shape, out.status, out.message, out.param)
	}
	writeObject(w, out.status, out.body)
}

// readRequest reads and parses r's body, at most maxBodyBytes of it, as
// io.ReadAll and parseRequest would, into a buffer of the size the request
// announces; the buffer is reused, as parseRequest keeps none of it.
func readRequest(w http.ResponseWriter, r *http.Request) (*request, error) {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyBuffers.Put(buf)
		}
	}()
	buf.Grow(int(min(max(r.ContentLength, 0), maxBodyBytes)) + bytes.MinRead)
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	return parseRequest(buf.Bytes()), err
}

var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest body buffer kept for the next requests.
const maxPooledBody = 1 << 20

// answer decides the outcome, in the order documented on the package.
// Options.Latency runs from arrived, so reading and parsing the body
// take none of it.
func (s *Server) answer(r *http.Request, rt route, known bool, req *request, readErr error, opts Options, arrived time.Time) outcome {
	ctx := r.Context()
	if pause(ctx, opts.Latency-time.Since(arrived)) != nil {
		return clientGone
	}
	switch {
	case !known:
		return failure(http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), "")
	case r.Method != http.MethodPost:
		return failure(http.StatusMethodNotAllowed, fmt.Sprintf("Method %s not allowed on %s, use POST", r.Method, r.URL.Path), "")
	case rt.shape == shapeBedrock:
		if typ, msg := bedrockAuthProblem(r, opts.Region, time.Now()); typ != "" {
			return outcome{status: http.StatusForbidden, message: msg, awsType: typ}
		}
	case !authorized(r, rt.shape):
		return failure(http.StatusUnauthorized, missingKeyMessage[rt.shape], "")
	case slices.Contains(opts.RevokedKeys, keyOf(r)):
		return failure(http.StatusUnauthorized, fmt.Sprintf("Incorrect API key provided: …%s (mockup: Options.RevokedKeys)", tail(keyOf(r))), "")
	}
	out := s.answerKnown(r, rt, req, readErr, opts)
	if rt.shape != shapeBedrock {
		out.key = keyOf(r)
	}
	return out
}

// answerKnown answers an authorized request of a known route.
func (s *Server) answerKnown(r *http.Request, rt route, req *request, readErr error, opts Options) outcome {
	ctx := r.Context()
	if v := r.Header.Get("x-mock-status"); v != "" {
		status, err := parseStatus(v)
		if err != nil {
			return failure(http.StatusBadRequest, "x-mock-status: "+err.Error(), "")
		}
		return forced(status, "x-mock-status header")
	}
	if out, ok := validate(req, readErr); !ok {
		return out
	}
	if rt.check != nil {
		if msg := rt.check(req); msg != "" {
			return failure(http.StatusBadRequest, msg, "")
		}
	}

	var reply object
	var rate rateState
	if _, _, limited := opts.rateLimits(); limited && rt.shape != shapeBedrock {
		reply = rt.reply(req)
		rate = s.admit(keyOf(r), tokenCost(req, reply), opts, time.Now())
		if rate.overRequests || rate.overTokens {
			out := failure(http.StatusTooManyRequests, rate.limitMessage(keyOf(r)), "")
			out.rate = rate
			return out
		}
	}
	out := s.afterLimits(ctx, rt, req, reply)
	out.rate = rate
	return out
}

// afterLimits answers a request the rate limits admitted: its markers,
// then its reply (already made when the limits needed its tokens).
func (s *Server) afterLimits(ctx context.Context, rt route, req *request, reply object) outcome {
	m, err := findMarkers(req.body)
	if err != nil {
		return failure(http.StatusBadRequest, "mockup: "+err.Error(), "")
	}
	if m.hang {
		<-ctx.Done()
		return clientGone
	}
	if pause(ctx, m.sleep) != nil {
		return clientGone
	}
	if status, why := s.forcedStatus(req, m); status != 0 {
		return forced(status, why)
	}
	if reply == nil {
		reply = rt.reply(req)
	}
	return outcome{status: http.StatusOK, body: reply}
}

func (s *Server) forcedStatus(req *request, m markers) (int, string) {
	// Count before deciding, so every request for the row is one of the
	// "first N", whatever else makes it fail.
	arrival := 0
	if m.fail > 0 || m.rateLimit > 0 {
		arrival = s.countRow(req.rowKey())
	}
	switch {
	case m.status != 0:
		return m.status, fmt.Sprintf("[[mock:%d]] marker", m.status)
	case strings.HasSuffix(req.model, "-ratelimited"):
		return http.StatusTooManyRequests, "model name ends in -ratelimited"
	case strings.HasSuffix(req.model, "-broken"):
		return http.StatusInternalServerError, "model name ends in -broken"
	case m.fail > 0 && arrival <= m.fail:
		return http.StatusInternalServerError, fmt.Sprintf("[[mock:fail=%d]] marker, request %d", m.fail, arrival)
	case m.rateLimit > 0 && arrival <= m.rateLimit:
		return http.StatusTooManyRequests, fmt.Sprintf("[[mock:429x=%d]] marker, request %d", m.rateLimit, arrival)
	}
	if status := s.roll(); status != 0 {
		return status, "random failure rate"
	}
	return 0, ""
}

func validate(req *request, readErr error) (outcome, bool) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(readErr, &tooBig):
		return failure(http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body exceeds %d bytes", tooBig.Limit), ""), false
	case readErr != nil:
		return failure(http.StatusBadRequest, "Could not read the request body: "+readErr.Error(), ""), false
	case req.err != nil:
		return failure(http.StatusBadRequest, "We could not parse the JSON body of your request: "+req.err.Error(), ""), false
	case req.model == "":
		return failure(http.StatusBadRequest, "you must provide a model parameter", "model"), false
	case req.body["stream"] == true:
		return failure(http.StatusBadRequest, "stream: true is not supported by the mock provider", "stream"), false
	}
	return outcome{}, true
}

// authorized checks that credentials are present; their value is not
// checked. Anthropic takes x-api-key or a bearer token: anthropic-sdk-go v2
// sends even option.WithAPIKey as "Authorization: Bearer".
func authorized(r *http.Request, sh shape) bool {
	if sh == shapeAnthropic && strings.TrimSpace(r.Header.Get("x-api-key")) != "" {
		return true
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && strings.TrimSpace(token) != ""
}

var missingKeyMessage = map[shape]string{
	shapeOpenAI:    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
	shapeAnthropic: "x-api-key or Authorization: Bearer header is required",
}

// parseStatus accepts the statuses a test may force: errors only, since a
// forced 2xx would need a body the mock cannot invent.
func parseStatus(v string) (int, error) {
	status, err := strconv.Atoi(v)
	if err != nil || status < 400 || status > 599 {
		return 0, fmt.Errorf("%q is not an HTTP error status (400-599)", v)
	}
	return status, nil
}

// setRetryAfter writes Retry-After in seconds, fractional when need be,
// and retry-after-ms when seconds would lose precision; both official SDKs
// read retry-after-ms first.
func setRetryAfter(h http.Header, d time.Duration) {
	h.Set("Retry-After", strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
	if d%time.Second != 0 {
		h.Set("retry-after-ms", strconv.FormatInt(d.Milliseconds(), 10))
	}
}

// pause waits d or until the client gives up, whichever comes first.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return backoff.Sleep(ctx, d)
}
