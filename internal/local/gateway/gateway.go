// Package gateway emulates API Gateway's REST API with Lambda proxy
// integration for the local runtime: each HTTP request becomes the proxy
// event API Gateway would send, the api function's handler (apigw.Handler)
// runs it, and its answer goes back as API Gateway would send it, with
// Lambda's and API Gateway's size and time limits.
package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/relaybatch/relay/internal/apigw"
)

const (
	// lambdaPayloadBytes is Lambda's synchronous invocation payload limit,
	// for the request event and for a buffered response alike.
	lambdaPayloadBytes = 6 * 1024 * 1024
	// integrationTimeout is API Gateway's limit for a buffered integration.
	integrationTimeout = 29 * time.Second
	// streamTimeout is API Gateway's limit for a streamed response.
	streamTimeout = 15 * time.Minute
	// maxPreludeBytes bounds the JSON before the delimiter: it carries only
	// status and headers, so anything longer is a broken stream.
	maxPreludeBytes = 64 * 1024
)

// preludeDelimiter ends the JSON prelude of a streamed response.
var preludeDelimiter = make([]byte, 8)

// Front is the local runtime's front door: each HTTP request becomes the
// APIGatewayProxyRequest API Gateway would send, Invoke (normally
// apigw.Handler(api)) runs it, and the result is written back as API Gateway
// would: buffered, or streamed from the HTTP-integration prelude.
type Front struct {
	// Invoke is the Lambda handler; required.
	Invoke func(ctx context.Context, ev events.APIGatewayProxyRequest) (any, error)
	// MaxEventBytes is the largest event JSON Invoke may receive, and the
	// largest buffered response it may return: Lambda's 6 MiB payload limit
	// when 0.
	MaxEventBytes int
	// Timeout is the deadline of a buffered route: API Gateway's 29 s
	// integration timeout when 0. Streamed routes get 15 minutes.
	Timeout time.Duration
}

func (l *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	limit := l.MaxEventBytes
	if limit <= 0 {
		limit = lambdaPayloadBytes
	}
	// A body over the limit cannot fit in the event, so read no more of it.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeTooLarge(w, r.URL.Path, limit)
		return
	case err != nil:
		slog.WarnContext(r.Context(), "read request body", "path", r.URL.Path, "err", err)
		writeGatewayError(w, http.StatusBadRequest, "Bad request")
		return
	}

	ev := newEvent(r, body)
	size, err := deployedEventSize(ev, body)
	if err != nil {
		slog.ErrorContext(r.Context(), "encode proxy event", "path", r.URL.Path, "err", err)
		writeGatewayError(w, http.StatusInternalServerError, "Internal server error")
		return
	}
	if size > limit {
		writeTooLarge(w, r.URL.Path, limit)
		return
	}

	timeout := l.Timeout
	if timeout <= 0 {
		timeout = integrationTimeout
	}
	if apigw.Streamed(r.URL.Path) {
		timeout = streamTimeout
	}
	// The deadline also covers the stream: cancel runs when ServeHTTP ends.
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()

	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1) // buffered: a timed-out Invoke must not leak blocked
	go func() {
		defer func() {
			// Lambda reports a panicking function as an error; so do we.
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("invoke panicked: %v", p)}
			}
		}()
		v, err := l.Invoke(ctx, ev)
		done <- result{v, err}
	}()

	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		// A stream that comes too late must still be closed, or the
		// handler stays blocked writing into it.
		go func() {
			if c, ok := (<-done).v.(io.Closer); ok {
				c.Close()
			}
		}()
		if r.Context().Err() != nil {
			return // the client left; nobody to answer
		}
		writeGatewayError(w, http.StatusGatewayTimeout, "Endpoint request timed out")
		return
	}
	if res.err != nil {
		slog.ErrorContext(r.Context(), "lambda invocation failed", "path", r.URL.Path, "request_id", ev.RequestContext.RequestID, "err", res.err)
		writeGatewayError(w, http.StatusBadGateway, "Internal server error")
		return
	}
	if src, ok := res.v.(io.Reader); ok {
		writeStream(ctx, w, src)
		return
	}
	writeBuffered(r.Context(), w, res.v, limit)
}

