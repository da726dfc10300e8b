// Package provider owns the calls to model upstreams for one batch row: it
// routes body.model through the models file (README "Configuration"), refuses to send a row
// to a model of another request shape, rewrites the model name for the
// upstream, authenticates, and retries transient failures with backoff and a
// per-row fallback (docs/api.md "Output and error files"). Nothing is remembered between rows, so a rate
// limit that clears lets the next row use the requested model again.
//
// A Client is safe for concurrent use; the executor bounds concurrency.
package provider

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/ijson"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/ratelimit"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// DefaultMaxResponseBytes bounds an upstream answer's body when
// Client.MaxResponseBytes is zero (RELAY_MAX_RESPONSE_BYTES).
const DefaultMaxResponseBytes = 16 << 20

// errTooLarge is an answer cut at the cap (attempt.err).
var errTooLarge = errors.New("upstream answer over the size cap")

// errTimeLimit is a call Route.TimeLimit stopped.
var errTimeLimit = errors.New("call time limit")

// RefusedKey names, under a body's "relay" object, why the row was refused
// when its batch was created: the row comes back as an error with that
// message (CodeInvalidRequest) and is never sent. internal/anthropic writes such
// rows for message batch requests that Anthropic would accept and answer
// errored (docs/api.md "Anthropic Message Batches").
const RefusedKey = "refused"

// anthropicVersion is the API version the Anthropic shape is written against.
const anthropicVersion = "2023-06-01"

// defaultTimeout mirrors the models file default for a Model built by hand.
const defaultTimeout = 5 * time.Minute

// ShapeOf is the request shape an endpoint needs.
func ShapeOf(path string) (config.Provider, bool) {
	e, ok := endpoint.Lookup(path)
	return e.Shape, ok
}

// UsageOf reads the token usage from an upstream body answering endpoint.
// A body without usage (an error body, say) gives zeros.
func UsageOf(path string, body []byte) inference.Usage {
	u := gjson.GetBytes(body, "usage")
	if !u.IsObject() {
		return inference.Usage{}
	}
	e, ok := endpoint.Lookup(path)
	if !ok {
		e.Usage = endpoint.InputOutput
	}
	var in, out, cached, reasoning int64
	switch e.Usage {
	case endpoint.NoUsage:
		return inference.Usage{}
	case endpoint.PromptCompletion:
		in, out = u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int()
		cached = u.Get("prompt_tokens_details.cached_tokens").Int()
		reasoning = u.Get("completion_tokens_details.reasoning_tokens").Int()
	case endpoint.AnthropicUsage:
		// Anthropic leaves cached prompt tokens out of input_tokens, while
		// OpenAI's prompt_tokens includes them; adding them keeps a tenant's
		// input tokens comparable across providers. Cache reads are what
		// OpenAI calls cached tokens.
		cached = u.Get("cache_read_input_tokens").Int()
		in = u.Get("input_tokens").Int() + u.Get("cache_creation_input_tokens").Int() + cached
		out = u.Get("output_tokens").Int()
	default:
		in, out = u.Get("input_tokens").Int(), u.Get("output_tokens").Int()
		cached = u.Get("input_tokens_details.cached_tokens").Int()
		reasoning = u.Get("output_tokens_details.reasoning_tokens").Int()
	}
	total := u.Get("total_tokens").Int()
	if total == 0 {
		total = in + out
	}
	return inference.Usage{InputTokens: in, OutputTokens: out, TotalTokens: total, CachedTokens: cached, ReasoningTokens: reasoning}
}

// Client calls upstreams for rows, each through its provider's adapter
// (adapter.go). Its zero fields take defaults: a shared HTTP client, keys
// from the environment, the default Policy; without Credentials, bedrock
// models can only be called with an API key.
type Client struct {
	HTTP   *http.Client
	Models *config.Models
	Keys   KeySource
	Policy Policy
	// Credentials sign requests to Bedrock: the function's own.
	Credentials aws.CredentialsProvider
	// MaxResponseBytes caps an upstream answer's body (0:
	// DefaultMaxResponseBytes): the executor holds the answers of the rows
	// in flight, so this bounds its memory by bytes (docs/design.md
	// "Memory").
	MaxResponseBytes int64
	// Limits, if set, paces each model's rows to its keys' rate budgets
	// and holds its circuits and key pools (docs/design.md "Rate
	// budgets"); nil sends every row at once.
	Limits *ratelimit.Registry
}

