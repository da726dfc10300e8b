package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/relaybatch/relay/internal/apigw"
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

// internalError is apigw.Handler's body for a handler panic.
const internalError = `{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`

// newLocal serves h the way the local runtime does: Front -> apigw.Handler(h) -> h.
func newLocal(t *testing.T, h http.Handler, configure ...func(*Front)) *httptest.Server {
	t.Helper()
	l := &Front{Invoke: apigw.Handler(h)}
	for _, c := range configure {
		c(l)
	}
	srv := httptest.NewServer(l)
	t.Cleanup(srv.Close)
	return srv
}

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed)})
	_, _ = r.Read(b)
	return b
}

func multipartBody(t *testing.T, file []byte) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.WriteField("purpose", "batch"); err != nil {
		t.Fatal(err)
	}
	fw, err := mw.CreatePart(textproto.MIMEHeader{
		"Content-Disposition": {`form-data; name="file"; filename="input.jsonl"`},
		"Content-Type":        {"application/octet-stream"},
	})
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(file)
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.Bytes()
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp, body
}

func TestLocalRoundTripRequest(t *testing.T) {
	t.Parallel()
	mpType, mpBody := multipartBody(t, randomBytes(1, 256*1024))
	tests := []struct {
		name        string
		method      string
		target      string
		contentType string
		body        []byte
		header      http.Header
		wantQuery   url.Values
	}{
		{
			name: "GET with multi-value query", method: "GET",
			target:    "/v1/files?purpose=batch&purpose=batch_output&limit=2&after=file-x%2Fy",
			wantQuery: url.Values{"purpose": {"batch", "batch_output"}, "limit": {"2"}, "after": {"file-x/y"}},
		},
		{
			name: "POST JSON", method: "POST", target: "/v1/batches", contentType: "application/json",
			body:      []byte(`{"input_file_id":"file-1","endpoint":"/v1/chat/completions","metadata":{"k":"é"}}`),
			wantQuery: url.Values{},
		},
		{
			name: "POST multipart binary", method: "POST", target: "/v1/files", contentType: mpType,
			body: mpBody, wantQuery: url.Values{},
		},
		{
			name: "POST JSON that is not UTF-8", method: "POST", target: "/v1/batches", contentType: "application/json",
			body: []byte("{\"a\":\"\xff\xfe\"}"), wantQuery: url.Values{},
		},
		{
			name: "multi-value request header", method: "GET", target: "/v1/batches",
			header:    http.Header{"X-Tag": {"a", "b"}, "Authorization": {"Bearer rb-key"}},
			wantQuery: url.Values{},
		},
	}
	srv := newLocal(t, http.HandlerFunc(echo))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.target, bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, vs := range tt.header {
				req.Header[k] = vs
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			resp, body := do(t, req)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, body %s", resp.StatusCode, body)
			}
			var got received
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("decode echo %q: %v", body, err)
			}
			if got.Method != tt.method {
				t.Errorf("method = %q, want %q", got.Method, tt.method)
			}
			if want, _, _ := strings.Cut(tt.target, "?"); got.Path != want {
				t.Errorf("path = %q, want %q", got.Path, want)
			}
			if !reflect.DeepEqual(got.Query, tt.wantQuery) {
				t.Errorf("query = %v, want %v", got.Query, tt.wantQuery)
			}
			if !bytes.Equal(got.Body, tt.body) {
				t.Errorf("body differs: got %d bytes, want %d", len(got.Body), len(tt.body))
			}
			if ct := got.Header.Get("Content-Type"); ct != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", ct, tt.contentType)
			}
			for k, want := range tt.header {
				if vs := got.Header.Values(k); !reflect.DeepEqual(vs, want) {
					t.Errorf("header %s = %q, want %q", k, vs, want)
				}
			}
			if got.Host != strings.TrimPrefix(srv.URL, "http://") {
				t.Errorf("Host = %q, want %q", got.Host, strings.TrimPrefix(srv.URL, "http://"))
			}
			if got.RemoteAddr != "127.0.0.1" {
				t.Errorf("RemoteAddr = %q, want 127.0.0.1", got.RemoteAddr)
			}
		})
	}
}

