// Package apigw owns the boundary between API Gateway and the service's
// net/http handler. In AWS the API is a REST API with Lambda proxy
// integration: Handler turns each proxy event into an *http.Request and the
// handler's answer into a buffered proxy response or, for StreamedRoutes, a
// response stream. The local runtime's HTTP front door (internal/local/gateway)
// turns each request into the same proxy event and calls the same Handler,
// so what runs locally is the code path that runs in AWS.
package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// StreamedRoutes are served with response streaming: their bodies have no
// size limit (file content, batch results), which a buffered Lambda response
// (6 MB) cannot carry. The CDK app sets ResponseTransferMode STREAM on exactly
// these resources, so this list is the single source of truth for both.
var StreamedRoutes = []string{
	"/v1/files/{id}/content",
	"/v1/batches/{id}/results",
	"/v1/messages/batches/{id}/results",
}

// Streamed reports whether path is one of StreamedRoutes, where a {param}
// segment matches any non-empty segment. The route template itself matches,
// so an event's Resource can be passed as well as its Path.
func Streamed(path string) bool {
	_, _, ok := StreamedRoute(path)
	return ok
}

// StreamedRoute returns the StreamedRoutes template that path matches and its
// path parameters, as API Gateway would fill them for that resource.
func StreamedRoute(path string) (route string, params map[string]string, ok bool) {
	segs := strings.Split(path, "/")
	for _, route := range StreamedRoutes {
		if params, ok := matchRoute(strings.Split(route, "/"), segs); ok {
			return route, params, true
		}
	}
	return "", nil, false
}

func matchRoute(route, segs []string) (map[string]string, bool) {
	if len(route) != len(segs) {
		return nil, false
	}
	params := map[string]string{}
	for i, r := range route {
		if name, ok := strings.CutPrefix(r, "{"); ok && strings.HasSuffix(name, "}") {
			if segs[i] == "" {
				return nil, false
			}
			params[strings.TrimSuffix(name, "}")] = segs[i]
			continue
		}
		if r != segs[i] {
			return nil, false
		}
	}
	return params, true
}

// Request converts a proxy event into the *http.Request that net/http would
// have built for the same client request.
func Request(ctx context.Context, ev events.APIGatewayProxyRequest) (*http.Request, error) {
	if ev.HTTPMethod == "" {
		// net/http would read it as GET; API Gateway always names one.
		return nil, fmt.Errorf("proxy event for %q has no HTTP method", ev.Path)
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return nil, fmt.Errorf("decode base64 body of %s %s: %w", ev.HTTPMethod, ev.Path, err)
		}
		body = b
	}

	path := ev.Path
	if path == "" {
		path = "/"
	}
	u := &url.URL{Path: path, RawQuery: eventQuery(ev).Encode()}
	r, err := http.NewRequestWithContext(ctx, ev.HTTPMethod, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request for %s %s: %w", ev.HTTPMethod, ev.Path, err)
	}
	r.RequestURI = u.RequestURI()
	r.Header = eventHeader(ev)
	// net/http promotes Host out of the header map; handlers expect the same.
	r.Host = r.Header.Get("Host")
	r.Header.Del("Host")
	r.RemoteAddr = ev.RequestContext.Identity.SourceIP
	// The request id is API Gateway's, never the client's: it goes into
	// logs and 500 bodies (SECURITY.md "Errors and logs"). A client's own
	// X-Request-Id is kept apart, cleaned, for the logs to name.
	client := clientRequestID(r.Header.Get("X-Request-Id"))
	r.Header.Del("X-Request-Id")
	r.Header.Del(ClientRequestIDHeader)
	if ev.RequestContext.RequestID != "" {
		r.Header.Set("X-Request-Id", ev.RequestContext.RequestID)
	}
	if client != "" {
		r.Header.Set(ClientRequestIDHeader, client)
	}
	// The stage ("/prod") is in the client's path but not in ev.Path;
	// handlers that build absolute URLs need it.
	if prefix, ok := strings.CutSuffix(ev.RequestContext.Path, ev.Path); ok && prefix != "" {
		r.Header.Set("X-Forwarded-Prefix", prefix)
	}
	return r, nil
}

// ClientRequestIDHeader carries, on the request a handler gets, the
// X-Request-Id a client sent (clientRequestID): the handler may log it
// as client_request_id, never as the request's id.
const ClientRequestIDHeader = "X-Client-Request-Id"

// maxClientRequestID bounds the client's id in a log line.
const maxClientRequestID = 128