// sharedHTTP is the one client every Client without its own uses, so all
// rows share one connection pool.
var sharedHTTP = sync.OnceValue(NewHTTPClient)

// NewHTTPClient returns a client tuned for many concurrent calls to a few
// hosts. It has no overall Timeout: each call is bounded by its model's
// timeout through the context, which a client-wide Timeout would override.
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ForceAttemptHTTP2 = true
	t.MaxIdleConns = 1024
	// The default of 2 idle connections per host would make every burst of
	// rows to the same upstream dial (and TLS handshake) again.
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Transport: t}
}

// Route is what a batch's row may run on: its own model and, when retries
// there are spent on a transient failure, a fallback: the model's own (the
// models file), else Fallback, the batch's fallback_model. Allowed, if set,
// is the batch's API key's allow-list (docs/api.md "Budgets, revocation and
// allow-lists"): a row of another model fails unsent, and a fallback
// outside it is never tried.
//
// A chunk's run defers the fallback (Defer): the row comes back failed with
// Result.FallbackTo, and runs later in a chunk of the fallback model, on
// that model's capacity, with On set to it (docs/design.md "Scheduling",
// fallback rows).
type Route struct {
	Fallback string
	Allowed  func(model string) bool
	// Defer names the fallback in the Result instead of calling it.
	Defer bool
	// On runs the row on this model, as its fallback: the row's own model
	// failed already, and a fallback has no fallback.
	On string
	// TimeLimit bounds each call by the model's call_time_limit instead of
	// its timeout, and a call past it ends the row, never retried, with
	// CodeRequestTimeLimit (workflow steps: docs/api.md "Workflow
	// records"). A failure before any answer is retried as ever.
	TimeLimit bool
}

// Allows reports whether the route's key may use model.
func (r Route) Allows(model string) bool { return r.Allowed == nil || r.Allowed(model) }

// Do runs one row against its model and, when retries there are spent on a
// transient failure, against a fallback (Route). body is the row's body,
// with "model".
func (c *Client) Do(ctx context.Context, endpoint string, body json.RawMessage, route Route) inference.Result {
	model, res, ok := c.route(endpoint, body)
	if !ok {
		return res
	}
	if !route.Allows(model.Name) {
		return inference.Result{Model: model.Name, RequestID: newRequestID(), ErrCode: inference.CodeModelNotAllowed,
			ErrMessage: fmt.Sprintf("model %q is not one the batch's API key may use", model.Name)}
	}
	var attempts int
	start := time.Now()
	if route.On != "" {
		fb, res, ok := c.fallbackOn(model, route)
		if !ok {
			return res
		}
		res, _ = c.onModel(ctx, fb, endpoint, body, route.TimeLimit, false, &attempts)
		res.Fallback, res.Attempts, res.Latency = true, attempts, time.Since(start)
		return res
	}
	_, hasFallback := FallbackFor(c.Models, model, route)
	res, exhausted := c.onModel(ctx, model, endpoint, body, route.TimeLimit, hasFallback, &attempts)
	if exhausted {
		if fb, ok := FallbackFor(c.Models, model, route); ok && route.Defer {
			res.FallbackTo = fb.Name
		} else if ok {
			res, _ = c.onModel(ctx, fb, endpoint, body, route.TimeLimit, false, &attempts)
			res.Fallback = true
		}
	}
	res.Attempts, res.Latency = attempts, time.Since(start)
	return res
}

// fallbackOn is the model route.On names, for a row of model m; when it
// may not take the row, the returned Result says why.
func (c *Client) fallbackOn(m config.Model, route Route) (config.Model, inference.Result, bool) {
	fail := func(code, format string, args ...any) (config.Model, inference.Result, bool) {
		res := errResult(code, fmt.Sprintf(format, args...))
		res.Model = route.On
		return config.Model{}, res, false
	}
	fb, ok := c.Models.Lookup(route.On)
	switch {
	case !ok:
		res := errResult(inference.CodeModelNotFound, fmt.Sprintf("the fallback model %q does not exist", route.On))
		return config.Model{}, res, false
	case fb.Shape != m.Shape:
		return fail(inference.CodeCrossShapeDispatch, "the fallback model %q is an %s model, the row's %q an %s one", fb.Name, fb.Shape, m.Name, m.Shape)
	case !route.Allows(fb.Name):
		return fail(inference.CodeModelNotAllowed, "model %q is not one the batch's API key may use", fb.Name)
	}
	return fb, inference.Result{}, true
}