func TestLocalRoundTripResponse(t *testing.T) {
	t.Parallel()
	binary := randomBytes(2, 100*1024)
	tests := []struct {
		name       string
		path       string
		status     int
		header     http.Header
		body       []byte
		wantHeader http.Header
	}{
		{
			name: "JSON with custom headers", path: "/v1/batches", status: http.StatusCreated,
			header: http.Header{"Content-Type": {"application/json"}, "X-Relay-Batch": {"batch_1"}, "X-Multi": {"a", "b"}},
			body:   []byte(`{"id":"batch_1","object":"batch"}`),
		},
		{
			name: "binary", path: "/v1/files/file-1", status: http.StatusOK,
			header: http.Header{"Content-Type": {"application/octet-stream"}}, body: binary,
		},
		{
			name: "sniffed content type", path: "/v1/files/file-1", status: http.StatusOK,
			body: []byte("<html><body>panel</body></html>"), header: http.Header{},
			wantHeader: http.Header{"Content-Type": {"text/html; charset=utf-8"}},
		},
		{
			name: "no content", path: "/v1/files/file-1", status: http.StatusNoContent, header: http.Header{},
		},
		{
			name: "streamed with custom headers", path: "/v1/files/file-1/content", status: http.StatusOK,
			header: http.Header{"Content-Type": {"application/jsonl"}, "X-Relay-File": {"file-1"}},
			body:   []byte("{\"custom_id\":\"r1\"}\n{\"custom_id\":\"r2\"}\n"),
		},
		{
			name: "streamed binary", path: "/v1/batches/batch_1/results", status: http.StatusOK,
			header: http.Header{"Content-Type": {"application/octet-stream"}}, body: binary,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, vs := range tt.header {
					w.Header()[k] = vs
				}
				w.WriteHeader(tt.status)
				w.Write(tt.body)
			}))
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+tt.path, nil)
			resp, body := do(t, req)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if !bytes.Equal(body, tt.body) {
				t.Errorf("body differs: got %d bytes, want %d", len(body), len(tt.body))
			}
			want := tt.wantHeader
			if want == nil {
				want = tt.header
			}
			for k, vs := range want {
				if got := resp.Header.Values(k); !reflect.DeepEqual(got, vs) {
					t.Errorf("header %s = %q, want %q", k, got, vs)
				}
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id in the response")
			}
		})
	}
}

// TestLocalStreams sends 20 MB in small writes and proves it is streamed:
// the handler stops after its first chunk until the client has read that
// chunk, which a buffering server could never deliver.
func TestLocalStreams(t *testing.T) {
	t.Parallel()
	const chunk = 4 * 1024
	want := randomBytes(3, 20*1024*1024)
	firstRead := make(chan struct{})
	srv := newLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(want[:chunk])
		select {
		case <-firstRead:
		case <-r.Context().Done():
			return
		}
		for rest := want[chunk:]; len(rest) > 0; rest = rest[min(chunk, len(rest)):] {
			if _, err := w.Write(rest[:min(chunk, len(rest))]); err != nil {
				return
			}
		}
	}))

	// Only a guard against hanging if the body were buffered; nothing is timed.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/files/file-big/content", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, chunk)
	if _, err := io.ReadFull(resp.Body, got); err != nil {
		t.Fatalf("read first chunk: %v", err)
	}
	close(firstRead)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read rest: %v", err)
	}
	got = append(got, rest...)
	if !bytes.Equal(got, want) {
		t.Errorf("body differs: got %d bytes, want %d", len(got), len(want))
	}
}

func TestLocalStreamedError(t *testing.T) {
	t.Parallel()
	const notFound = `{"error":{"message":"No such File object: file-x","type":"invalid_request_error","param":"id","code":null}}`
	srv := newLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, notFound)
	}))
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/files/file-x/content", nil)
	resp, body := do(t, req)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status = %d, want 404", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if string(body) != notFound {
		t.Errorf("body = %s, want %s", body, notFound)
	}
}

func TestLocalPanic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		path string
	}{
		{"buffered", "/v1/batches/batch_1"},
		{"streamed", "/v1/batches/batch_1/results"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mux := http.NewServeMux()
			mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
			mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
			srv := newLocal(t, mux)

			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+tt.path, nil)
			resp, body := do(t, req)
			if resp.StatusCode != http.StatusInternalServerError {
				t.Errorf("status = %d, want 500", resp.StatusCode)
			}
			if string(body) != internalError {
				t.Errorf("body = %s, want %s", body, internalError)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on the 500")
			}

			// The process survived: the next request is served.
			req, _ = http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/healthz", nil)
			if resp, body := do(t, req); resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Errorf("after the panic: %d %q, want 200 ok", resp.StatusCode, body)
			}
		})
	}
}