// clientRequestID is id cut to maxClientRequestID bytes, every byte other
// than a letter, digit, '.', '_' or '-' replaced by '_'.
func clientRequestID(id string) string {
	b := []byte(id[:min(len(id), maxClientRequestID)])
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// eventQuery prefers the multi-value map: the single-value one keeps only the
// last value of a repeated parameter.
func eventQuery(ev events.APIGatewayProxyRequest) url.Values {
	q := url.Values{}
	if len(ev.MultiValueQueryStringParameters) > 0 {
		for k, vs := range ev.MultiValueQueryStringParameters {
			q[k] = append(q[k], vs...)
		}
		return q
	}
	for k, v := range ev.QueryStringParameters {
		q.Set(k, v)
	}
	return q
}

func eventHeader(ev events.APIGatewayProxyRequest) http.Header {
	h := http.Header{}
	if len(ev.MultiValueHeaders) > 0 {
		for k, vs := range ev.MultiValueHeaders {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
		return h
	}
	for k, v := range ev.Headers {
		h.Set(k, v)
	}
	return h
}

// Handler adapts h to a Lambda handler for API Gateway REST proxy events.
// Buffered routes get an events.APIGatewayProxyResponse; streamed routes get
// an *events.LambdaFunctionURLStreamingResponse, which the Lambda runtime
// (built with -tags lambda.norpc) sends as the HTTP-integration prelude and
// body that API Gateway's STREAM transfer mode reads.
//
// The choice follows ev.Resource when it is set: API Gateway invokes the
// streaming API only for resources configured with STREAM, and answering a
// buffered integration with a stream would be a malformed response.
func Handler(h http.Handler) func(ctx context.Context, req events.APIGatewayProxyRequest) (any, error) {
	return func(ctx context.Context, ev events.APIGatewayProxyRequest) (any, error) {
		r, err := Request(ctx, ev)
		if err != nil {
			return nil, err
		}
		route := ev.Resource
		if route == "" {
			route = ev.Path
		}
		if Streamed(route) {
			return serveStreamed(ctx, h, r)
		}
		return serveBuffered(ctx, h, r), nil
	}
}

// internalError is the body of a handler panic: OpenAI's error shape and no
// detail, which goes to the log instead. The request id is in X-Request-Id.
const internalError = `{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`

func serveBuffered(ctx context.Context, h http.Handler, r *http.Request) (resp events.APIGatewayProxyResponse) {
	w := &bufferedWriter{responseHeader: newResponseHeader(r)}
	defer func() {
		// The Lambda runtime would recover too, but then exit the process.
		if p := recover(); p != nil {
			logPanic(ctx, r, p)
			resp = proxyResponse(http.StatusInternalServerError, errorHeader(r), []byte(internalError))
		}
	}()
	h.ServeHTTP(w, r)
	w.commit(nil)
	return proxyResponse(w.status, w.sent, w.body.Bytes())
}

// proxyResponse puts every header in MultiValueHeaders, and the single-valued
// ones in Headers too for readers that look only there; API Gateway merges
// the two maps without duplicating a value present in both.
func proxyResponse(status int, header http.Header, body []byte) events.APIGatewayProxyResponse {
	resp := events.APIGatewayProxyResponse{
		StatusCode:        status,
		Headers:           map[string]string{},
		MultiValueHeaders: map[string][]string{},
	}
	for k, vs := range header {
		resp.MultiValueHeaders[k] = vs
		if len(vs) == 1 {
			resp.Headers[k] = vs[0]
		}
	}
	switch {
	case len(body) == 0:
	case IsText(header.Get("Content-Type")) && utf8.Valid(body):
		resp.Body = string(body)
	default:
		// Binary bodies survive JSON only as base64; invalid UTF-8 in a JSON
		// string would be replaced, not preserved.
		resp.Body = base64.StdEncoding.EncodeToString(body)
		resp.IsBase64Encoded = true
	}
	return resp
}

// IsText reports whether a body of this content type travels as a plain
// string in a proxy event or response.
func IsText(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+json"):
		return true
	}
	switch mt {
	case "application/json", "application/jsonl", "application/x-ndjson":
		return true
	}
	return false
}

func serveStreamed(ctx context.Context, h http.Handler, r *http.Request) (any, error) {
	pr, pw := io.Pipe()
	w := &streamWriter{responseHeader: newResponseHeader(r), pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				logPanic(ctx, r, p)
				if w.committed {
					// The status is gone; an error ends the stream so the client
					// sees a failed response rather than a short, complete one.
					pw.CloseWithError(fmt.Errorf("handler panicked: %v", p))
					return
				}
				w.header = errorHeader(r)
				w.status = http.StatusInternalServerError
				_, _ = w.Write([]byte(internalError))
			}
			w.Flush()
			pw.Close()
		}()
		h.ServeHTTP(w, r)
	}()

	// API Gateway starts the client response when the prelude arrives, so the
	// prelude waits for the status and headers, and only for them.
	select {
	case <-w.ready:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		return nil, fmt.Errorf("stream %s: no response headers before the invocation ended: %w", r.URL.Path, ctx.Err())
	}
	resp := &events.LambdaFunctionURLStreamingResponse{
		StatusCode: w.status,
		Headers:    map[string]string{},
		Body:       pr,
	}
	for k, vs := range w.sent {
		if k == "Set-Cookie" {
			resp.Cookies = vs
			continue
		}
		// The prelude's headers map has one string per name.
		resp.Headers[k] = strings.Join(vs, ", ")
	}
	return resp, nil
}

