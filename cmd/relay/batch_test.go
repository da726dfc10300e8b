package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeInput writes n bytes of JSONL-looking, non-repeating data (so a
// reordered or dropped part shows) to a file named name.
func writeInput(t *testing.T, name string, n int) (string, []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		b.WriteString(`{"custom_id":"r` + string(rune('a'+i%26)) + `","n":` + jsonNumber(rng.Uint64()) + "}\n")
	}
	data := b.Bytes()[:n]
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

func jsonNumber(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestBatchSubmitUploads(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		size      int
		presign   bool
		wantRoute string
		wantParts []int
	}{
		{"small file in one multipart request", 1000, true, "multipart", nil},
		{"exactly 4 MiB in one request", maxRequestData, true, "multipart", nil},
		{"big file through a presigned PUT", 9<<20 + 123, true, "presigned", nil},
		{"big file through the Uploads API when presign is refused", 2*maxRequestData + 12345, false, "uploads", []int{maxRequestData, maxRequestData, 12345}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, tt.presign)
			path, data := writeInput(t, "in.jsonl", tt.size)
			stdout, _, err := runCLI(t, f.env(), "batch", "submit", path,
				"--model", "gpt-4o-mini", "--priority", "5", "--webhook-url", "http://hook.example/x",
				"--metadata", "team=ml", "--metadata", "run=7")
			if err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if !reflect.DeepEqual(f.routes, []string{tt.wantRoute}) {
				t.Errorf("routes = %v, want [%s]", f.routes, tt.wantRoute)
			}
			if tt.wantParts != nil && !reflect.DeepEqual(f.partSizes, tt.wantParts) {
				t.Errorf("part sizes = %v, want %v", f.partSizes, tt.wantParts)
			}
			for _, n := range f.partSizes {
				if n > maxRequestData {
					t.Errorf("a part has %d bytes, more than 4 MiB", n)
				}
			}
			for _, h := range f.puts {
				if h.Get("Authorization") != "" || h.Get("Content-Type") != "" {
					t.Errorf("presigned PUT sent Authorization %q, Content-Type %q; want neither", h.Get("Authorization"), h.Get("Content-Type"))
				}
			}
			if len(f.creates) != 1 {
				t.Fatalf("%d batch creates, want 1", len(f.creates))
			}
			req := f.creates[0]
			file := f.files[req["input_file_id"].(string)]
			if file == nil || !bytes.Equal(file.data, data) {
				t.Errorf("the stored file differs from the input (%d bytes stored, %d sent)", len(file.dataOrNil()), len(data))
			}
			want := map[string]any{
				"input_file_id": req["input_file_id"], "endpoint": "/v1/chat/completions", "completion_window": "24h",
				"metadata": map[string]any{"team": "ml", "run": "7"}, "priority": 5.0,
				"webhook_url": "http://hook.example/x", "model": "gpt-4o-mini",
			}
			if !reflect.DeepEqual(req, want) {
				t.Errorf("create body = %v, want %v", req, want)
			}
			if got, want := stdout, "batch_"; !strings.HasPrefix(got, want) || strings.Count(got, "\n") != 1 {
				t.Errorf("stdout = %q, want one batch id", got)
			}
		})
	}
}

func (f *fakeFile) dataOrNil() []byte {
	if f == nil {
		return nil
	}
	return f.data
}

func TestBatchSubmitUsage(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	csv, _ := writeInput(t, "in.csv", 100)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no file", []string{"batch", "submit", "--wait"}, "at least one FILE"},
		{"CSV without model", []string{"batch", "submit", csv}, "pass --model"},
		{"bad metadata", []string{"batch", "submit", csv, "--metadata", "novalue"}, "want key=value"},
		{"unknown subcommand", []string{"batch", "frobnicate"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := runCLI(t, f.env(), tt.args...)
			if exitCode(err) != 2 || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v (exit %d), want exit 2 saying %q", err, exitCode(err), tt.wantErr)
			}
		})
	}
}

func TestBatchSubmitWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   []fakeState
		wantCode int
		wantErr  string
	}{
		{"completed", []fakeState{{"in_progress", 10, 4, 0}, {"completed", 10, 10, 0}}, 0, ""},
		{"completed with failed rows", []fakeState{{"in_progress", 10, 4, 1}, {"completed", 10, 8, 2}}, 3, "completed with 2 of 10 rows failed"},
		{"cancelled", []fakeState{{"cancelling", 10, 3, 0}, {"cancelled", 10, 3, 7}}, 3, "was cancelled with 3 of 10 rows completed"},
		{"expired", []fakeState{{"expired", 10, 6, 4}}, 3, "expired: 4 of 10 rows did not complete"},
		{"failed validation", []fakeState{{"failed", 0, 0, 0}}, 3, "failed: line 3: model \"nope\" is not configured (invalid_model)"},
	}
	for _, tt := range tests {
		for _, mode := range []string{"submit --wait", "submit then wait"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				f := newFakeAPI(t, true, tt.script...)
				path, _ := writeInput(t, "in.jsonl", 500)
				var stdout, stderr string
				var err error
				if mode == "submit --wait" {
					stdout, stderr, err = runCLI(t, f.env(), "batch", "submit", path, "--wait")
				} else {
					stdout, _, err = runCLI(t, f.env(), "batch", "submit", path)
					if err != nil {
						t.Fatal(err)
					}
					_, stderr, err = runCLI(t, f.env(), "batch", "wait", strings.TrimSpace(stdout))
				}
				if got := exitCode(err); got != tt.wantCode {
					t.Fatalf("exit code = %d (%v), want %d", got, err, tt.wantCode)
				}
				if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not say %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(stdout, "batch_") {
					t.Errorf("stdout = %q, want the batch id", stdout)
				}
				if !strings.Contains(stderr, "validating: 0/? rows") {
					t.Errorf("stderr has no progress line:\n%s", stderr)
				}
			})
		}
	}
}

func TestBatchSubmitWaitManyFilesJSON(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true, fakeState{"in_progress", 2, 1, 0}, fakeState{"completed", 2, 2, 0})
	a, _ := writeInput(t, "a.jsonl", 300)
	b, _ := writeInput(t, "b.csv", 300)
	stdout, stderr, err := runCLI(t, f.env(), "batch", "submit", a, b, "--model", "m", "--wait", "--json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("stdout has %d lines, want 2 Batch objects:\n%s", len(lines), stdout)
	}
	for _, l := range lines {
		var got apiBatch
		if err := json.Unmarshal([]byte(l), &got); err != nil || got.Status != "completed" {
			t.Errorf("line %q: want a completed Batch (%v)", l, err)
		}
	}
	if strings.Count(stderr, " completed: 2 rows") != 2 {
		t.Errorf("stderr does not report both batches completed:\n%s", stderr)
	}
}

func TestBatchResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  []fakeState
		args    []string
		toFile  bool
		wantErr string
	}{
		{"completed to a file", []fakeState{{"completed", 2, 2, 0}}, nil, true, ""},
		{"completed to stdout", []fakeState{{"completed", 2, 2, 0}}, nil, false, ""},
		{"running gives 409", []fakeState{{"in_progress", 2, 1, 0}}, nil, true, "is still in_progress: wait for it or pass --partial"},
		{"running with --partial", []fakeState{{"in_progress", 2, 1, 0}}, []string{"--partial"}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, true, tt.script...)
			in, _ := writeInput(t, "in.jsonl", 100)
			id, _, err := runCLI(t, f.env(), "batch", "submit", in)
			if err != nil {
				t.Fatal(err)
			}
			id = strings.TrimSpace(id)
			f.mu.Lock()
			f.batches[id].polls = 1 // past validating
			f.mu.Unlock()
			out := filepath.Join(t.TempDir(), "results.jsonl")
			args := append([]string{"batch", "results", id}, tt.args...)
			if tt.toFile {
				args = append(args, "-o", out)
			}
			stdout, _, err := runCLI(t, f.env(), args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if _, statErr := os.Stat(out); !os.IsNotExist(statErr) {
					t.Errorf("a failed download left %s", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := stdout
			if tt.toFile {
				b, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				got = string(b)
				if stdout != "" {
					t.Errorf("stdout = %q, want nothing when writing to a file", stdout)
				}
			}
			if strings.Count(got, id) != 2 {
				t.Errorf("results = %q, want two lines of %s", got, id)
			}
		})
	}
}

func TestBatchStatusListCancelRetry(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true, fakeState{"in_progress", 10, 4, 1})
	in, _ := writeInput(t, "in.jsonl", 100)
	id, _, err := runCLI(t, f.env(), "batch", "submit", in)
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	f.mu.Lock()
	f.batches[id].polls = 1 // past validating
	f.mu.Unlock()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"status", []string{"batch", "status", id}, []string{"id", id, "rows", "/10 done"}},
		{"status --json", []string{"batch", "status", id, "--json"}, []string{`"object":"batch"`, `"id":"` + id + `"`}},
		{"list", []string{"batch", "list"}, []string{"ID", "STATUS", "ROWS", id}},
		{"list --json", []string{"batch", "list", "--limit", "5", "--json"}, []string{`"object":"list"`}},
		{"retry", []string{"batch", "retry", id}, []string{"batch_"}},
	}
	t.Run("read", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				stdout, _, err := runCLI(t, f.env(), tt.args...)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range tt.want {
					if !strings.Contains(stdout, w) {
						t.Errorf("stdout %q does not contain %q", stdout, w)
					}
				}
			})
		}
	})
	stdout, _, err := runCLI(t, f.env(), "batch", "cancel", id)
	if err != nil {
		t.Fatal(err)
	}
	if want := id + " cancelling\n"; stdout != want {
		t.Errorf("cancel: stdout = %q, want %q", stdout, want)
	}
}