// newEvent builds the event API Gateway sends for r.
func newEvent(r *http.Request, body []byte) events.APIGatewayProxyRequest {
	now := time.Now()
	ev := events.APIGatewayProxyRequest{
		Resource:   "/{proxy+}",
		Path:       r.URL.Path,
		HTTPMethod: r.Method,
		RequestContext: events.APIGatewayProxyRequestContext{
			AccountID:        "000000000000",
			APIID:            "local",
			Stage:            "local",
			DomainName:       r.Host,
			RequestID:        newRequestID(),
			Protocol:         r.Proto,
			Path:             r.URL.Path,
			HTTPMethod:       r.Method,
			RequestTime:      now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			RequestTimeEpoch: now.UnixMilli(),
			Identity: events.APIGatewayRequestIdentity{
				SourceIP:  sourceIP(r.RemoteAddr),
				UserAgent: r.UserAgent(),
			},
		},
	}
	// The deployed API has one resource per streamed route (where STREAM is
	// set) and a greedy proxy resource for everything else.
	if route, params, ok := apigw.StreamedRoute(r.URL.Path); ok {
		ev.Resource, ev.PathParameters = route, params
	} else if p := strings.TrimPrefix(r.URL.Path, "/"); p != "" {
		ev.PathParameters = map[string]string{"proxy": p}
	} else {
		ev.Resource = "/"
	}
	ev.RequestContext.ResourcePath = ev.Resource

	header := r.Header.Clone()
	if r.Host != "" {
		header.Set("Host", r.Host)
	}
	ev.Headers, ev.MultiValueHeaders = eventMaps(header)
	ev.QueryStringParameters, ev.MultiValueQueryStringParameters = eventMaps(r.URL.Query())

	if len(body) > 0 {
		if apigw.IsText(r.Header.Get("Content-Type")) && utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// deployedEventSize is the size of the event JSON Lambda would receive for
// this request in AWS. The deployed API sets binary media type */* (see
// infra/api.go), so there every body arrives base64-encoded, a third larger
// than the raw bytes, even a JSON body that Front passes as plain text.
func deployedEventSize(ev events.APIGatewayProxyRequest, body []byte) (int, error) {
	if len(body) > 0 {
		ev.Body = base64.StdEncoding.EncodeToString(body)
		ev.IsBase64Encoded = true
	}
	b, err := json.Marshal(ev)
	return len(b), err
}

// eventMaps fills the single- and multi-value maps of an event; like API
// Gateway, the single-value map keeps the last value, and both are nil when
// empty.
func eventMaps[M ~map[string][]string](m M) (map[string]string, map[string][]string) {
	if len(m) == 0 {
		return nil, nil
	}
	single := make(map[string]string, len(m))
	multi := make(map[string][]string, len(m))
	for k, vs := range m {
		if len(vs) == 0 {
			continue
		}
		single[k] = vs[len(vs)-1]
		multi[k] = slices.Clone(vs)
	}
	return single, multi
}

func sourceIP(remoteAddr string) string {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}

// newRequestID returns a random UUID, the form of API Gateway's request ids.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// writeBuffered sends a buffered result the way it reaches API Gateway: the
// Lambda runtime JSON-encodes whatever the handler returned, Lambda refuses a
// response over its payload limit, and API Gateway reads the JSON as a proxy
// response.
func writeBuffered(ctx context.Context, w http.ResponseWriter, v any, limit int) {
	// Encoded as aws-lambda-go does (no HTML escaping), so the size is the
	// one Lambda checks.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil {
		slog.ErrorContext(ctx, "encode lambda response", "err", err)
		writeGatewayError(w, http.StatusBadGateway, "Internal server error")
		return
	}
	if len(b) > limit {
		slog.ErrorContext(ctx, "buffered lambda response exceeds the payload limit; stream this route",
			"bytes", len(b), "limit", limit)
		writeGatewayError(w, http.StatusBadGateway, "Internal server error")
		return
	}
	var resp events.APIGatewayProxyResponse
	if err := json.Unmarshal(b, &resp); err != nil || resp.StatusCode == 0 {
		slog.ErrorContext(ctx, "malformed lambda proxy response", "err", err)
		writeGatewayError(w, http.StatusBadGateway, "Internal server error")
		return
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if body, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			slog.ErrorContext(ctx, "decode base64 lambda response body", "err", err)
			writeGatewayError(w, http.StatusBadGateway, "Internal server error")
			return
		}
	}
	apigw.MergeHeaders(w.Header(), resp.Headers, resp.MultiValueHeaders)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// prelude is the JSON head of a streamed response; multiValueHeaders is
// accepted too, as API Gateway's streaming format allows it.
type prelude struct {
	StatusCode        int                 `json:"statusCode"`
	Headers           map[string]string   `json:"headers"`
	MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
	Cookies           []string            `json:"cookies"`
}

// writeStream copies a streamed result to the client as it is produced,
// flushing each piece, so memory stays flat and the client sees bytes as
// soon as the handler writes them.
func writeStream(ctx context.Context, w http.ResponseWriter, src io.Reader) {
	if c, ok := src.(io.Closer); ok {
		// Closing unblocks the handler's pending write when the client
		// leaves or the 15-minute limit passes.
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
		defer c.Close()
	}
	br := bufio.NewReader(src)
	p, err := readPrelude(br)
	if err != nil {
		slog.ErrorContext(ctx, "read streamed response prelude", "err", err)
		writeGatewayError(w, http.StatusBadGateway, "Internal server error")
		return
	}
	apigw.MergeHeaders(w.Header(), p.Headers, p.MultiValueHeaders)
	for _, c := range p.Cookies {
		w.Header().Add("Set-Cookie", c)
	}
	if p.StatusCode == 0 {
		p.StatusCode = http.StatusOK
	}
	w.WriteHeader(p.StatusCode)

	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}
	buf := make([]byte, 32*1024)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client left
			}
			if werr := rc.Flush(); werr != nil {
				return
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			// The status is sent; aborting the connection is the only way
			// left to tell the client the body is incomplete.
			slog.ErrorContext(ctx, "streamed response failed", "err", err)
			panic(http.ErrAbortHandler)
		}
	}
}