// route finds the row's model and checks the endpoint fits its shape; when
// it does not, the returned Result says why.
func (c *Client) route(path string, body []byte) (config.Model, inference.Result, bool) {
	return route(c.Models, path, body, false)
}

// Refusal is the answer of a row of endpoint path with body that models
// refuse without an upstream call (a body refused at create, one naming a
// model of another shape: cross_shape_dispatch, …), and true; false when
// the row would be sent. The engine plans such rows into chunks that hold
// no capacity (docs/design.md "Scheduling", rows settled without a call).
//
// body is a row's body as internal/jsonl validated it (jsonl.Row.Body,
// jsonl.Request.Body): valid JSON without a duplicate member name, which
// Refusal does not check again; the plan asks it of every row.
func Refusal(models *config.Models, path string, body []byte) (inference.Result, bool) {
	_, res, ok := route(models, path, body, true)
	return res, !ok
}

// isObject says whether valid JSON is an object, without the copy of it
// gjson.ParseBytes makes: the plan asks it of every row (Refusal).
func isObject(valid []byte) bool {
	trimmed := bytes.TrimLeft(valid, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{'
}

// route is Client.route and Refusal; validated says body is valid JSON
// without a duplicate member name, which route checks otherwise.
func route(models *config.Models, path string, body []byte, validated bool) (config.Model, inference.Result, bool) {
	fail := func(code, format string, args ...any) (config.Model, inference.Result, bool) {
		return config.Model{}, errResult(code, fmt.Sprintf(format, args...)), false
	}
	if !(validated || gjson.ValidBytes(body)) || !isObject(body) {
		return fail(inference.CodeInvalidRequest, "the request body must be a JSON object")
	}
	if why := gjson.GetBytes(body, "relay."+RefusedKey); why.Type == gjson.String {
		return fail(inference.CodeInvalidRequest, "%s", why.Str)
	}
	// Validation refused such bodies; this keeps one that was never
	// validated (a replaced input object) from running a model other than
	// the one routed.
	if !validated {
		if err := ijson.Check(body); err != nil {
			return fail(inference.CodeInvalidRequest, "the request body has a %v", err)
		}
	}
	name := gjson.GetBytes(body, "model")
	if def := endpoint.DefaultModel(models, path); name.Type == gjson.Null && def != "" {
		// Validation let it through for the default (docs/api.md
		// "Batches"); onModel writes the model's upstream name in.
		name = gjson.Result{Type: gjson.String, Str: def}
	}
	if name.Type != gjson.String || name.Str == "" {
		return fail(inference.CodeInvalidRequest, "the request body must name a model")
	}
	shape, ok := ShapeOf(path)
	if !ok {
		return fail(inference.CodeInvalidRequest, "endpoint %s is not supported", path)
	}
	m, ok := models.Lookup(name.Str)
	if !ok {
		return fail(inference.CodeModelNotFound, "the model %q does not exist", name.Str)
	}
	var why string
	switch {
	case m.Shape != shape:
		// Translating between shapes would silently change what the
		// client asked for (docs/api.md "Batches"), so the row fails instead.
		why = fmt.Sprintf("endpoint %s takes %s requests but model %q is an %s model", path, shape, m.Name, m.Shape)
	case !served(m, path):
		why = fmt.Sprintf("endpoint %s is not served by %s, the provider of model %q", path, m.Provider, m.Name)
	default:
		return m, inference.Result{}, true
	}
	return config.Model{}, inference.Result{Model: m.Name, RequestID: newRequestID(), ErrCode: inference.CodeCrossShapeDispatch, ErrMessage: why}, false
}

// FallbackFor picks the first usable fallback of model m among models: the
// model's own, then the batch's. A fallback of another shape could not
// take the same body, and the model itself would only repeat the failure,
// so both are skipped; so is one the route's key may not use.
func FallbackFor(models *config.Models, m config.Model, route Route) (config.Model, bool) {
	for _, name := range []string{m.Fallback, route.Fallback} {
		if name == "" || name == m.Name || !route.Allows(name) {
			continue
		}
		fb, ok := models.Lookup(name)
		if ok && fb.Shape == m.Shape {
			return fb, true
		}
	}
	return config.Model{}, false
}

// onModel runs the retry loop on one model. exhausted reports that every
// attempt failed transiently, which is the only case worth a fallback: a
// permanent answer would be the same elsewhere, and a done ctx leaves no
// time for one. limited is Route.TimeLimit; fallback says the row has a
// fallback to go to, so an open circuit sends it there at once.
//
// With Limits set, each attempt goes on a key of the model's pool picked
// by headroom, once that key's circuit, concurrency, pacers and shared
// budget let it (docs/design.md "Rate budgets"): the wait spends no
// attempt, and a key answering 401/403 is dropped and the attempt made
// again on another.
func (c *Client) onModel(ctx context.Context, m config.Model, endpoint string, body []byte, limited, fallback bool, attempts *int) (res inference.Result, exhausted bool) {
	payload, err := body, error(nil)
	if v := gjson.GetBytes(body, "model"); v.Type != gjson.String || v.Str != m.Upstream() {
		// A body that names the upstream's model already (most rows) is
		// sent as it is: a copy of kilobytes for nothing, per row.
		payload, err = sjson.SetBytes(body, "model", m.Upstream())
	}
	if err != nil {
		return errResult(inference.CodeInvalidRequest, fmt.Sprintf("set model: %v", err)), false
	}
	var pool *ratelimit.Pool
	if c.Limits != nil {
		pool = c.Limits.For(m)
	}
	cost := estimate(payload)
	ad := c.adapterFor(m)
	p := c.Policy.withDefaults()
	// answer is the last HTTP answer on this model: when time runs out it
	// says more than the timeout that cut the last attempt short.
	var answer *inference.Result
	for n := 1; ; n++ {
		if ctx.Err() != nil {
			return stopped(answer, m.Name, ctx.Err()), false
		}
		env := m.KeyEnvs()[0]
		var up *ratelimit.Upstream
		var ticket *ratelimit.Ticket
		if pool != nil {
			var ok bool
			if up, ok = pool.Pick(cost); !ok {
				return keyless(answer, m.Name), false
			}
			env = up.Env
			ticket, err = up.Wait(ctx, cost, fallback)
			if errors.Is(err, ratelimit.ErrOpen) {
				res := errResult(inference.CodeConnectionError, fmt.Sprintf("model %q: %v", m.Name, err))
				res.Model = m.Name
				return *cmp.Or(answer, &res), true
			}
			if err != nil {
				return stopped(answer, m.Name, err), false
			}
		}
		key, err := c.keys().Key(ctx, env)
		if err != nil {
			if ticket != nil {
				ticket.Cancel()
			}
			res = errResult(inference.CodeAPIKeyUnavailable, fmt.Sprintf("api key for model %q: %v", m.Name, err))
			res.Model = m.Name
			return res, false
		}
		*attempts++
		a := c.send(ctx, m, ad, endpoint, payload, key, limited)
		if ticket != nil {
			if ctx.Err() != nil {
				ticket.Cancel()
			} else {
				ticket.Done(a.outcome())
			}
		}
		if a.unauthenticated {
			res = errResult(inference.CodeAPIKeyUnavailable, fmt.Sprintf("credentials for model %q: %v", m.Name, a.err))
			res.Model = m.Name
			return res, false
		}
		last := a.result(m)
		if a.err == nil {
			answer = &last
		}
		if ctx.Err() != nil {
			// Whatever this attempt got, no retry may outlive the caller.
			return stopped(answer, m.Name, ctx.Err()), false
		}
		if pool != nil && (a.status == http.StatusUnauthorized || a.status == http.StatusForbidden) && pool.Drop(up, a.status) {
			// Another key works: the row moves to it, this attempt not
			// counted (docs/design.md "Rate budgets", key pools).
			*attempts--
			n--
			continue
		}
		if !a.transient {
			return last, false
		}
		if n >= p.MaxAttempts {
			if answer != nil {
				return *answer, true
			}
			return last, true
		}
		d := p.delay(n, retryAfter(a.header, time.Now()))
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
			return stopped(answer, m.Name, context.DeadlineExceeded), false
		}
		slog.DebugContext(ctx, "retrying upstream call", "model", m.Name, "attempt", n, "status", a.status, "error", a.err, "delay", d)
		if err := p.Sleep(ctx, d); err != nil {
			return stopped(answer, m.Name, err), false
		}
	}
}

// keyless is the Result of a row whose model has no key left: the last
// answer (the 401 that dropped the last key but one, say).
func keyless(answer *inference.Result, model string) inference.Result {
	if answer != nil {
		return *answer
	}
	res := errResult(inference.CodeAPIKeyUnavailable, fmt.Sprintf("model %q: every key of its pool was refused by the upstream", model))
	res.Model = model
	return res
}

// estimate is a row's token cost before it is sent: a token per 4 bytes
// of its body and the output it may ask for (max_tokens and its
// variants); usage corrects it after (docs/design.md "Rate budgets").
func estimate(payload []byte) ratelimit.Cost {
	var out int64
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if v := gjson.GetBytes(payload, k); v.Type == gjson.Number {
			out = max(out, v.Int())
		}
	}
	return ratelimit.Cost{Input: int64(len(payload)+3) / 4, Output: out}
}

