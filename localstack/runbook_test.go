package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// TestRunbookFailureModes reproduces two of docs/runbook.md's failure
// modes and runs the entry's own commands, the CLI built from this tree
// and the AWS CLI on the emulator:
//
//   - "every-row-401": a model whose secret holds the stack's placeholder,
//     which the provider (the mock, Options.RevokedKeys) refuses. relay
//     batch rows shows each row's 401, aws secretsmanager describe-secret
//     the secret; put-secret-value puts the real key and, once the
//     executors read it again (within 5 minutes; here the runtime drops
//     the keys it read), relay batch retry runs the rows, which complete.
//   - "input-file-deleted": the input's object is deleted from the bucket
//     (not through the API, which waits for the batches reading it) while
//     its batch runs; the batch fails with input_file_missing, which relay
//     batch status shows; the input uploaded and the batch created again
//     completes.
func TestRunbookFailureModes(t *testing.T) {
	t.Parallel()
	bin := relayBinary(t)
	if _, err := exec.LookPath("aws"); err != nil {
		t.Fatalf("the runbook's checks use the AWS CLI: %v", err)
	}
	// The emulator's secrets outlive a run: a name of this run's own.
	keyEnv := fmt.Sprintf("RELAY_LOCKED_KEY_%d", time.Now().UnixNano())
	rt := runtime(t, func(o *localrun.Options) {
		models := strings.Replace(testModels, "models:\n", "models:\n  - {name: locked, provider: openai, base_url: http://MOCK/v1, api_key_env: "+keyEnv+", max_concurrency: 4, timeout: 5s}\n", 1)
		m, err := config.ParseModels([]byte(replaceMock(models, o.MockAddr)))
		if err != nil {
			t.Fatal(err)
		}
		o.Models = m
		o.MockOptions.RevokedKeys = []string{"placeholder"}
	})
	// The local runtime puts a key for the mock's models in the
	// environment, which comes before Secrets Manager; without it the
	// locked model's key comes from its secret, as in a deployment.
	os.Unsetenv(keyEnv)
	c, key := client(t, rt, "acme")
	run := func(t *testing.T, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, &out, &errOut)
		}
		return out.String()
	}
	home := t.TempDir()
	relay := func(t *testing.T, args ...string) string {
		t.Helper()
		return run(t, []string{"RELAY_URL=" + rt.URL, "RELAY_API_KEY=" + key, "HOME=" + home}, bin, args...)
	}
	awsCLI := func(t *testing.T, args ...string) string {
		t.Helper()
		return run(t, []string{"AWS_ENDPOINT_URL=" + emutest.Endpoint(t), "AWS_DEFAULT_REGION=us-east-1",
			"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "HOME=" + home, "PATH=" + os.Getenv("PATH")}, "aws", args...)
	}

	t.Run("every-row-401", func(t *testing.T) {
		secret := rt.App.Env.SecretPrefix + keyEnv
		// What the stack does: a secret with a placeholder (infra/secrets.go).
		awsCLI(t, "secretsmanager", "create-secret", "--name", secret, "--secret-string", "placeholder")
		rows := nRows(6, "locked")
		for i := range rows {
			rows[i].model = "locked"
		}
		b := waitBatch(t, c, createBatch(t, c, upload(t, c, "locked.jsonl", jsonlRows(rows)).ID).ID)
		if b.RequestCounts.Failed != int64(len(rows)) {
			t.Fatalf("batch %s %+v: want every row failed", b.Status, b.RequestCounts)
		}
		// Check: each row's last answer is the provider's 401.
		lines := strings.Split(strings.TrimSpace(relay(t, "batch", "rows", b.ID, "--failed", "--json")), "\n")
		for _, l := range lines {
			var g struct {
				LastStatus *int `json:"last_status"`
			}
			if err := json.Unmarshal([]byte(l), &g); err != nil || g.LastStatus == nil || *g.LastStatus != 401 {
				t.Errorf("relay batch rows: %s, want last_status 401", l)
			}
		}
		if len(lines) != len(rows) {
			t.Errorf("relay batch rows --failed: %d rows, want %d", len(lines), len(rows))
		}
		if out := awsCLI(t, "secretsmanager", "describe-secret", "--secret-id", secret); !strings.Contains(out, "LastChangedDate") {
			t.Errorf("describe-secret: %s, want its LastChangedDate", out)
		}
		// Fix: the real key; the executors read it within 5 minutes.
		awsCLI(t, "secretsmanager", "put-secret-value", "--secret-id", secret, "--secret-string", "sk-the-real-one")
		rt.App.ForgetKeys() // what the 5 minutes do
		retry := strings.TrimSpace(relay(t, "batch", "retry", b.ID))
		done := waitBatch(t, c, retry)
		if done.Status != "completed" || done.RequestCounts.Completed != int64(len(rows)) || done.RequestCounts.Failed != 0 {
			t.Fatalf("retry %s: %s %+v, want every row completed", retry, done.Status, done.RequestCounts)
		}
	})

	t.Run("input-file-deleted", func(t *testing.T) {
		ctx := context.Background()
		rows := nRows(60, "[[mock:sleep=300ms]] in")
		f := upload(t, c, "in.jsonl", jsonlRows(rows))
		rec, err := rt.App.Store.GetFile(ctx, "acme", f.ID)
		if err != nil || len(rec.Objects) == 0 {
			t.Fatalf("file record %+v: %v", rec, err)
		}
		b := createBatch(t, c, f.ID)
		waitFor(t, "the batch's first rows", func() bool {
			got, err := c.Batches.Get(ctx, b.ID)
			return err == nil && got.RequestCounts.Completed > 0
		})
		// An operator's (or a lifecycle rule's) delete of the object itself.
		if err := rt.App.Blobs.Delete(ctx, rec.Objects...); err != nil {
			t.Fatal(err)
		}
		failed := waitBatch(t, c, b.ID)
		if failed.Status != "failed" || failed.RequestCounts.Completed == int64(len(rows)) {
			t.Fatalf("batch whose input object went: %s %+v, want failed before every row ran", failed.Status, failed.RequestCounts)
		}
		// Check: relay batch status names the error.
		if out := relay(t, "batch", "status", b.ID); !strings.Contains(out, "input_file_missing") {
			t.Errorf("relay batch status:\n%s\nwant input_file_missing", out)
		}
		// Fix: upload the input again and create the batch again.
		again := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
		if again.Status != "completed" || again.RequestCounts.Completed != int64(len(rows)) {
			t.Fatalf("the batch created again: %s %+v, want completed", again.Status, again.RequestCounts)
		}
		checkInvariant(t, c, again, idsOf(rows))
	})
}