// TestLocalPanicMidStream: once the status is sent, a panic must not look
// like a complete response to the client.
func TestLocalPanicMidStream(t *testing.T) {
	t.Parallel()
	srv := newLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "{\"custom_id\":\"r1\"}\n")
		panic("boom")
	}))
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/batches/batch_1/results", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status = %d, want 200 (sent before the panic)", resp.StatusCode)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("reading the body succeeded; want an error for the aborted stream")
	}
}

func TestLocalTooLarge(t *testing.T) {
	t.Parallel()
	// countBytes answers with the size of the body it got, so a big upload
	// does not come back as a big response.
	countBytes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
	_, part := multipartBody(t, randomBytes(4, 4*1024*1024))
	tests := []struct {
		name        string
		max         int
		path        string
		contentType string
		body        []byte
		wantStatus  int
		wantMessage []string
	}{
		{
			name: "raw body over the limit", max: 16 * 1024, path: "/v1/files", contentType: "application/json",
			body: bytes.Repeat([]byte("a"), 17*1024), wantStatus: http.StatusRequestEntityTooLarge,
			wantMessage: []string{"Uploads API", "4 MiB"},
		},
		{
			name: "body that fits once base64-encoded", max: 16 * 1024, path: "/v1/files", contentType: "application/octet-stream",
			body: randomBytes(5, 10*1024), wantStatus: http.StatusOK,
		},
		{
			name: "binary body that fits raw, not base64-encoded", max: 16 * 1024, path: "/v1/files", contentType: "application/octet-stream",
			body: randomBytes(5, 12*1024), wantStatus: http.StatusRequestEntityTooLarge,
			wantMessage: []string{"Uploads API", "4 MiB"},
		},
		{
			// The deployed API base64-encodes text bodies too (binary media type */*).
			name: "text body that fits raw, not base64-encoded", max: 16 * 1024, path: "/v1/batches", contentType: "application/json",
			body: bytes.Repeat([]byte("a"), 12*1024), wantStatus: http.StatusRequestEntityTooLarge,
			wantMessage: []string{"Uploads API", "4 MiB"},
		},
		{
			name: "Anthropic route", max: 16 * 1024, path: "/v1/messages/batches", contentType: "application/json",
			body: bytes.Repeat([]byte("a"), 17*1024), wantStatus: http.StatusRequestEntityTooLarge,
			wantMessage: []string{`"type":"error"`, "request_too_large"},
		},
		{
			name: "4 MiB upload part fits the default limit", path: "/v1/uploads/upload_1/parts",
			contentType: "multipart/form-data; boundary=x", body: part, wantStatus: http.StatusOK,
		},
		{
			name: "7 MB over the default limit", path: "/v1/files", contentType: "application/octet-stream",
			body: randomBytes(6, 7*1000*1000), wantStatus: http.StatusRequestEntityTooLarge,
			wantMessage: []string{"Uploads API", "4 MiB"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			invoked := false
			invoke := apigw.Handler(countBytes)
			l := &Front{MaxEventBytes: tt.max, Invoke: func(ctx context.Context, ev events.APIGatewayProxyRequest) (any, error) {
				mu.Lock()
				invoked = true
				mu.Unlock()
				return invoke(ctx, ev)
			}}
			srv := httptest.NewServer(l)
			defer srv.Close()

			req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+tt.path, bytes.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
			resp, body := do(t, req)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			mu.Lock()
			defer mu.Unlock()
			if tt.wantStatus == http.StatusOK {
				if string(body) != fmt.Sprint(len(tt.body)) {
					t.Errorf("handler got %s bytes, want %d", body, len(tt.body))
				}
				return
			}
			if invoked {
				t.Error("Invoke was called for a request over the limit")
			}
			if !json.Valid(body) {
				t.Errorf("body is not JSON: %s", body)
			}
			for _, m := range tt.wantMessage {
				if !strings.Contains(string(body), m) {
					t.Errorf("body %s does not mention %q", body, m)
				}
			}
		})
	}
}

