package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/esm"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
)

// TestAdminRunbook runs docs/runbook.md's own commands, with the built CLI,
// on two failures it describes. The tick runs only when the test sends it
// (relay admin tick), so nothing else recovers what the commands fix.
//
//   - "DispatchDLQDepth": a batch's plan fails every delivery and lands in
//     the dispatch DLQ; relay admin dlq list shows it, relay admin dlq
//     redrive sends it back, and the batch completes with each row run
//     once.
//   - "chunk-stuck": an executor dies before it runs a chunk; relay admin
//     batch inspect names the ended lease, and relay admin tick hands the
//     chunk to a new run.
//
// Settings apart from the shipped ones, for time: the dispatch queue's
// visibility and the dispatcher's timeout are three seconds (a plan
// reaches its DLQ after five quick receives, not ten minutes) and the lease three seconds (shortLease).
func TestAdminRunbook(t *testing.T) {
	t.Parallel()
	bin := relayBinary(t)
	var failPlans, crashNextChunk atomic.Bool
	rt := runtime(t, shortLease, func(o *localrun.Options) {
		o.TickEvery = time.Hour // ticks only by relay admin tick
		queueTimes(o, resources.Dispatch, 3*time.Second, 3*time.Second)
		o.OnInvoke = func(fn string, ev events.SQSEvent) error {
			for _, m := range messagesOf(ev) {
				if fn == "dispatcher" && m.Type == msg.Plan && failPlans.Load() {
					return esm.ErrCrash
				}
				if fn == "executor" && m.Type == msg.Chunk && crashNextChunk.CompareAndSwap(true, false) {
					return esm.ErrCrash
				}
			}
			return nil
		}
	})
	env := []string{"AWS_ENDPOINT_URL=" + emutest.Endpoint(t), "RELAY_PREFIX=" + rt.App.Env.Prefix, "HOME=" + t.TempDir()}
	relay := func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("relay %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, &out, &errOut)
		}
		return out.String()
	}
	c, key := client(t, rt, "acme")

	t.Run("DispatchDLQDepth", func(t *testing.T) {
		failPlans.Store(true)
		rows := nRows(25, "dlq")
		b := createBatch(t, c, upload(t, c, "dlq.jsonl", jsonlRows(rows)).ID)
		var listed []json.RawMessage
		waitFor(t, "plan message in the dispatch DLQ", func() bool {
			listed = nil
			if err := json.Unmarshal([]byte(relay(t, "admin", "dlq", "list", "dispatch")), &listed); err != nil {
				t.Fatal(err)
			}
			return len(listed) == 1
		})
		var m struct {
			Batch string `json:"batch_id"`
			Type  string `json:"type"`
		}
		raw := relay(t, "admin", "dlq", "list", "dispatch", "--batch", b.ID)
		var ms []json.RawMessage
		if err := json.Unmarshal([]byte(raw), &ms); err != nil || len(ms) != 1 {
			t.Fatalf("dlq list --batch %s: %s (%v), want its one plan message", b.ID, raw, err)
		}
		if err := json.Unmarshal(ms[0], &m); err != nil || m.Batch != b.ID || m.Type != msg.Plan {
			t.Fatalf("dlq list: %s, want the plan of %s", ms[0], b.ID)
		}
		if got, err := c.Batches.Get(context.Background(), b.ID); err != nil || got.Status != "validating" {
			t.Fatalf("batch before the redrive: %v %v, want validating", got.Status, err)
		}
		failPlans.Store(false)
		if out := relay(t, "admin", "dlq", "redrive", "dispatch", "--batch", b.ID); !strings.HasPrefix(out, "1 message(s)") {
			t.Fatalf("redrive printed %q, want 1 message moved", out)
		}
		done := waitBatch(t, c, b.ID)
		if done.Status != "completed" {
			t.Fatalf("after the redrive: %s, want completed", done.Status)
		}
		checkAccounting(t, rt, c, key, done, idsOf(rows))
		if got := rt.Mock.Stats().Requests; got != int64(len(rows)) {
			t.Errorf("upstream requests %d, want %d: each row once", got, len(rows))
		}
		if out := strings.TrimSpace(relay(t, "admin", "dlq", "list", "dispatch")); out != "[]" {
			t.Errorf("dispatch DLQ after the redrive: %s, want empty", out)
		}
	})

	t.Run("audit-trail", func(t *testing.T) {
		rows := nRows(15, "audited")
		b := waitBatch(t, c, createBatch(t, c, upload(t, c, "audit.jsonl", jsonlRows(rows)).ID).ID)
		keyID := submitterKeyID(t, rt, b.ID)
		var entries []struct {
			KeyID      string `json:"key_id"`
			OnBehalfOf string `json:"on_behalf_of"`
			Action     string `json:"action"`
			Outcome    string `json:"outcome"`
		}
		actions := map[string]int{}
		// The executor writes its entries as its invocation ends, which
		// may be after the batch completes.
		waitFor(t, "the entries of both chunks run", func() bool {
			entries = nil
			if err := json.Unmarshal([]byte(relay(t, "admin", "audit", "query", "--batch", b.ID)), &entries); err != nil {
				t.Fatal(err)
			}
			clear(actions)
			for _, e := range entries {
				actions[e.Action]++
			}
			return actions["rows.run"] >= 2 // 15 rows in chunks of 10
		})
		for _, e := range entries {
			if e.Action == "rows.run" && (e.OnBehalfOf != keyID || e.KeyID != "service:executor") {
				t.Errorf("entry %+v: want rows run by the executor on behalf of %s", e, keyID)
			}
		}
		if actions["rows.run"] != 2 {
			t.Errorf("entries of %s: %v, want its 2 chunks run once each", b.ID, actions)
		}
		created := 0
		var mine []struct {
			Action, Outcome string
		}
		json.Unmarshal([]byte(relay(t, "admin", "audit", "query", "--key", keyID)), &mine)
		for _, e := range mine {
			if e.Action == "POST /v1/batches" && e.Outcome == "200" {
				created++
			}
		}
		if created < 2 {
			t.Errorf("key %s's entries %+v: want its batch creates", keyID, mine)
		}
		if out := relay(t, "admin", "audit", "verify"); !strings.Contains(out, `"breaks": null`) {
			t.Fatalf("verify: %s", out)
		}
		// One byte of one object altered: verify names it.
		ctx := context.Background()
		keys, err := rt.App.Blobs.List(ctx, "audit/")
		if err != nil || len(keys) < 3 {
			t.Fatalf("audit objects %v (%v)", keys, err)
		}
		victim := keys[1]
		rc, err := rt.App.Blobs.Get(ctx, victim)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rc)
		rc.Close()
		body[len(body)-5] ^= 0x01
		if err := rt.App.Blobs.Put(ctx, victim, bytes.NewReader(body), int64(len(body))); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "admin", "audit", "verify")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), victim) {
			t.Errorf("verify after altering %s: %v\n%s\nwant a failure naming it", victim, err, out)
		}
	})

	t.Run("chunk-stuck", func(t *testing.T) {
		before := rt.Mock.Stats().Requests
		crashNextChunk.Store(true)
		rows := nRows(25, "stuck")
		b := createBatch(t, c, upload(t, c, "stuck.jsonl", jsonlRows(rows)).ID)
		var report struct {
			Status   string   `json:"status"`
			Problems []string `json:"problems"`
			Claimed  []struct {
				Chunk int    `json:"chunk"`
				Run   string `json:"run"`
			} `json:"claimed"`
		}
		waitFor(t, "an ended lease in batch inspect", func() bool {
			// --tenant: until its plan is recorded a batch has no chunks to name it
			if err := json.Unmarshal([]byte(relay(t, "admin", "batch", "inspect", b.ID, "--tenant", "acme")), &report); err != nil {
				t.Fatal(err)
			}
			for _, p := range report.Problems {
				if strings.HasPrefix(p, "lease-expired:") {
					return true
				}
			}
			return false
		})
		if crashNextChunk.Load() || report.Status != "in_progress" || len(report.Claimed) == 0 {
			t.Fatalf("inspect: %+v, want an in-progress batch with the crashed chunk claimed", report)
		}
		relay(t, "admin", "tick")
		done := waitBatch(t, c, b.ID)
		if done.Status != "completed" {
			t.Fatalf("after the tick: %s, want completed", done.Status)
		}
		checkInvariant(t, c, done, idsOf(rows)) // the tenant's usage holds the first batch's too
		if got := rt.Mock.Stats().Requests - before; got != int64(len(rows)) {
			t.Errorf("upstream requests %d, want %d: the crashed run sent none", got, len(rows))
		}
		if err := json.Unmarshal([]byte(relay(t, "admin", "batch", "inspect", b.ID)), &report); err != nil || len(report.Problems) != 0 {
			t.Errorf("inspect after completion: %+v (%v), want no problems", report, err)
		}
	})
}
