package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCLIOnTheAPI runs the built CLI's batch and files commands against the
// real handlers (cmd/relay's own tests use a fake API): a small file goes in
// one request and one over 4 MiB through the presigned upload, a batch with
// a failing row exits 3 under --wait, and its retry, results and status are
// what the API says.
func TestCLIOnTheAPI(t *testing.T) {
	t.Parallel()
	bin := relayBinary(t)
	rt := runtime(t)
	key, err := rt.Key(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"RELAY_URL=" + rt.URL, "RELAY_API_KEY=" + key, "OPENAI_API_KEY=", "OPENAI_BASE_URL=", "HOME=" + t.TempDir()}
	relay := func(wantCode int, args ...string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != wantCode {
			t.Fatalf("relay %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, &out, &errOut)
		}
		return out.String(), errOut.String()
	}
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	small := jsonlRows([]row{{id: "a", content: "hello"}, {id: "b", content: "no [[mock:400]]"}})
	big := jsonlRows(nRows(4<<20/150+2000, strings.Repeat("x", 100)))
	if len(big) <= 4<<20 {
		t.Fatalf("big input is %d bytes, want over 4 MiB", len(big))
	}
	stdout, _ := relay(0, "files", "upload", write("small.jsonl", small), write("big.jsonl", big), "--json")
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var f struct{ ID, Status string }
		if err := json.Unmarshal([]byte(line), &f); err != nil || f.Status != "processed" {
			t.Fatalf("upload printed %q, want a processed File (%v)", line, err)
		}
		ids = append(ids, f.ID)
	}
	if len(ids) != 2 {
		t.Fatalf("upload printed %d Files, want 2", len(ids))
	}
	if stdout, _ := relay(0, "files", "list"); !strings.Contains(stdout, ids[0]) || !strings.Contains(stdout, "big.jsonl") {
		t.Errorf("files list:\n%s\nwant both files", stdout)
	}
	if stdout, _ := relay(0, "files", "get", ids[1]); !strings.Contains(stdout, "big.jsonl") || !strings.Contains(stdout, "processed") {
		t.Errorf("files get:\n%s", stdout)
	}
	copyPath := filepath.Join(dir, "copy.jsonl")
	relay(0, "files", "content", ids[1], "-o", copyPath)
	if got, err := os.ReadFile(copyPath); err != nil || !bytes.Equal(got, big) {
		t.Errorf("files content -o: %d bytes (%v), want the %d uploaded", len(got), err, len(big))
	}
	if stdout, _ := relay(0, "files", "delete", ids[1]); stdout != "deleted "+ids[1]+"\n" {
		t.Errorf("files delete: %q", stdout)
	}
	if _, stderr := relay(1, "files", "get", ids[1]); !strings.Contains(stderr, "(HTTP 404)") || !strings.Contains(stderr, "relay files list") {
		t.Errorf("files get of a deleted file: %q", stderr)
	}

	// A quote uploads the file, answers and deletes the upload, running nothing.
	stdout, _ = relay(0, "batch", "quote", write("quote.jsonl", small))
	if !regexp.MustCompile(`\ngpt-4o-mini +2 +`).MatchString(stdout) || !strings.Contains(stdout, "direct (this batch)") {
		t.Errorf("batch quote:\n%s", stdout)
	}
	if stdout, _ := relay(0, "files", "list"); strings.Contains(stdout, "quote.jsonl") {
		t.Errorf("files list after a quote:\n%s\nwant the quoted upload deleted", stdout)
	}
	if n := rt.Mock.Stats().Requests; n != 0 {
		t.Errorf("the mock got %d requests from a quote", n)
	}

	stdout, stderr := relay(3, "batch", "submit", write("in.jsonl", small), "--wait", "--priority", "2", "--metadata", "team=ml")
	id := strings.TrimSpace(stdout)
	if !regexp.MustCompile(`^batch_\w+$`).MatchString(id) || !strings.Contains(stderr, "completed with 1 of 2 rows failed") {
		t.Fatalf("submit --wait: stdout %q, stderr:\n%s", stdout, stderr)
	}
	if stdout, _ := relay(0, "batch", "status", id); !strings.Contains(stdout, "2/2 done, 1 failed") || !regexp.MustCompile(`\npriority +2\n`).MatchString(stdout) {
		t.Errorf("batch status:\n%s", stdout)
	}
	if stdout, _ := relay(0, "batch", "list", "--limit", "5"); !strings.Contains(stdout, id) {
		t.Errorf("batch list:\n%s", stdout)
	}
	if stdout, _ := relay(0, "batch", "rows", id, "--failed"); !regexp.MustCompile(`\n1 +b +failed +gpt-4o-mini `).MatchString(stdout) || strings.Count(stdout, "\n") != 2 {
		t.Errorf("batch rows --failed:\n%s", stdout)
	}
	stdout, _ = relay(0, "batch", "results", id)
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); len(lines) != 2 || !strings.Contains(lines[0], `"custom_id":"a"`) || !strings.Contains(lines[1], `"custom_id":"b"`) {
		t.Errorf("batch results:\n%s", stdout)
	}
	stdout, _ = relay(0, "batch", "retry", id)
	retry := strings.TrimSpace(stdout)
	if !strings.HasPrefix(retry, "batch_") || retry == id {
		t.Fatalf("batch retry printed %q", stdout)
	}
	// The retried row fails again.
	stdout, _ = relay(3, "batch", "wait", retry, "--json")
	var b struct {
		Status  string `json:"status"`
		RetryOf string `json:"retry_of"`
	}
	if err := json.Unmarshal([]byte(stdout), &b); err != nil || b.Status != "completed" || b.RetryOf != id {
		t.Errorf("batch wait --json: %s (%v)", stdout, err)
	}
}
