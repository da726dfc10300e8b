package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

// received is what a handler saw, so tests can compare it with what was sent.
type received struct {
	Method     string      `json:"method"`
	Path       string      `json:"path"`
	Query      url.Values  `json:"query"`
	Header     http.Header `json:"header"`
	Host       string      `json:"host"`
	RemoteAddr string      `json:"remote_addr"`
	Body       []byte      `json:"body"`
}

// echo answers with what it received.
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(received{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header,
		Host: r.Host, RemoteAddr: r.RemoteAddr, Body: body,
	})
}

func TestStreamed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		want bool
	}{
		{"/v1/files/file-abc/content", true},
		{"/v1/batches/batch_1/results", true},
		{"/v1/messages/batches/msgbatch_1/results", true},
		{"/v1/files/{id}/content", true}, // an event's Resource
		{"/v1/files/file-abc", false},
		{"/v1/files//content", false},
		{"/v1/files/file-abc/content/", false},
		{"/v1/batches/batch_1", false},
		{"/{proxy+}", false},
		{"/", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			if got := Streamed(tt.path); got != tt.want {
				t.Errorf("Streamed(%q) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

func TestRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		ev        events.APIGatewayProxyRequest
		wantURL   string
		wantQuery url.Values
		wantHdr   http.Header
		wantHost  string
		wantBody  string
	}{
		{
			name: "multi-value maps win over single-value ones",
			ev: events.APIGatewayProxyRequest{
				HTTPMethod:                      "GET",
				Path:                            "/v1/files",
				QueryStringParameters:           map[string]string{"purpose": "batch_output"},
				MultiValueQueryStringParameters: map[string][]string{"purpose": {"batch", "batch_output"}},
				Headers:                         map[string]string{"x-tag": "b", "Host": "api.example.com"},
				MultiValueHeaders:               map[string][]string{"x-tag": {"a", "b"}, "Host": {"api.example.com"}},
				RequestContext:                  events.APIGatewayProxyRequestContext{RequestID: "req-1"},
			},
			wantURL:   "/v1/files?purpose=batch&purpose=batch_output",
			wantQuery: url.Values{"purpose": {"batch", "batch_output"}},
			wantHdr:   http.Header{"X-Tag": {"a", "b"}, "X-Request-Id": {"req-1"}},
			wantHost:  "api.example.com",
		},
		{
			name: "single-value maps alone",
			ev: events.APIGatewayProxyRequest{
				HTTPMethod:            "GET",
				Path:                  "/v1/files",
				QueryStringParameters: map[string]string{"limit": "2", "q": "a b&c"},
				Headers:               map[string]string{"x-tag": "b", "X-Request-Id": "from-client"},
				RequestContext:        events.APIGatewayProxyRequestContext{RequestID: "req-2"},
			},
			wantURL:   "/v1/files?limit=2&q=a+b%26c",
			wantQuery: url.Values{"limit": {"2"}, "q": {"a b&c"}},
			// The request id is the service's; the client's is kept apart.
			wantHdr: http.Header{"X-Tag": {"b"}, "X-Request-Id": {"req-2"}, "X-Client-Request-Id": {"from-client"}},
		},
		{
			name: "a client's request id is capped and sanitized, never the request's",
			ev: events.APIGatewayProxyRequest{
				HTTPMethod: "GET",
				Path:       "/v1/files",
				Headers: map[string]string{"X-Request-Id": "evil\n{\"level\":\"ERROR\"} " + strings.Repeat("x", 300),
					"X-Client-Request-Id": "forged"},
				RequestContext: events.APIGatewayProxyRequestContext{RequestID: "req-3"},
			},
			wantURL:   "/v1/files",
			wantQuery: url.Values{},
			wantHdr:   http.Header{"X-Request-Id": {"req-3"}, "X-Client-Request-Id": {"evil___level___ERROR___" + strings.Repeat("x", 105)}},
		},
		{
			name: "a client's forged X-Client-Request-Id alone is dropped",
			ev: events.APIGatewayProxyRequest{
				HTTPMethod:     "GET",
				Path:           "/v1/files",
				Headers:        map[string]string{"X-Client-Request-Id": "forged"},
				RequestContext: events.APIGatewayProxyRequestContext{RequestID: "req-4"},
			},
			wantURL:   "/v1/files",
			wantQuery: url.Values{},
			wantHdr:   http.Header{"X-Request-Id": {"req-4"}},
		},
		{
			name: "base64 body",
			ev: events.APIGatewayProxyRequest{
				HTTPMethod:      "POST",
				Path:            "/v1/uploads/upload_1/parts",
				Body:            base64.StdEncoding.EncodeToString([]byte("\x00\xffpart")),
				IsBase64Encoded: true,
			},
			wantURL:   "/v1/uploads/upload_1/parts",
			wantQuery: url.Values{},
			wantHdr:   http.Header{},
			wantBody:  "\x00\xffpart",
		},
		{
			name: "plain body",
			ev: events.APIGatewayProxyRequest{
				HTTPMethod: "POST",
				Path:       "/v1/batches",
				Body:       `{"input_file_id":"file-1"}`,
			},
			wantURL:   "/v1/batches",
			wantQuery: url.Values{},
			wantHdr:   http.Header{},
			wantBody:  `{"input_file_id":"file-1"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			type key struct{}
			ctx := context.WithValue(t.Context(), key{}, "lambda")
			tt.ev.RequestContext.Identity.SourceIP = "192.0.2.1"
			r, err := Request(ctx, tt.ev)
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if r.Method != tt.ev.HTTPMethod {
				t.Errorf("method = %q, want %q", r.Method, tt.ev.HTTPMethod)
			}
			if got := r.URL.RequestURI(); got != tt.wantURL {
				t.Errorf("URL = %q, want %q", got, tt.wantURL)
			}
			if got := r.URL.Query(); !reflect.DeepEqual(got, tt.wantQuery) {
				t.Errorf("query = %v, want %v", got, tt.wantQuery)
			}
			if !reflect.DeepEqual(r.Header, tt.wantHdr) {
				t.Errorf("header = %v, want %v", r.Header, tt.wantHdr)
			}
			if r.Host != tt.wantHost {
				t.Errorf("host = %q, want %q", r.Host, tt.wantHost)
			}
			if r.RemoteAddr != "192.0.2.1" {
				t.Errorf("RemoteAddr = %q, want %q", r.RemoteAddr, "192.0.2.1")
			}
			body, _ := io.ReadAll(r.Body)
			if string(body) != tt.wantBody {
				t.Errorf("body = %q, want %q", body, tt.wantBody)
			}
			if r.ContentLength != int64(len(tt.wantBody)) {
				t.Errorf("ContentLength = %d, want %d", r.ContentLength, len(tt.wantBody))
			}
			if r.Context().Value(key{}) != "lambda" {
				t.Error("request context does not carry the Lambda context")
			}
		})
	}
}

func TestRequestBadBase64(t *testing.T) {
	t.Parallel()
	ev := events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/v1/files", Body: "%%%", IsBase64Encoded: true}
	if _, err := Request(t.Context(), ev); err == nil {
		t.Fatal("Request accepted a body that is not base64")
	}
}

// TestFixtures runs the sample API Gateway events through Handler.
func TestFixtures(t *testing.T) {
	t.Parallel()
	upload, err := base64.StdEncoding.DecodeString(loadEvent(t, "apigw-upload-file.json").Body)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file         string
		wantMethod   string
		wantPath     string
		wantQuery    url.Values
		wantBody     []byte
		wantRemote   string
		wantID       string
		wantStreamed bool
	}{
		{
			file: "apigw-list-files.json", wantMethod: "GET", wantPath: "/v1/files",
			wantQuery:  url.Values{"purpose": {"batch", "batch_output"}, "limit": {"2"}, "order": {"desc"}},
			wantRemote: "203.0.113.7", wantID: "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
		},
		{
			file: "apigw-create-batch.json", wantMethod: "POST", wantPath: "/v1/batches", wantQuery: url.Values{},
			wantBody:   []byte(`{"input_file_id": "file-abc123", "endpoint": "/v1/chat/completions", "completion_window": "24h"}`),
			wantRemote: "198.51.100.23", wantID: "0d3c1b5e-2f4a-4c3b-9a8e-1f2e3d4c5b6a",
		},
		{
			file: "apigw-upload-file.json", wantMethod: "POST", wantPath: "/v1/files", wantQuery: url.Values{},
			wantBody: upload, wantRemote: "192.0.2.44", wantID: "8e1f7f0a-5d3c-4b2a-8f9e-0a1b2c3d4e5f",
		},
		{
			file: "apigw-file-content.json", wantMethod: "GET", wantPath: "/v1/files/file-abc123/content", wantQuery: url.Values{},
			wantRemote: "203.0.113.7", wantID: "4b7e2c1d-9a8f-4e6d-b5c4-3a2b1c0d9e8f", wantStreamed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			ev := loadEvent(t, tt.file)
			out, err := Handler(http.HandlerFunc(echo))(t.Context(), ev)
			if err != nil {
				t.Fatalf("Handler: %v", err)
			}
			status, header, body := readResult(t, out)
			if _, streamed := out.(*events.LambdaFunctionURLStreamingResponse); streamed != tt.wantStreamed {
				t.Errorf("result %T, want streamed = %v", out, tt.wantStreamed)
			}
			if status != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %s", status, body)
			}
			if got := header.Get("X-Request-Id"); got != tt.wantID {
				t.Errorf("response X-Request-Id = %q, want %q", got, tt.wantID)
			}
			var got received
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("decode echo: %v", err)
			}
			if got.Method != tt.wantMethod || got.Path != tt.wantPath {
				t.Errorf("request = %s %s, want %s %s", got.Method, got.Path, tt.wantMethod, tt.wantPath)
			}
			if !reflect.DeepEqual(got.Query, tt.wantQuery) {
				t.Errorf("query = %v, want %v", got.Query, tt.wantQuery)
			}
			if !bytes.Equal(got.Body, tt.wantBody) {
				t.Errorf("body = %q, want %q", got.Body, tt.wantBody)
			}
			if got.RemoteAddr != tt.wantRemote {
				t.Errorf("RemoteAddr = %q, want %q", got.RemoteAddr, tt.wantRemote)
			}
			if id := got.Header.Get("X-Request-Id"); id != tt.wantID {
				t.Errorf("X-Request-Id = %q, want %q", id, tt.wantID)
			}
			if got.Host != "abc123defg.execute-api.us-east-1.amazonaws.com" {
				t.Errorf("Host = %q", got.Host)
			}
			if auth := got.Header.Get("Authorization"); auth != "Bearer rb-test-key" {
				t.Errorf("Authorization = %q", auth)
			}
		})
	}
}

func TestHandlerBufferedBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		contentType string
		body        string
		wantBase64  bool
	}{
		{"json", "application/json", `{"id":"batch_1"}`, false},
		{"json with charset", "application/json; charset=utf-8", `{"id":"é"}`, false},
		{"jsonl", "application/jsonl", "{\"a\":1}\n{\"a\":2}\n", false},
		{"ndjson", "application/x-ndjson", "{\"a\":1}\n", false},
		{"text", "text/csv", "custom_id,prompt\nr1,hi\n", false},
		{"binary", "application/octet-stream", "\x00\x01\xfe\xff", true},
		{"text type, invalid UTF-8", "text/plain", "\xff\xfe", true},
		{"sniffed binary", "", "\x00\x00\x01\x00binary", true},
		{"empty", "application/octet-stream", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				io.WriteString(w, tt.body)
			})
			out, err := Handler(h)(t.Context(), events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/v1/files/file-1"})
			if err != nil {
				t.Fatal(err)
			}
			resp, ok := out.(events.APIGatewayProxyResponse)
			if !ok {
				t.Fatalf("result %T, want events.APIGatewayProxyResponse", out)
			}
			if resp.IsBase64Encoded != tt.wantBase64 {
				t.Errorf("IsBase64Encoded = %v, want %v", resp.IsBase64Encoded, tt.wantBase64)
			}
			_, _, body := readResult(t, out)
			if string(body) != tt.body {
				t.Errorf("body = %q, want %q", body, tt.body)
			}
		})
	}
}

// TestHandlerStreamedPrelude checks the bytes the Lambda runtime sends to API
// Gateway for a streamed route.
func TestHandlerStreamedPrelude(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req-9")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"message":"No such File object: file-x"}}`)
	})
	ev := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/v1/files/file-x/content", Resource: "/v1/files/{id}/content"}
	out, err := Handler(h)(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.(*events.LambdaFunctionURLStreamingResponse); !ok {
		t.Fatalf("result %T, want *events.LambdaFunctionURLStreamingResponse", out)
	}
	got, err := io.ReadAll(out.(io.Reader))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"statusCode":404,"headers":{"Content-Type":"application/json","Request-Id":"req-9","X-Request-Id":"req-9"}}` +
		"\x00\x00\x00\x00\x00\x00\x00\x00" + `{"error":{"message":"No such File object: file-x"}}`
	if string(got) != want {
		t.Errorf("stream = %q\nwant     %q", got, want)
	}
}

// TestHandlerStreamedReturnsEarly shows Handler hands the stream to the
// runtime once headers are fixed, while h is still running: h blocks until
// the test has the result, which could not happen if Handler waited for h.
func TestHandlerStreamedReturnsEarly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		start    func(w http.ResponseWriter)
		wantBody string
	}{
		{"first write", func(w http.ResponseWriter) { io.WriteString(w, "first") }, "first-last"},
		{"flush", func(w http.ResponseWriter) { http.NewResponseController(w).Flush() }, "-last"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/jsonl")
				w.WriteHeader(http.StatusAccepted)
				tt.start(w)
				<-release
				io.WriteString(w, "-last")
			})
			ev := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/v1/batches/batch_1/results"}
			out, err := Handler(h)(t.Context(), ev)
			if err != nil {
				t.Fatal(err)
			}
			resp := out.(*events.LambdaFunctionURLStreamingResponse)
			if resp.StatusCode != http.StatusAccepted || resp.Headers["Content-Type"] != "application/jsonl" {
				t.Errorf("status %d headers %v, want 202 with Content-Type application/jsonl", resp.StatusCode, resp.Headers)
			}
			close(release)
			status, _, body := readResult(t, out)
			if status != http.StatusAccepted {
				t.Errorf("status = %d, want 202", status)
			}
			if string(body) != tt.wantBody {
				t.Errorf("body = %q, want %q", body, tt.wantBody)
			}
		})
	}
}

func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		path string
	}{
		{"buffered", "/v1/batches"},
		{"streamed", "/v1/files/file-1/content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNotFound) // not yet sent: still a 500
				panic("boom")
			})
			ev := events.APIGatewayProxyRequest{
				HTTPMethod: "GET", Path: tt.path,
				Headers:        map[string]string{"X-Request-Id": "from-client"},
				RequestContext: events.APIGatewayProxyRequestContext{RequestID: "req-panic"},
			}
			out, err := Handler(h)(t.Context(), ev)
			if err != nil {
				t.Fatal(err)
			}
			status, header, body := readResult(t, out)
			if status != http.StatusInternalServerError {
				t.Errorf("status = %d, want 500", status)
			}
			if string(body) != internalError {
				t.Errorf("body = %s, want %s", body, internalError)
			}
			if got := header.Get("X-Request-Id"); got != "req-panic" {
				t.Errorf("X-Request-Id = %q, want req-panic", got)
			}
		})
	}
}

func loadEvent(t *testing.T, name string) events.APIGatewayProxyRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayProxyRequest
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	return ev
}

// preludeDelimiter ends the JSON prelude of a streamed response.
var preludeDelimiter = make([]byte, 8)

// prelude is the JSON head of a streamed response.
type prelude struct {
	StatusCode        int                 `json:"statusCode"`
	Headers           map[string]string   `json:"headers"`
	MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
}

// readResult reads a Handler result the way API Gateway does.
func readResult(t *testing.T, out any) (int, http.Header, []byte) {
	t.Helper()
	header := http.Header{}
	switch out := out.(type) {
	case events.APIGatewayProxyResponse:
		MergeHeaders(header, out.Headers, out.MultiValueHeaders)
		body := []byte(out.Body)
		if out.IsBase64Encoded {
			var err error
			if body, err = base64.StdEncoding.DecodeString(out.Body); err != nil {
				t.Fatalf("decode body: %v", err)
			}
		}
		return out.StatusCode, header, body
	case io.Reader:
		b, err := io.ReadAll(out)
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		head, body, ok := bytes.Cut(b, preludeDelimiter)
		if !ok {
			t.Fatalf("no prelude delimiter in %q", b)
		}
		var p prelude
		if err := json.Unmarshal(head, &p); err != nil {
			t.Fatalf("decode prelude %q: %v", head, err)
		}
		MergeHeaders(header, p.Headers, p.MultiValueHeaders)
		return p.StatusCode, header, body
	}
	t.Fatalf("unexpected result %T", out)
	return 0, nil, nil
}

// TestLambdaRuntime runs Handler through aws-lambda-go's own invocation
// path: buffered results leave as proxy-response JSON, streamed ones as the
// prelude and raw body, not as JSON.
func TestLambdaRuntime(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jsonl")
		io.WriteString(w, "{\"custom_id\":\"r1\"}\n")
	})
	tests := []struct {
		path string
		want string
	}{
		{"/v1/batches/batch_1", `{"statusCode":200,"headers":{"Content-Type":"application/jsonl"},` +
			`"multiValueHeaders":{"Content-Type":["application/jsonl"]},"body":"{\"custom_id\":\"r1\"}\n"}`},
		{"/v1/batches/batch_1/results", `{"statusCode":200,"headers":{"Content-Type":"application/jsonl"}}` +
			"\x00\x00\x00\x00\x00\x00\x00\x00{\"custom_id\":\"r1\"}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			payload, _ := json.Marshal(events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: tt.path})
			got, err := lambda.NewHandler(Handler(h)).Invoke(t.Context(), payload)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("runtime payload = %q\nwant              %q", got, tt.want)
			}
		})
	}
}
