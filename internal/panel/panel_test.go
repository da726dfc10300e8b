package panel

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func serve(t *testing.T, h http.Handler, method, target string, header http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, vs := range header {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHandlerServesAssets(t *testing.T) {
	t.Parallel()
	h := Handler()
	tests := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script type="module" src="panel/app.js">`},
		{"/panel/app.js", "text/javascript; charset=utf-8", "from './api.js'"},
		{"/panel/api.js", "text/javascript; charset=utf-8", "Authorization"},
		{"/panel/app.css", "text/css; charset=utf-8", "prefers-color-scheme"},
		{"/panel/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			res := serve(t, h, http.MethodGet, tt.path, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200", res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tt.contentType)
			}
			if got := body(t, res); !strings.Contains(got, tt.contains) {
				t.Errorf("body does not contain %q", tt.contains)
			}
			checkSecurityHeaders(t, res)
		})
	}
}

func checkSecurityHeaders(t *testing.T, res *http.Response) {
	t.Helper()
	want := map[string]string{
		"Cache-Control":          "no-cache",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	}
	for k, v := range want {
		if got := res.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	csp := res.Header.Get("Content-Security-Policy")
	for _, d := range []string{
		"default-src 'self'", "script-src 'self'", "style-src 'self'", "object-src 'none'",
		"base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
		"connect-src 'self'",
	} {
		if !strings.Contains(csp, d) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe") || strings.Contains(csp, "*") {
		t.Errorf("Content-Security-Policy %q is not strict", csp)
	}
}

func TestHandlerRejects(t *testing.T) {
	t.Parallel()
	h := Handler()
	tests := []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/panel/nope.js", http.StatusNotFound},
		{http.MethodGet, "/panel/", http.StatusNotFound},
		{http.MethodGet, "/panel/index.html", http.StatusNotFound},
		{http.MethodGet, "/panel/../panel.go", http.StatusNotFound},
		{http.MethodGet, "/panel/static/app.js", http.StatusNotFound},
		{http.MethodGet, "/index.html", http.StatusNotFound},
		{http.MethodGet, "/v1/batches", http.StatusNotFound},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/panel/app.js", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			res := serve(t, h, tt.method, tt.path, nil)
			if res.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", res.StatusCode, tt.status)
			}
			checkSecurityHeaders(t, res)
		})
	}
}

func TestHandlerRevalidates(t *testing.T) {
	t.Parallel()
	h := Handler()
	first := serve(t, h, http.MethodGet, "/panel/app.js", nil)
	etag := first.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	again := serve(t, h, http.MethodGet, "/panel/app.js", http.Header{"If-None-Match": {etag}})
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("status with If-None-Match = %d, want 304", again.StatusCode)
	}
	head := serve(t, h, http.MethodHead, "/", nil)
	if head.StatusCode != http.StatusOK || body(t, head) != "" {
		t.Errorf("HEAD / = %d with a body, want 200 without", head.StatusCode)
	}
}

func TestUploadOrigins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		endpoints []string
		want      string
	}{
		// No S3 origin but the deployment's bucket: not any bucket of
		// amazonaws.com, where a script could PUT what it read.
		{"none", nil, "connect-src 'self';"},
		{"the deployment's bucket", []string{"https://relay-data.s3.us-east-1.amazonaws.com"},
			"connect-src 'self' https://relay-data.s3.us-east-1.amazonaws.com;"},
		{"emulator URL reduced to its origin", []string{"http://127.0.0.1:4566/bucket/key?X-Amz-Signature=1"},
			"connect-src 'self' http://127.0.0.1:4566;"},
		{"empty and bad ones ignored", []string{"", "ftp://x", "not a url", "http://a b", "https://*.amazonaws.com", "https://s3.example.com"},
			"connect-src 'self' https://s3.example.com;"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := serve(t, Handler(tt.endpoints...), http.MethodGet, "/", nil)
			if got := res.Header.Get("Content-Security-Policy"); !strings.Contains(got, tt.want) {
				t.Errorf("Content-Security-Policy = %q, want it to contain %q", got, tt.want)
			}
		})
	}
}

func staticFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKeyStaysInHeader is a crude guard for the panel's "key in a header,
// never in a URL or a cookie": none of the page's code may name a key query
// parameter, touch cookies or persistent storage.
func TestKeyStaysInHeader(t *testing.T) {
	t.Parallel()
	forbidden := []string{"?key=", "&key=", "api_key=", "apikey=", "document.cookie", "localStorage", "innerHTML", "outerHTML", "eval("}
	for name, src := range staticFiles(t) {
		for _, f := range forbidden {
			if strings.Contains(src, f) {
				t.Errorf("%s contains %q", name, f)
			}
		}
	}
	api := staticFiles(t)["static/api.js"]
	if !strings.Contains(api, "Authorization: `Bearer ${key}`") {
		t.Error("api.js no longer sends the key as Authorization: Bearer")
	}
}

// TestWorksOffline checks that the page loads nothing from another origin and
// that everything it references is served.
func TestWorksOffline(t *testing.T) {
	t.Parallel()
	h := Handler()
	ref := regexp.MustCompile(`(?:href|src)="([^"#]+)"|from '\./([^']+)'`)
	for name, src := range staticFiles(t) {
		for _, m := range ref.FindAllStringSubmatch(src, -1) {
			target := m[1]
			if target == "" {
				target = "panel/" + m[2]
			}
			if strings.Contains(target, "//") {
				t.Errorf("%s loads %s from another origin", name, target)
				continue
			}
			if res := serve(t, h, http.MethodGet, "/"+target, nil); res.StatusCode != http.StatusOK {
				t.Errorf("%s references %s, served with status %d", name, target, res.StatusCode)
			}
		}
	}
}