// outcome is what the limits learn from an attempt.
func (a attempt) outcome() ratelimit.Outcome {
	o := ratelimit.Outcome{Status: a.status, Header: a.header, Input: a.usage.InputTokens, Output: a.usage.OutputTokens}
	o.Failed = a.err != nil || a.status >= 500 && a.status != 529 && a.status != http.StatusServiceUnavailable
	if a.status == http.StatusTooManyRequests {
		o.RetryAfter = retryAfter(a.header, time.Now())
	}
	return o
}

// stopped is the Result of a row whose context ended: the last HTTP answer
// if there was one, else a code saying why it stopped.
func stopped(answer *inference.Result, model string, cause error) inference.Result {
	if answer != nil {
		return *answer
	}
	code := inference.CodeRequestTimeout
	if errors.Is(cause, context.Canceled) {
		code = inference.CodeRequestCancelled
	}
	res := errResult(code, fmt.Sprintf("model %q: stopped before the upstream answered: %v", model, cause))
	res.Model = model
	return res
}

func (c *Client) keys() KeySource {
	if c.Keys == nil {
		return EnvKeys{}
	}
	return c.Keys
}

func (c *Client) http() *http.Client {
	if c.HTTP == nil {
		return sharedHTTP()
	}
	return c.HTTP
}

