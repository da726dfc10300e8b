//go:build deploy

package localstack

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/local/deployed"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/local/rie"
	"github.com/relaybatch/relay/internal/resources"
)

// syncBuffer collects the sandboxes' output, written from many processes'
// pipes at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail is the end of the sandboxes' output, for a failure's message.
func (s *syncBuffer) tail() string {
	out := s.String()
	return out[max(0, len(out)-6000):]
}

// prepareLambda builds the seven bootstraps for this machine and stages
// them with the deployed stack's environments (rie.Prepare), the mock
// provider moved to mock. The webhook policy is the local runtime's, as
// in-process: receivers on this machine over http.
func prepareLambda(t *testing.T, cfg aws.Config, st *deployed.Stack, dir string, models []byte, out *syncBuffer) map[string]*rie.Function {
	t.Helper()
	names := make([]string, 0, 7)
	for _, f := range resources.Define("relay").Functions {
		names = append(names, f.Name)
	}
	began := time.Now()
	fns, err := rie.Prepare(context.Background(), rie.Setup{
		Root: "..", CdkOut: dir, BuildDir: "../build", Stack: st, Prefix: "relay", Names: names, AWS: cfg, Models: models,
		Extra:  map[string]string{"RELAY_ALLOW_PRIVATE_WEBHOOKS": "true", "RELAY_ALLOW_HTTP_WEBHOOKS": "true"},
		Output: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("emulator and %d bootstraps built and staged in %v", len(fns), time.Since(began).Round(100*time.Millisecond))
	for _, f := range fns {
		t.Cleanup(f.Close)
	}
	return fns
}

// lambdaOnDeployed runs the seven bootstraps under the Lambda Runtime
// Interface Emulator on the deployed stack, each with its deployed
// environment, fed by the local runtime's event-source mapping, API front
// and schedule firer: a batch through openai-go end to end (upload,
// create, rows, finalize, the output read from the streamed route, its
// webhook), a cron template's firing and its cancel, and a message batch
// through anthropic-sdk-go with its results streamed.
func lambdaOnDeployed(t *testing.T, cfg aws.Config, st *deployed.Stack, tpl cfnTemplate, dir string) {
	mock := freeAddr(t)
	models := bundleModels(t, st, tpl, dir, mock)
	out := &syncBuffer{}
	fns := prepareLambda(t, cfg, st, dir, models, out)
	t.Run("env", func(t *testing.T) { lambdaEnvMissing(t, fns) })
	t.Run("batch", func(t *testing.T) { lambdaBatch(t, cfg, st, fns, models, mock, out) })
	if n, _ := strconv.Atoi(os.Getenv("RELAY_RIE_BENCH_ROWS")); n > 0 {
		t.Run("ratio", func(t *testing.T) { lambdaRatio(t, cfg, st, fns, models, mock, tpl, n) })
	}
}

// lambdaRatio, run by hand for BENCHMARKS.md "Functions under the Lambda
// RIE", times one batch of rows rows from create to completed with the
// local runtime on the deployed stack, in process and then in lambda mode
// (the same pollers, concurrency and mock provider):
//
//	RELAY_RIE_BENCH_ROWS=2000 go test -tags deploy -count=1 -run 'TestReadmeDeployEmulatorWalkthrough/lambda/ratio' -v ./localstack
func lambdaRatio(t *testing.T, cfg aws.Config, st *deployed.Stack, fns map[string]*rie.Function, models []byte, mock string, tpl cfnTemplate, rows int) {
	run := func(lambda map[string]*rie.Function, models []byte, mock string) time.Duration {
		rt := onStack(t, cfg, st, models, mock, func(o *localrun.Options) { o.Lambda = lambda })
		defer rt.Close()
		c, _ := client(t, rt, "bench")
		f := upload(t, c, "in.jsonl", jsonlRows(nRows(rows, "ratio")))
		began := time.Now()
		b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
		took := time.Since(began)
		if b.Status != "completed" || b.RequestCounts.Completed != int64(rows) {
			t.Fatalf("batch %s: %s, %d of %d", b.ID, b.Status, b.RequestCounts.Completed, rows)
		}
		return took
	}
	inMock := freeAddr(t)
	in := run(nil, bundleModels(t, st, tpl, cdkOut, inMock), inMock)
	before := map[string]rie.Stats{}
	for name, f := range fns {
		before[name] = f.Stats()
	}
	lam := run(fns, models, mock)
	t.Logf("%d rows from create to completed: in process %v, in lambda mode %v (ratio %.2f)", rows, in.Round(10*time.Millisecond),
		lam.Round(10*time.Millisecond), lam.Seconds()/in.Seconds())
	for name, f := range fns {
		s, b := f.Stats(), before[name]
		t.Logf("%-10s %d invocations in lambda mode (%d cold)", name, s.Cold+s.Warm-b.Cold-b.Warm, s.Cold-b.Cold)
	}
}

func lambdaBatch(t *testing.T, cfg aws.Config, st *deployed.Stack, fns map[string]*rie.Function, models []byte, mock string, out *syncBuffer) {
	ctx := context.Background()
	defer func() {
		if t.Failed() {
			t.Logf("the sandboxes' output, last lines:\n%s", out.tail())
		}
	}()
	clock := &fakeClock{t: time.Now().Add(time.Hour).Truncate(time.Minute)}
	rt := onStack(t, cfg, st, models, mock, func(o *localrun.Options) {
		o.Lambda, o.SchedulerClock, o.SchedulerRefresh = fns, clock.Now, 100*time.Millisecond
	})
	t.Cleanup(rt.Close)

	// A batch with a webhook, end to end.
	c, key := client(t, rt, "acme")
	rcv := newHookReceiver(t, nil)
	rows := nRows(12, "lambda")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	b := waitBatch(t, c, createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", rcv.URL)).ID)
	if b.Status != "completed" {
		t.Fatalf("batch %s: %s (%+v)", b.ID, b.Status, b.Errors)
	}
	res, errs := checkInvariant(t, c, b, idsOf(rows))
	if len(errs) != 0 || len(res) != len(rows) || !strings.Contains(string(res["r0003"].Response.Body), "echo: lambda 3") {
		t.Fatalf("outputs %d (r0003 %s), errors %v", len(res), res["r0003"].Response.Body, errs)
	}
	req := rcv.waitType(t, "batch.completed")[0]
	secret, err := auth.WebhookSecret(ctx, rt.App.Store, "acme")
	if err != nil {
		t.Fatal(err)
	}
	hooks := openai.NewClient(option.WithAPIKey("unused"), option.WithWebhookSecret(secret))
	ev, err := hooks.Webhooks.Unwrap(req.body, req.header)
	if err != nil || ev.AsBatchCompleted().Data.ID != b.ID {
		t.Fatalf("webhook: %v, %s", err, req.body)
	}

	// A template fires a run through the scheduler function, and is cancelled.
	status, body := postBatch(t, rt, key, map[string]any{
		"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h", "schedule": "* * * * *",
	})
	if status != 200 {
		t.Fatalf("create template: %d %s", status, body)
	}
	tpl := decodeBatch(t, body)
	clock.Add(time.Minute + time.Second)
	var runs []apiBatch
	eventually(t, "a run of the template", time.Minute, func() bool {
		runs = runsOf(t, rt, key, tpl.ID)
		return len(runs) > 0
	})
	if run := waitBatch(t, c, runs[0].ID); run.Status != "completed" {
		t.Fatalf("template run %s: %s", run.ID, run.Status)
	}
	if status, body := rawDo(t, rt, key, "POST", "/v1/batches/"+tpl.ID+"/cancel", nil); status != 200 || decodeBatch(t, body).Status != "cancelled" {
		t.Fatalf("cancel template: %d %s", status, body)
	}

	// A message batch, its results streamed.
	ac, _ := anthropicClient(t, rt, "acme")
	mb := newMessageBatch(t, ac, msgRequest("m1", "claude-haiku-4-5", "one"), msgRequest("m2", "claude-haiku-4-5", "two"))
	got := messageResults(t, ac, waitEnded(t, ac, mb.ID), []string{"m1", "m2"})
	if got["m1"].Result.Type != "succeeded" {
		t.Fatalf("message m1: %s", got["m1"].Result.Type)
	}

	// The deadletter function only runs for chunks that keep failing: its
	// init, with an empty event.
	if _, err := fns["deadletter"].Invoke(ctx, "", []byte(`{"Records":[]}`)); err != nil {
		t.Fatalf("deadletter: %v", err)
	}
	for name, f := range fns {
		s := f.Stats()
		if s.Cold+s.Warm == 0 {
			t.Errorf("function %s was never invoked", name)
		}
		t.Logf("%-10s %d cold invocations (%v each), %d warm (%v each)", name, s.Cold, avg(s.ColdTotal, s.Cold), s.Warm, avg(s.WarmTotal, s.Warm))
	}
}

func avg(d time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return (d / time.Duration(n)).Round(10 * time.Microsecond)
}

// lambdaEnvMissing runs each function's bootstrap with its deployed
// environment less one variable the code needs (app.LambdaVars, a
// different one for each): its init must fail, naming it, before the
// invocation gets an answer.
func lambdaEnvMissing(t *testing.T, fns map[string]*rie.Function) {
	ctx := context.Background()
	out := &syncBuffer{}
	i := 0
	for name, f := range fns {
		gone := app.LambdaVars[i%len(app.LambdaVars)]
		i++
		if f.Env[gone] == "" {
			t.Errorf("%s: the template gives it no %s", name, gone)
			continue
		}
		broken := &rie.Function{Name: f.Name, Env: maps.Clone(f.Env), Timeout: f.Timeout, Memory: f.Memory, TaskDir: f.TaskDir,
			RIE: f.RIE, Region: f.Region, Extra: f.Extra, Output: out}
		delete(broken.Env, gone)
		_, err := broken.Invoke(ctx, "", []byte(`{"Records":[]}`))
		broken.Close()
		line := `"msg":"init failed","function":"` + name + `"`
		if err == nil || !strings.Contains(out.String(), line) || !strings.Contains(out.String(), gone+" is not set") {
			t.Errorf("%s without %s: invoke %v; want it to fail with %s naming it; output:\n%s", name, gone, err, line, out.tail())
		}
	}
}

// bundleModels is the models file of the api function's bundle, the mock
// provider moved to mock.
func bundleModels(t *testing.T, st *deployed.Stack, tpl cfnTemplate, dir, mock string) []byte {
	t.Helper()
	env, err := st.Env()
	if err != nil {
		t.Fatal(err)
	}
	var bundle string
	for _, r := range tpl.Resources {
		if r.Type == "AWS::Lambda::Function" && r.Properties["FunctionName"] == "relay-api" {
			bundle, _ = r.Metadata["aws:asset:path"].(string)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, bundle, filepath.Base(env.ModelsPath)))
	if err != nil {
		t.Fatalf("the api bundle's models file (RELAY_CONFIG=%s): %v", env.ModelsPath, err)
	}
	return []byte(strings.ReplaceAll(string(raw), "127.0.0.1:8090", mock))
}