func readPrelude(br *bufio.Reader) (prelude, error) {
	var head []byte
	for !bytes.HasSuffix(head, preludeDelimiter) {
		b, err := br.ReadByte()
		if err != nil {
			return prelude{}, fmt.Errorf("read prelude: %w", err)
		}
		if len(head) == maxPreludeBytes {
			return prelude{}, fmt.Errorf("no prelude delimiter in the first %d bytes", maxPreludeBytes)
		}
		head = append(head, b)
	}
	var p prelude
	if err := json.Unmarshal(head[:len(head)-len(preludeDelimiter)], &p); err != nil {
		return prelude{}, fmt.Errorf("decode prelude: %w", err)
	}
	return p, nil
}

// writeGatewayError answers as API Gateway itself does, outside the API's
// own error shapes.
func writeGatewayError(w http.ResponseWriter, status int, message string) {
	b, _ := json.Marshal(map[string]string{"message": message})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeTooLarge answers a request that cannot fit in one Lambda invocation,
// in the error shape of the API the client speaks.
func writeTooLarge(w http.ResponseWriter, path string, limit int) {
	var body any
	if strings.HasPrefix(path, "/v1/messages/") {
		// Anthropic's SDKs post a whole message batch inline.
		body = map[string]any{
			"type": "error",
			"error": map[string]string{
				"type": "request_too_large",
				"message": fmt.Sprintf("Request too large for one request: the encoded request must be at most %d bytes. "+
					"Split the requests into several smaller batches.", limit),
			},
		}
	} else {
		body = map[string]any{
			"error": map[string]any{
				"message": fmt.Sprintf("Request too large for one request: the encoded request must be at most %d bytes "+
					"(file data counts 4/3 of its size). Use the Uploads API (POST /v1/uploads) with parts of at most 4 MiB.", limit),
				"type":  "invalid_request_error",
				"param": nil,
				"code":  "request_too_large",
			},
		}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = w.Write(b)
}