func logPanic(ctx context.Context, r *http.Request, p any) {
	if p == http.ErrAbortHandler { // net/http's deliberate, silent abort
		return
	}
	slog.ErrorContext(ctx, "api handler panicked",
		"panic", p,
		"method", r.Method,
		"path", r.URL.Path,
		"request_id", r.Header.Get("X-Request-Id"),
		"client_request_id", r.Header.Get(ClientRequestIDHeader),
		"stack", string(debug.Stack()))
}

func errorHeader(r *http.Request) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	if id := r.Header.Get("X-Request-Id"); id != "" {
		h.Set("X-Request-Id", id)
		h.Set("Request-Id", id)
	}
	return h
}

// responseHeader holds what net/http's ResponseWriter does about headers: the
// status and header map are fixed when the first byte of the body is written
// (or on Flush, or when the handler returns), later changes are ignored, and
// a missing Content-Type is sniffed from the first bytes.
type responseHeader struct {
	header    http.Header
	requestID string
	status    int
	committed bool
	sent      http.Header
}

func newResponseHeader(r *http.Request) responseHeader {
	return responseHeader{header: http.Header{}, requestID: r.Header.Get("X-Request-Id")}
}

func (w *responseHeader) Header() http.Header { return w.header }

func (w *responseHeader) WriteHeader(code int) {
	// 1xx responses are interim; the final status comes later.
	if w.committed || w.status != 0 || (code >= 100 && code < 200) {
		return
	}
	w.status = code
}

// commit fixes the status and headers; it reports whether this call did.
func (w *responseHeader) commit(firstBytes []byte) bool {
	if w.committed {
		return false
	}
	w.committed = true
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.sent = w.header.Clone()
	if _, set := w.sent["Content-Type"]; !set && len(firstBytes) > 0 {
		w.sent.Set("Content-Type", http.DetectContentType(firstBytes))
	}
	// The SDKs surface the request id to callers for support requests:
	// OpenAI's read x-request-id, Anthropic's request-id.
	if w.sent.Get("X-Request-Id") == "" && w.requestID != "" {
		w.sent.Set("X-Request-Id", w.requestID)
	}
	if w.sent.Get("Request-Id") == "" && w.sent.Get("X-Request-Id") != "" {
		w.sent.Set("Request-Id", w.sent.Get("X-Request-Id"))
	}
	return true
}

type bufferedWriter struct {
	responseHeader
	body bytes.Buffer
}

func (w *bufferedWriter) Write(p []byte) (int, error) {
	w.commit(p)
	return w.body.Write(p)
}

// Flush exists so handlers that flush work unchanged on buffered routes.
func (w *bufferedWriter) Flush() { w.commit(nil) }

type streamWriter struct {
	responseHeader
	pw    *io.PipeWriter
	ready chan struct{} // closed once status and headers are fixed
}

func (w *streamWriter) Write(p []byte) (int, error) {
	if w.commit(p) {
		close(w.ready)
	}
	// The pipe has no buffer: this returns once the reader has taken p,
	// which is what keeps memory flat for bodies of any size.
	return w.pw.Write(p)
}

func (w *streamWriter) Flush() {
	if w.commit(nil) {
		close(w.ready)
	}
}

// MergeHeaders merges a proxy response's two header maps as API Gateway
// does: all multi-value entries, plus single-value entries not already among
// them. The local gateway (internal/local/gateway) answers with it.
func MergeHeaders(dst http.Header, single map[string]string, multi map[string][]string) {
	for k, vs := range multi {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
	for k, v := range single {
		if !slices.Contains(dst.Values(k), v) {
			dst.Add(k, v)
		}
	}
}
