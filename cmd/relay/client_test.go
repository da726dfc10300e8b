package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const testKey = "rb-test-key"

// fakeAPI implements just enough of the public API for the client
// commands: files (multipart, presigned, Uploads API) and batches whose
// states follow a script, one state per GET.
type fakeAPI struct {
	t       *testing.T
	presign bool        // the JSON POST /v1/files answers with an upload_url
	script  []fakeState // the states a new batch goes through
	srv     *httptest.Server
	s3      *httptest.Server // where presigned PUTs land

	mu        sync.Mutex
	n         int
	files     map[string]*fakeFile
	uploads   map[string][]string // upload id → part ids
	parts     map[string][]byte
	partSizes []int
	puts      []http.Header
	routes    []string // how each file arrived: multipart, presigned, uploads
	creates   []map[string]any
	batches   map[string]*fakeBatch
}

type fakeFile struct {
	id, name, status string
	data             []byte
	size             int64
}

type fakeState struct {
	status                   string
	total, completed, failed int
}

type fakeBatch struct {
	id      string
	states  []fakeState
	polls   int
	retryOf string
}

func (b *fakeBatch) state() fakeState { return b.states[min(b.polls, len(b.states)-1)] }

func (b *fakeBatch) json() map[string]any {
	s := b.state()
	m := map[string]any{
		"id": b.id, "object": "batch", "status": s.status, "endpoint": "/v1/chat/completions",
		"completion_window": "24h", "created_at": 1700000000,
		"request_counts": map[string]int{"total": s.total, "completed": s.completed, "failed": s.failed},
	}
	if b.retryOf != "" {
		m["retry_of"] = b.retryOf
	}
	if s.status == "failed" {
		m["errors"] = map[string]any{"object": "list", "data": []map[string]any{
			{"code": "invalid_model", "message": "model \"nope\" is not configured", "param": "body.model", "line": 3},
		}}
	}
	return m
}

var terminalStatus = map[string]bool{"completed": true, "failed": true, "expired": true, "cancelled": true}

func newFakeAPI(t *testing.T, presign bool, script ...fakeState) *fakeAPI {
	t.Helper()
	if len(script) == 0 {
		script = []fakeState{{"completed", 2, 2, 0}}
	}
	f := &fakeAPI{
		t: t, presign: presign, script: script,
		files: map[string]*fakeFile{}, uploads: map[string][]string{}, parts: map[string][]byte{},
		batches: map[string]*fakeBatch{},
	}
	f.s3 = httptest.NewServer(http.HandlerFunc(f.put))
	f.srv = httptest.NewServer(f.handler())
	t.Cleanup(f.srv.Close)
	t.Cleanup(f.s3.Close)
	return f
}

// env is the environment of a CLI pointed at the fake.
func (f *fakeAPI) env() map[string]string {
	return map[string]string{"RELAY_URL": f.srv.URL, "RELAY_API_KEY": testKey}
}

func (f *fakeAPI) id(prefix string) string {
	f.n++
	return fmt.Sprintf("%s%d", prefix, f.n)
}