// TestLocalResponseTooLarge: Lambda refuses a buffered response over 6 MB,
// so a route that needs more must be streamed; locally it fails the same way.
func TestLocalResponseTooLarge(t *testing.T) {
	t.Parallel()
	big := randomBytes(7, 5*1024*1024) // 6.7 MB once base64-encoded
	srv := newLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(big)
	}))
	tests := []struct {
		path       string
		wantStatus int
	}{
		{"/v1/files/file-1", http.StatusBadGateway},
		{"/v1/files/file-1/content", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+tt.path, nil)
			resp, body := do(t, req)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusOK && !bytes.Equal(body, big) {
				t.Errorf("body differs: got %d bytes, want %d", len(body), len(big))
			}
		})
	}
}

func TestLocalTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"handler honours ctx", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"handler ignores ctx", func(w http.ResponseWriter, r *http.Request) { <-release }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newLocal(t, tt.handler, func(l *Front) { l.Timeout = 50 * time.Millisecond })
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/batches", nil)
			resp, body := do(t, req)
			if resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("status = %d, want 504", resp.StatusCode)
			}
			if want := `{"message":"Endpoint request timed out"}`; string(body) != want {
				t.Errorf("body = %s, want %s", body, want)
			}
		})
	}
}

// TestLocalDeadline: buffered routes get the integration timeout, streamed
// ones API Gateway's 15-minute streaming limit instead.
func TestLocalDeadline(t *testing.T) {
	t.Parallel()
	srv := newLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline, ok := r.Context().Deadline()
		if !ok {
			http.Error(w, "no deadline", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, time.Until(deadline).Milliseconds())
	}))
	tests := []struct {
		path     string
		min, max time.Duration
	}{
		{"/v1/batches", 0, 29 * time.Second},
		{"/v1/batches/batch_1/results", 29 * time.Second, 15 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+tt.path, nil)
			resp, body := do(t, req)
			var ms int64
			if _, err := fmt.Sscan(string(body), &ms); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if left := time.Duration(ms) * time.Millisecond; left <= tt.min || left > tt.max {
				t.Errorf("time left = %v, want in (%v, %v]", left, tt.min, tt.max)
			}
		})
	}
}

