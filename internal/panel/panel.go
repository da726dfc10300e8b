// Package panel owns the web panel (README "What it does"): static HTML, CSS and ES
// modules embedded in the binary and served by the api function at "/" and
// "/panel/…". There is no build step; the files under static/ are what the
// browser runs. The page talks only to the public API of its own origin,
// with the key in the Authorization header.
package panel

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// contentTypes is explicit so the answer does not depend on the host's MIME
// tables.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves index.html at "/" and the other embedded files at
// "/panel/<name>". uploadEndpoints are where the page may PUT presigned
// uploads, as URLs or origins: the deployment's bucket, as its presigned
// URLs name it (internal/app, blob.Store.UploadOrigin); empty ones, and
// wildcards, are ignored.
func Handler(uploadEndpoints ...string) http.Handler {
	assets := load()
	csp := policy(uploadEndpoints)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name, ok := "index.html", r.URL.Path == "/"
		if rest, found := strings.CutPrefix(r.URL.Path, "/panel/"); found {
			name, ok = rest, rest != "index.html"
		}
		a, found := assets[name]
		if !ok || !found {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", a.contentType)
		h.Set("ETag", a.etag)
		// ServeContent answers If-None-Match with 304, so no-cache costs a
		// round trip, not a download.
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// load reads the embedded files once; only the types listed in
// contentTypes are served.
func load() map[string]asset {
	assets := map[string]asset{}
	root, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	entries, err := fs.ReadDir(root, ".")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		ct, ok := contentTypes[path.Ext(e.Name())]
		if e.IsDir() || !ok {
			continue
		}
		body, err := fs.ReadFile(root, e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(body)
		assets[e.Name()] = asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return assets
}

// policy is the Content-Security-Policy: everything from this origin only,
// no inline script or style, no plugins, no framing, no form posts (the key
// form is handled in script; if the script failed to load, the browser must
// not submit the key in a URL). connect-src adds the origin of the bucket
// that presigned uploads go to, since the PUT leaves this origin, and no
// other: with any bucket of amazonaws.com allowed, a script injected into
// the page could send what it reads to a bucket of its own (SECURITY.md).
func policy(uploadEndpoints []string) string {
	connect := []string{"'self'"}
	for _, e := range uploadEndpoints {
		if o := origin(e); o != "" {
			connect = append(connect, o)
		}
	}
	return strings.Join([]string{
		"default-src 'self'",
		"script-src 'self'",
		"style-src 'self'",
		"img-src 'self'",
		"connect-src " + strings.Join(connect, " "),
		"object-src 'none'",
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
	}, "; ")
}

// origin reduces an endpoint URL to scheme://host[:port], or "" if it is not
// an http(s) URL; a path or query must not reach the header.
func origin(endpoint string) string {
	u, err := url.Parse(strings.TrimSpace(endpoint))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	if strings.ContainsAny(u.Host, " ;,'*") {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