// attempt is what one upstream call came back with: an answer (status,
// header, the adapter's reading of its body) or, when there was none, err.
type attempt struct {
	status    int
	header    http.Header
	body      []byte
	usage     inference.Usage
	transient bool // worth another attempt
	err       error
	timedOut  bool // the per-call timeout, not the caller, ended it
	// unauthenticated: the request could not be given its credentials,
	// which no retry mends.
	unauthenticated bool
}

func (c *Client) send(ctx context.Context, m config.Model, ad adapter, endpoint string, payload []byte, key string, limited bool) attempt {
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	if limited {
		timeout = cmp.Or(m.CallTimeLimit, config.DefaultCallTimeLimit)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := ad.request(callCtx, m, endpoint, payload)
	if err != nil {
		return attempt{err: fmt.Errorf("build request for model %q: %w", m.Name, err)}
	}
	setRunHeaders(ctx, req.Header)
	if err := ad.authenticate(callCtx, req, m, key); err != nil {
		return attempt{err: err, unauthenticated: true}
	}
	url := req.URL.Redacted()
	resp, err := c.http().Do(req)
	if err == nil {
		limit := cmp.Or(c.MaxResponseBytes, DefaultMaxResponseBytes)
		buf := readBufs.Get().(*bytes.Buffer)
		defer putReadBuf(buf)
		_, err = buf.ReadFrom(io.LimitReader(resp.Body, limit+1))
		body := buf.Bytes()
		resp.Body.Close()
		if err == nil && int64(len(body)) > limit {
			return attempt{status: resp.StatusCode, err: fmt.Errorf("%w: more than %d bytes from %s", errTooLarge, limit, url)}
		}
		if err == nil {
			a := attempt{status: resp.StatusCode, header: resp.Header}
			body, a.transient = ad.classify(m, endpoint, resp.StatusCode, resp.Header, body)
			a.body = jsonBody(resp.StatusCode, body)
			a.usage = ad.usage(endpoint, resp.Header, a.body)
			return a
		}
		err = fmt.Errorf("read response from %s: %w", url, err)
	}
	// Only the call's own deadline makes this a timeout; the caller's
	// deadline or cancel is reported by the retry loop.
	timedOut := ctx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded)
	if timedOut && limited {
		return attempt{err: fmt.Errorf("%w: the call passed its call_time_limit of %s", errTimeLimit, timeout), timedOut: true}
	}
	return attempt{err: err, timedOut: timedOut, transient: Transient(0, err)}
}