// TestLocalEvent checks the event Front builds against what API Gateway sends.
func TestLocalEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		method      string
		target      string
		contentType string
		body        []byte
		check       func(t *testing.T, ev events.APIGatewayProxyRequest)
	}{
		{
			name: "streamed GET", method: "GET", target: "/v1/files/file-1/content?a=1&a=2",
			check: func(t *testing.T, ev events.APIGatewayProxyRequest) {
				if ev.Resource != "/v1/files/{id}/content" || ev.PathParameters["id"] != "file-1" {
					t.Errorf("resource %q params %v, want /v1/files/{id}/content with id=file-1", ev.Resource, ev.PathParameters)
				}
				if ev.QueryStringParameters["a"] != "2" || !reflect.DeepEqual(ev.MultiValueQueryStringParameters["a"], []string{"1", "2"}) {
					t.Errorf("query %v / %v, want a=2 / a=[1 2]", ev.QueryStringParameters, ev.MultiValueQueryStringParameters)
				}
				if ev.Body != "" || ev.IsBase64Encoded {
					t.Errorf("body %q base64 %v, want none", ev.Body, ev.IsBase64Encoded)
				}
			},
		},
		{
			name: "JSON POST", method: "POST", target: "/v1/batches", contentType: "application/json", body: []byte(`{"a":1}`),
			check: func(t *testing.T, ev events.APIGatewayProxyRequest) {
				if ev.Resource != "/{proxy+}" || ev.PathParameters["proxy"] != "v1/batches" {
					t.Errorf("resource %q params %v, want /{proxy+} with proxy=v1/batches", ev.Resource, ev.PathParameters)
				}
				if ev.Body != `{"a":1}` || ev.IsBase64Encoded {
					t.Errorf("body %q base64 %v, want plain JSON", ev.Body, ev.IsBase64Encoded)
				}
				if ev.QueryStringParameters != nil || ev.MultiValueQueryStringParameters != nil {
					t.Errorf("query maps %v %v, want nil", ev.QueryStringParameters, ev.MultiValueQueryStringParameters)
				}
			},
		},
		{
			name: "binary POST", method: "POST", target: "/v1/uploads/upload_1/parts", contentType: "application/octet-stream", body: []byte{0, 1, 2, 0xff},
			check: func(t *testing.T, ev events.APIGatewayProxyRequest) {
				if want := base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff}); ev.Body != want || !ev.IsBase64Encoded {
					t.Errorf("body %q base64 %v, want %q base64", ev.Body, ev.IsBase64Encoded, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var evs []events.APIGatewayProxyRequest
			var seen []string
			invoke := apigw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Get("X-Request-Id"))
				mu.Unlock()
			}))
			srv := httptest.NewServer(&Front{Invoke: func(ctx context.Context, ev events.APIGatewayProxyRequest) (any, error) {
				mu.Lock()
				evs = append(evs, ev)
				mu.Unlock()
				return invoke(ctx, ev)
			}})
			defer srv.Close()

			var respIDs []string
			for range 2 {
				req, _ := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.target, bytes.NewReader(tt.body))
				if tt.contentType != "" {
					req.Header.Set("Content-Type", tt.contentType)
				}
				req.Header.Add("X-Tag", "a")
				req.Header.Add("X-Tag", "b")
				resp, body := do(t, req)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				respIDs = append(respIDs, resp.Header.Get("X-Request-Id"))
			}

			mu.Lock()
			defer mu.Unlock()
			ev := evs[0]
			tt.check(t, ev)
			if ev.HTTPMethod != tt.method || ev.RequestContext.HTTPMethod != tt.method {
				t.Errorf("method %q / %q, want %q", ev.HTTPMethod, ev.RequestContext.HTTPMethod, tt.method)
			}
			if want, _, _ := strings.Cut(tt.target, "?"); ev.Path != want {
				t.Errorf("path = %q, want %q", ev.Path, want)
			}
			if ev.RequestContext.Stage != "local" {
				t.Errorf("stage = %q, want local", ev.RequestContext.Stage)
			}
			if ip := ev.RequestContext.Identity.SourceIP; ip != "127.0.0.1" {
				t.Errorf("source IP = %q, want 127.0.0.1", ip)
			}
			if ev.RequestContext.ResourcePath != ev.Resource {
				t.Errorf("resourcePath = %q, want %q", ev.RequestContext.ResourcePath, ev.Resource)
			}
			if ev.Headers["X-Tag"] != "b" || !reflect.DeepEqual(ev.MultiValueHeaders["X-Tag"], []string{"a", "b"}) {
				t.Errorf("X-Tag = %q / %q, want b / [a b]", ev.Headers["X-Tag"], ev.MultiValueHeaders["X-Tag"])
			}
			if host := strings.TrimPrefix(srv.URL, "http://"); ev.Headers["Host"] != host {
				t.Errorf("Host = %q, want %q", ev.Headers["Host"], host)
			}
			ids := []string{evs[0].RequestContext.RequestID, evs[1].RequestContext.RequestID}
			if ids[0] == "" || ids[0] == ids[1] {
				t.Errorf("request ids %q, want two distinct ids", ids)
			}
			if !reflect.DeepEqual(seen, ids) || !reflect.DeepEqual(respIDs, ids) {
				t.Errorf("X-Request-Id seen by the handler %q, in responses %q, want %q", seen, respIDs, ids)
			}
		})
	}
}

// TestLocalInvokeFailure: a failed or malformed invocation gets API
// Gateway's own 502, not a crash.
func TestLocalInvokeFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		invoke func(ctx context.Context, ev events.APIGatewayProxyRequest) (any, error)
	}{
		{"error", func(context.Context, events.APIGatewayProxyRequest) (any, error) { return nil, fmt.Errorf("boom") }},
		{"panic", func(context.Context, events.APIGatewayProxyRequest) (any, error) { panic("boom") }},
		{"no status code", func(context.Context, events.APIGatewayProxyRequest) (any, error) {
			return events.APIGatewayProxyResponse{Body: "x"}, nil
		}},
		{"stream without prelude", func(context.Context, events.APIGatewayProxyRequest) (any, error) {
			return strings.NewReader("just bytes"), nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(&Front{Invoke: tt.invoke})
			defer srv.Close()
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/batches", nil)
			resp, body := do(t, req)
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("status = %d, want 502", resp.StatusCode)
			}
			if want := `{"message":"Internal server error"}`; string(body) != want {
				t.Errorf("body = %s, want %s", body, want)
			}
		})
	}
}