// TestBatchResultsFailed: a batch that failed validation has no results
// (the API answers /results with nothing); batch results prints its errors
// on stderr and exits 3, as a failed batch does with --wait.
func TestBatchResultsFailed(t *testing.T) {
	failed := `{"id":"batch_f","object":"batch","status":"failed","endpoint":"/v1/chat/completions",
		"input_file_id":"file-1","output_file_id":null,"error_file_id":null,"failed_at":1700000100,
		"request_counts":{"total":0,"completed":0,"failed":0},
		"errors":{"object":"list","data":[
			{"code":"invalid_json","message":"line 2: invalid JSON at byte 5: invalid character 'x'","param":null,"line":2},
			{"code":"model_not_found","message":"line 4: model \"nope\" is not a configured model","param":"body.model","line":4},
			{"code":"too_many_rows","message":"the file has more than 50000 requests","param":null,"line":0}]}}`
	var resultsAsked int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/batches/batch_f":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, failed)
		case "/v1/batches/batch_f/results":
			resultsAsked++ // the API answers 200 and no lines
		default:
			apiErr(w, http.StatusNotFound, "no route "+r.URL.Path)
		}
	}))
	defer srv.Close()
	t.Setenv("RELAY_URL", srv.URL)
	t.Setenv("RELAY_API_KEY", testKey)

	out := filepath.Join(t.TempDir(), "results.jsonl")
	for name, args := range map[string][]string{
		"to stdout": {"batch", "results", "batch_f"},
		"to a file": {"batch", "results", "batch_f", "-o", out},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runLine(t, args...)
			if code != exitBatchUnsuccessful {
				t.Errorf("exit %d, want %d", code, exitBatchUnsuccessful)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			for _, want := range []string{
				"batch batch_f failed with 3 errors:\n",
				"  line 2: invalid_json: invalid JSON at byte 5: invalid character 'x'\n",
				"  line 4: model_not_found: model \"nope\" is not a configured model\n",
				"  too_many_rows: the file has more than 50000 requests\n",
				"relay: batch batch_f failed, so it has no results",
			} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed batch left %s", out)
			}
		})
	}
	if resultsAsked != 0 {
		t.Errorf("asked a failed batch for results %d times", resultsAsked)
	}

	code, stdout, _ := runLine(t, "batch", "results", "--help")
	if code != 0 || !strings.Contains(stdout, "exit code is 3") {
		t.Errorf("batch results --help (exit %d) does not document exit code 3:\n%s", code, stdout)
	}
}

// TestBatchExtensionFields: status prints Relay's extension fields of a
// Batch (priority, retry_of, dead_letter_count, cost), which an OpenAI client
// keeps beside the fields it knows; list says how to get the next page.
func TestBatchExtensionFields(t *testing.T) {
	t.Parallel()
	const b = `{"id":"batch_r","object":"batch","status":"completed","endpoint":"/v1/chat/completions","model":"gpt-4o-mini",
		"input_file_id":"file-1","output_file_id":"file-o","error_file_id":null,"completion_window":"24h","created_at":1700000000,
		"completed_at":1700000100,"request_counts":{"total":10,"completed":8,"failed":2},
		"priority":3,"retry_of":"batch_a","dead_letter_count":2,"cost":0.0123456789}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/batches/batch_r":
			io.WriteString(w, b)
		case "/v1/batches":
			io.WriteString(w, `{"object":"list","data":[`+b+`],"first_id":"batch_r","last_id":"batch_r","has_more":true}`)
		default:
			apiErr(w, http.StatusNotFound, "no route "+r.URL.Path)
		}
	}))
	defer srv.Close()
	env := map[string]string{"RELAY_URL": srv.URL, "RELAY_API_KEY": testKey}
	stdout, _, err := runCLI(t, env, "batch", "status", "batch_r")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"status        completed\n", "rows          10/10 done, 2 failed\n", "model         gpt-4o-mini\n",
		"priority      3\n", "output file   file-o\n", "retry of      batch_a\n", "dead letters  2\n", "cost          $0.012346\n", "ended         2023-11-14T22:15:00Z\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "error file") {
		t.Errorf("status shows a null error file:\n%s", stdout)
	}
	stdout, stderr, err := runCLI(t, env, "batch", "list", "--limit", "1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "batch_r  completed  10/10  2       $0.012346  gpt-4o-mini  2023-11-14T22:13:20Z\n"; !strings.HasSuffix(stdout, want) {
		t.Errorf("list:\n%s\nwant a row %q", stdout, want)
	}
	if stderr != "more: relay batch list --after batch_r\n" {
		t.Errorf("list stderr = %q, want the next page's command", stderr)
	}
}