// readBufs are the buffers answers are read into. What an answer keeps of
// its body, jsonBody copies, so a buffer serves the next answer where
// io.ReadAll would grow a new one from 512 bytes for each, copying a body
// of kilobytes several times.
var readBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledRead is the largest buffer kept for the next answer: a rare
// answer of megabytes is not held on to.
const maxPooledRead = 1 << 20

func putReadBuf(b *bytes.Buffer) {
	if b.Cap() <= maxPooledRead {
		b.Reset()
		readBufs.Put(b)
	}
}

func (a attempt) result(m config.Model) inference.Result {
	if a.err != nil {
		code := inference.CodeConnectionError
		msg := fmt.Sprintf("model %q: %v", m.Name, a.err)
		switch {
		case errors.Is(a.err, errTimeLimit):
			code, msg = inference.CodeRequestTimeLimit, fmt.Sprintf("%s: model %q: %v; stopped, not retried, not billed", inference.CodeRequestTimeLimit, m.Name, a.err)
		case a.timedOut:
			code = inference.CodeRequestTimeout
		case errors.Is(a.err, errTooLarge):
			code = inference.CodeResponseTooLarge
		}
		return inference.Result{Model: m.Name, RequestID: newRequestID(), ErrCode: code, ErrMessage: msg}
	}
	return inference.Result{
		StatusCode: a.status,
		Body:       a.body,
		Compact:    true, // jsonBody's
		RequestID:  requestID(a.header),
		Usage:      a.usage,
		Model:      m.Name,
	}
}

// maxWrappedText bounds the text kept from a non-JSON body (an HTML error
// page from a proxy, say): enough to diagnose, small enough for a JSONL line.
const maxWrappedText = 2048

// jsonBody returns b as JSON on one line, so it can sit inside a JSONL
// line, or wraps a non-JSON body as an error object the client can read;
// either way a copy, as b is a read buffer the next answer reuses
// (readBufs). A valid body already on one line (a JSON string holds no raw
// line break) is kept as it is: json.Compact's scan of every byte was much
// of the CPU a row costs the executor (docs/design.md "Chunk size"); a
// body on several lines, as some providers indent theirs, is compacted.
func jsonBody(status int, b []byte) json.RawMessage {
	if t := bytes.TrimSpace(b); bytes.IndexByte(t, '\n') < 0 && bytes.IndexByte(t, '\r') < 0 && ijson.Valid(t) {
		return bytes.Clone(t)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		return buf.Bytes()
	}
	text := strings.TrimSpace(string(b))
	if text == "" {
		text = http.StatusText(status)
	}
	if len(text) > maxWrappedText {
		text = text[:maxWrappedText]
	}
	buf.Reset()
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // HTML error pages are the usual case; keep them readable
	enc.Encode(map[string]any{"error": map[string]string{"message": text}})
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func requestID(h http.Header) string {
	for _, k := range []string{"x-request-id", "request-id", "x-amzn-requestid"} {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return newRequestID()
}

func newRequestID() string { return "req_" + strings.ToLower(rand.Text()) }

func errResult(code, msg string) inference.Result {
	return inference.Result{RequestID: newRequestID(), ErrCode: code, ErrMessage: msg}
}