func apiErr(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func fileJSON(f *fakeFile) map[string]any {
	return map[string]any{"id": f.id, "object": "file", "bytes": f.size, "created_at": 1700000000,
		"filename": f.name, "purpose": "batch", "status": f.status, "status_details": nil, "expires_at": nil}
}

// readPart reads a multipart body's fields and its one file part.
func readPart(t *testing.T, r *http.Request, field string) (map[string]string, string, []byte) {
	t.Helper()
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		t.Errorf("Content-Type %q: %v", r.Header.Get("Content-Type"), err)
		return nil, "", nil
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	fields := map[string]string{}
	var name string
	var data []byte
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Errorf("multipart: %v", err)
			return nil, "", nil
		}
		b, _ := io.ReadAll(p)
		if p.FormName() == field {
			name, data = p.FileName(), b
		} else {
			fields[p.FormName()] = string(b)
		}
	}
	return fields, name, data
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/files", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			var req struct {
				Filename string `json:"filename"`
				Purpose  string `json:"purpose"`
				Bytes    int64  `json:"bytes"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			if !f.presign {
				apiErr(w, http.StatusBadRequest, "send multipart/form-data with a boundary (fields: purpose, file)")
				return
			}
			file := &fakeFile{id: f.id("file-"), name: req.Filename, status: "uploaded", size: req.Bytes}
			f.files[file.id] = file
			out := fileJSON(file)
			out["upload_url"] = f.s3.URL + "/bucket/" + file.id + "?X-Amz-Signature=abc"
			reply(w, out)
			return
		}
		fields, name, data := readPart(f.t, r, "file")
		if len(data) > maxRequestData {
			apiErr(w, http.StatusRequestEntityTooLarge, "too big")
			return
		}
		if fields["purpose"] != "batch" {
			apiErr(w, http.StatusBadRequest, "purpose must be batch")
			return
		}
		file := &fakeFile{id: f.id("file-"), name: name, status: "processed", data: data, size: int64(len(data))}
		f.files[file.id] = file
		f.routes = append(f.routes, "multipart")
		reply(w, fileJSON(file))
	})
	mux.HandleFunc("GET /v1/files", func(w http.ResponseWriter, r *http.Request) {
		var data []map[string]any
		for _, id := range slices.Sorted(maps.Keys(f.files)) {
			data = append(data, fileJSON(f.files[id]))
		}
		reply(w, map[string]any{"object": "list", "data": data, "has_more": false})
	})
	mux.HandleFunc("GET /v1/files/{id}", func(w http.ResponseWriter, r *http.Request) {
		file := f.files[r.PathValue("id")]
		if file == nil {
			apiErr(w, http.StatusNotFound, "no such file: "+r.PathValue("id"))
			return
		}
		reply(w, fileJSON(file))
	})
	mux.HandleFunc("GET /v1/files/{id}/content", func(w http.ResponseWriter, r *http.Request) {
		file := f.files[r.PathValue("id")]
		if file == nil {
			apiErr(w, http.StatusNotFound, "no such file: "+r.PathValue("id"))
			return
		}
		w.Write(file.data)
	})
	mux.HandleFunc("DELETE /v1/files/{id}", func(w http.ResponseWriter, r *http.Request) {
		if f.files[r.PathValue("id")] == nil {
			apiErr(w, http.StatusNotFound, "no such file: "+r.PathValue("id"))
			return
		}
		delete(f.files, r.PathValue("id"))
		reply(w, map[string]any{"id": r.PathValue("id"), "object": "file", "deleted": true})
	})
	mux.HandleFunc("POST /v1/uploads", func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		if req["mime_type"] == nil || req["purpose"] != "batch" {
			apiErr(w, http.StatusBadRequest, "mime_type and purpose are required")
			return
		}
		id := f.id("upload_")
		f.uploads[id] = nil
		reply(w, map[string]any{"id": id, "object": "upload", "status": "pending", "bytes": req["bytes"],
			"filename": req["filename"], "purpose": "batch", "part_size_limit": maxRequestData})
	})
	mux.HandleFunc("POST /v1/uploads/{id}/parts", func(w http.ResponseWriter, r *http.Request) {
		_, _, data := readPart(f.t, r, "data")
		if len(data) > maxRequestData {
			apiErr(w, http.StatusRequestEntityTooLarge, "part too big")
			return
		}
		id := f.id("part_")
		f.parts[id] = data
		f.partSizes = append(f.partSizes, len(data))
		reply(w, map[string]any{"id": id, "object": "upload.part", "upload_id": r.PathValue("id")})
	})
	mux.HandleFunc("POST /v1/uploads/{id}/complete", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			PartIDs []string `json:"part_ids"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		var data []byte
		for _, p := range req.PartIDs {
			data = append(data, f.parts[p]...)
		}
		file := &fakeFile{id: f.id("file-"), name: "upload", status: "processed", data: data, size: int64(len(data))}
		f.files[file.id] = file
		f.routes = append(f.routes, "uploads")
		reply(w, map[string]any{"id": r.PathValue("id"), "object": "upload", "status": "completed", "file": fileJSON(file)})
	})
	mux.HandleFunc("POST /v1/batches", func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		f.creates = append(f.creates, req)
		id, _ := req["input_file_id"].(string)
		if f.files[id] == nil {
			apiErr(w, http.StatusBadRequest, "no such file: "+id)
			return
		}
		b := &fakeBatch{id: f.id("batch_"), states: append([]fakeState{{"validating", 0, 0, 0}}, f.script...)}
		f.batches[b.id] = b
		reply(w, b.json())
	})
	mux.HandleFunc("GET /v1/batches", func(w http.ResponseWriter, r *http.Request) {
		var data []map[string]any
		for _, id := range slices.Sorted(maps.Keys(f.batches)) {
			data = append(data, f.batches[id].json())
		}
		reply(w, map[string]any{"object": "list", "data": data, "has_more": r.URL.Query().Get("limit") == "1"})
	})
	batch := func(h func(http.ResponseWriter, *http.Request, *fakeBatch)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b := f.batches[r.PathValue("id")]
			if b == nil {
				apiErr(w, http.StatusNotFound, "no such batch: "+r.PathValue("id"))
				return
			}
			h(w, r, b)
		}
	}
	mux.HandleFunc("GET /v1/batches/{id}", batch(func(w http.ResponseWriter, r *http.Request, b *fakeBatch) {
		reply(w, b.json())
		b.polls++
	}))
	mux.HandleFunc("POST /v1/batches/{id}/cancel", batch(func(w http.ResponseWriter, r *http.Request, b *fakeBatch) {
		s := b.state()
		b.states, b.polls = []fakeState{{"cancelling", s.total, s.completed, s.failed}}, 0
		reply(w, b.json())
	}))
	mux.HandleFunc("POST /v1/batches/{id}/retry", batch(func(w http.ResponseWriter, r *http.Request, b *fakeBatch) {
		nb := &fakeBatch{id: f.id("batch_"), states: []fakeState{{"validating", 0, 0, 0}}, retryOf: b.id}
		f.batches[nb.id] = nb
		reply(w, nb.json())
	}))
	mux.HandleFunc("GET /v1/batches/{id}/results", batch(func(w http.ResponseWriter, r *http.Request, b *fakeBatch) {
		if !terminalStatus[b.state().status] && r.URL.Query().Get("partial") != "true" {
			apiErr(w, http.StatusConflict, "batch "+b.id+" is not finished")
			return
		}
		fmt.Fprintf(w, "{\"custom_id\":\"a\",\"batch\":%q}\n{\"custom_id\":\"b\",\"batch\":%q}\n", b.id, b.id)
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apiErr(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			apiErr(w, http.StatusUnauthorized, "invalid API key")
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

// put is the object store a presigned URL points at.
func (f *fakeAPI) put(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := strings.TrimPrefix(r.URL.Path, "/bucket/")
	file := f.files[id]
	// The URL signs If-None-Match: *, as blob.PresignPut's do.
	if r.Method != http.MethodPut || file == nil || r.URL.Query().Get("X-Amz-Signature") != "abc" || r.Header.Get("If-None-Match") != "*" {
		http.Error(w, "<Error><Code>SignatureDoesNotMatch</Code></Error>", http.StatusForbidden)
		return
	}
	if file.data != nil {
		http.Error(w, "<Error><Code>PreconditionFailed</Code></Error>", http.StatusPreconditionFailed)
		return
	}
	data, _ := io.ReadAll(r.Body)
	if int64(len(data)) != file.size || r.ContentLength != file.size {
		http.Error(w, "<Error><Code>BadDigest</Code></Error>", http.StatusBadRequest)
		return
	}
	f.puts = append(f.puts, r.Header.Clone())
	file.data, file.status = data, "processed"
	f.routes = append(f.routes, "presigned")
}

// runCLI runs one client command against env with fast polling.
func runCLI(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := &cli{
		stdout: &out, stderr: &errOut, getenv: func(k string) string { return env[k] },
		pollMin: time.Millisecond, pollMax: 2 * time.Millisecond, now: time.Now,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch args[0] {
	case "batch":
		err = c.batch(ctx, args[1:])
	case "files":
		err = c.files(ctx, args[1:])
	default:
		t.Fatalf("runCLI: unknown command %q", args[0])
	}
	return out.String(), errOut.String(), err
}

func exitCode(err error) int {
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	return 1
}

func TestClientResolveConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		flags   connFlags
		wantURL string
		wantKey string
		wantErr string
	}{
		{"RELAY_URL over OPENAI_BASE_URL", map[string]string{"RELAY_URL": "http://relay:1/v1", "OPENAI_BASE_URL": "http://openai:2/v1", "RELAY_API_KEY": "k"}, connFlags{}, "http://relay:1/v1", "k", ""},
		{"OPENAI_BASE_URL when no RELAY_URL", map[string]string{"OPENAI_BASE_URL": "https://openai:2/v1", "OPENAI_API_KEY": "ok"}, connFlags{}, "https://openai:2/v1", "ok", ""},
		{"default URL", map[string]string{"RELAY_API_KEY": "k"}, connFlags{}, "http://127.0.0.1:8080/v1", "k", ""},
		{"adds /v1", map[string]string{"RELAY_URL": "http://relay:1", "RELAY_API_KEY": "k"}, connFlags{}, "http://relay:1/v1", "k", ""},
		{"trailing slash", map[string]string{"RELAY_URL": "http://relay:1/v1/", "RELAY_API_KEY": "k"}, connFlags{}, "http://relay:1/v1", "k", ""},
		{"root slash", map[string]string{"RELAY_URL": "http://relay:1/", "RELAY_API_KEY": "k"}, connFlags{}, "http://relay:1/v1", "k", ""},
		{"path prefix", map[string]string{"RELAY_URL": "https://x.example/prod", "RELAY_API_KEY": "k"}, connFlags{}, "https://x.example/prod/v1", "k", ""},
		{"no scheme", map[string]string{"RELAY_URL": "127.0.0.1:8080", "RELAY_API_KEY": "k"}, connFlags{}, "http://127.0.0.1:8080/v1", "k", ""},
		{"RELAY_API_KEY over OPENAI_API_KEY", map[string]string{"RELAY_API_KEY": "relay", "OPENAI_API_KEY": "openai"}, connFlags{}, defaultAPIURL, "relay", ""},
		{"flags over env", map[string]string{"RELAY_URL": "http://relay:1", "RELAY_API_KEY": "relay"}, connFlags{url: "http://flag:3", key: "flag"}, "http://flag:3/v1", "flag", ""},
		{"missing key", map[string]string{"RELAY_URL": "http://relay:1"}, connFlags{}, "", "", missingKeyMsg},
		{"bad scheme", map[string]string{"RELAY_URL": "ftp://relay", "RELAY_API_KEY": "k"}, connFlags{}, "", "", "want http(s)://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := resolveConfig(func(k string) string { return tt.env[k] }, tt.flags)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || exitCode(err) != 2 {
					t.Fatalf("err = %v (exit %d), want exit 2 with %q", err, exitCode(err), tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.baseURL != tt.wantURL || got.key != tt.wantKey {
				t.Errorf("got %q %q, want %q %q", got.baseURL, got.key, tt.wantURL, tt.wantKey)
			}
		})
	}
}

// closedURL is the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	// A socket bound and never listening: connections to it are refused,
	// and no parallel test's server can take its port meanwhile (a
	// listener closed at once left the port free for one, which then
	// answered).
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, false)
	dead := closedURL(t)
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantErr  []string
	}{
		{"missing key", map[string]string{"RELAY_URL": f.srv.URL}, []string{"batch", "list"}, 2, []string{missingKeyMsg}},
		{"missing key for files", map[string]string{}, []string{"files", "list"}, 2, []string{missingKeyMsg}},
		{"usage before key", map[string]string{}, []string{"batch", "status"}, 2, []string{"give one batch ID"}},
		{"unknown flag", f.env(), []string{"batch", "list", "--nope"}, 2, []string{"-nope"}},
		{"connection refused", map[string]string{"RELAY_URL": dead, "RELAY_API_KEY": testKey}, []string{"batch", "status", "batch_1"}, 1,
			[]string{"is `make dev` running at " + dead + "/v1?"}},
		{"bad key", map[string]string{"RELAY_URL": f.srv.URL, "RELAY_API_KEY": "rb-wrong"}, []string{"batch", "list"}, 1,
			[]string{"invalid API key (HTTP 401)", "check the key"}},
		{"unknown batch", f.env(), []string{"batch", "status", "batch_nope"}, 1,
			[]string{"no such batch: batch_nope (HTTP 404)", "check the id: `relay batch list`"}},
		{"unknown file", f.env(), []string{"files", "get", "file-nope"}, 1,
			[]string{"no such file: file-nope (HTTP 404)", "`relay files list`"}},
		{"OPENAI_BASE_URL ignored when RELAY_URL set", map[string]string{"RELAY_URL": f.srv.URL, "OPENAI_BASE_URL": dead, "OPENAI_API_KEY": testKey}, []string{"batch", "list"}, 0, nil},
		{"RELAY_URL with /v1/", map[string]string{"RELAY_URL": f.srv.URL + "/v1/", "RELAY_API_KEY": testKey}, []string{"files", "list"}, 0, nil},
		{"key flag", map[string]string{"RELAY_URL": f.srv.URL, "RELAY_API_KEY": "rb-wrong"}, []string{"batch", "list", "--key", testKey}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := runCLI(t, tt.env, tt.args...)
			if got := exitCode(err); got != tt.wantCode {
				t.Fatalf("exit code = %d (%v), want %d", got, err, tt.wantCode)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestClientRunDispatch(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"batch", "files"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{cmd}, &out, &errOut)
			if exitCode(err) != 2 {
				t.Errorf("relay %s: err = %v, want a usage error", cmd, err)
			}
		})
	}
}
