//go:build deploy

package localstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/deployed"
	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/resources"
)

// cdkOut is the cloud assembly that make synth writes, and make deploy
// would ship; make test synthesizes it before the tests run.
const cdkOut = "../cdk.out"

// deployBudget is how long cdk deploy of the synthesized stack may take on
// the emulator: under a minute after synth.
const deployBudget = time.Minute

// template is the synthesized template, as far as these tests read it.
type cfnTemplate struct {
	Resources map[string]struct {
		Type       string         `json:"Type"`
		Properties map[string]any `json:"Properties"`
		Metadata   map[string]any `json:"Metadata"`
	} `json:"Resources"`
}

func readTemplate(t *testing.T, dir string) cfnTemplate {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "relay.template.json"))
	if err != nil {
		t.Fatalf("%v: run make synth (make test does) first", err)
	}
	var tpl cfnTemplate
	if err := json.Unmarshal(b, &tpl); err != nil {
		t.Fatal(err)
	}
	return tpl
}

// deploy runs localstack/deploy.sh, as make deploy-emulator does, with the
// assembly in dir onto a fresh emulator of its own, and returns the
// emulator's SDK configuration, the script's output and how long it took.
func deploy(t *testing.T, dir string) (aws.Config, string, time.Duration, error) {
	t.Helper()
	ctx := context.Background()
	ep, stop, err := emulator.StartOwn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	cfg, err := emulator.Config(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("./deploy.sh", dir, filepath.Join(t.TempDir(), "outputs.json"))
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+ep)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return cfg, string(out), time.Since(start), err
}

// checkDeployedStack checks the stack relay that make deploy-emulator put
// on the emulator of cfg (out is what it printed, dir the cloud assembly
// it deployed): the deploy within its budget, through the service APIs
// what CloudFormation created, then a batch with the local runtime on the
// deployed resources: the functions' code and the template must agree on
// every name and variable. TestReadmeDeployEmulatorWalkthrough calls it
// on the stack its README commands deployed, so make test deploys the
// stack once for both.
func checkDeployedStack(t *testing.T, cfg aws.Config, out, dir string) {
	tpl := readTemplate(t, dir)
	// The budget is the deploy's; bootstrap is once per account and region.
	var secs int
	if m := regexp.MustCompile(`in (\d+)s \(cdk deploy\)`).FindStringSubmatch(out); m != nil {
		secs, _ = strconv.Atoi(m[1])
	} else {
		t.Errorf("make deploy-emulator printed no cdk deploy time:\n%s", out)
	}
	t.Logf("cdk deploy %ds", secs)
	if d := time.Duration(secs) * time.Second; d > deployBudget {
		t.Errorf("cdk deploy took %v, want under %v", d, deployBudget)
	}
	ctx := context.Background()
	st, err := deployed.Read(ctx, cfg, "relay")
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "CREATE_COMPLETE" {
		t.Fatalf("stack status %s", st.Status)
	}
	// The executor's maximum is sized for the models synthesized with
	// (infra: relay.yaml's max_concurrency, added up).
	models, err := config.LoadModels("../relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	slots := 0
	for _, m := range models.Models {
		slots += m.MaxConcurrency
	}
	set := resources.Define("relay").SizedFor(slots)
	t.Run("outputs", func(t *testing.T) { checkOutputs(t, st) })
	t.Run("table", func(t *testing.T) { checkTable(t, cfg, st, set) })
	t.Run("queues", func(t *testing.T) { checkQueues(t, cfg, set) })
	t.Run("functions", func(t *testing.T) { checkFunctions(t, cfg, st, set) })
	t.Run("secrets", func(t *testing.T) { checkSecrets(t, cfg, tpl) })
	t.Run("tick", func(t *testing.T) { checkTick(t, cfg, set) })
	t.Run("alarms", func(t *testing.T) { checkAlarms(t, cfg, tpl, len(models.Models)) })
	if t.Failed() {
		return
	}
	t.Run("batch", func(t *testing.T) { batchOnDeployed(t, cfg, st, tpl, dir) })
	t.Run("lambda", func(t *testing.T) { lambdaOnDeployed(t, cfg, st, tpl, dir) })
}

func checkOutputs(t *testing.T, st *deployed.Stack) {
	want := map[string]string{
		"TableName":    "relay",
		"BucketName":   "relay-data-" + emulator.AccountID + "-" + emulator.Region,
		"SecretPrefix": "relay/",
	}
	for k, v := range want {
		if st.Outputs[k] != v {
			t.Errorf("output %s = %q, want %q", k, st.Outputs[k], v)
		}
	}
	base := st.Outputs["BaseUrl"]
	if !strings.HasPrefix(base, "https://") || !strings.HasSuffix(base, ".execute-api.us-east-1.amazonaws.com/prod/v1") {
		t.Errorf("output BaseUrl = %q", base)
	}
	if st.Outputs["PanelUrl"] != strings.TrimSuffix(base, "v1") {
		t.Errorf("output PanelUrl = %q, BaseUrl %q", st.Outputs["PanelUrl"], base)
	}
}

func checkTable(t *testing.T, cfg aws.Config, st *deployed.Stack, set resources.Set) {
	d, err := dynamodb.NewFromConfig(cfg).DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(st.Outputs["TableName"])})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]string{}
	// key records an index's (or the table's, "") hash and range keys.
	key := func(name string, ks []ddbtypes.KeySchemaElement) {
		var k [2]string
		for _, e := range ks {
			if e.KeyType == ddbtypes.KeyTypeHash {
				k[0] = aws.ToString(e.AttributeName)
			} else {
				k[1] = aws.ToString(e.AttributeName)
			}
		}
		got[name] = k
	}
	tb := d.Table
	key("", tb.KeySchema)
	for _, ix := range tb.GlobalSecondaryIndexes {
		key(aws.ToString(ix.IndexName), ix.KeySchema)
		if ix.Projection == nil || ix.Projection.ProjectionType != "ALL" {
			t.Errorf("index %s projects %+v, want ALL", aws.ToString(ix.IndexName), ix.Projection)
		}
	}
	want := map[string][2]string{"": {set.Table.PartitionKey, set.Table.SortKey}}
	for _, ix := range set.Table.Indexes {
		want[ix.Name] = [2]string{ix.PartitionKey, ix.SortKey}
	}
	if len(got) != len(want) {
		t.Errorf("table keys and indexes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("table key %q: got %v, want %v", k, got[k], v)
		}
	}
}

func checkQueues(t *testing.T, cfg aws.Config, set resources.Set) {
	ctx := context.Background()
	c := sqs.NewFromConfig(cfg)
	attrs := func(name string) map[string]string {
		u, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
		if err != nil {
			t.Fatalf("queue %s: %v", name, err)
		}
		a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		return a.Attributes
	}
	for _, q := range set.Queues {
		a, dlq := attrs(q.Name), attrs(q.DLQName)
		if got, want := a["VisibilityTimeout"], seconds(q.VisibilityTimeout); got != want {
			t.Errorf("%s: visibility timeout %s, want %s", q.Name, got, want)
		}
		if got, want := dlq["VisibilityTimeout"], seconds(q.DLQ().VisibilityTimeout); got != want {
			t.Errorf("%s: visibility timeout %s, want %s", q.DLQName, got, want)
		}
		var rp struct {
			Target string `json:"deadLetterTargetArn"`
			Max    any    `json:"maxReceiveCount"`
		}
		if err := json.Unmarshal([]byte(a["RedrivePolicy"]), &rp); err != nil {
			t.Errorf("%s: redrive policy %q: %v", q.Name, a["RedrivePolicy"], err)
			continue
		}
		if rp.Target != dlq["QueueArn"] || toString(rp.Max) != toString(q.MaxReceiveCount) {
			t.Errorf("%s: redrive %+v, want to %s after %d receives", q.Name, rp, dlq["QueueArn"], q.MaxReceiveCount)
		}
	}
}

func seconds(d time.Duration) string { return toString(int(d.Seconds())) }

func toString(v any) string { b, _ := json.Marshal(v); return strings.Trim(string(b), `"`) }

func checkFunctions(t *testing.T, cfg aws.Config, st *deployed.Stack, set resources.Set) {
	env, err := st.Env()
	if err != nil {
		t.Fatal(err)
	}
	if env.Table != st.Outputs["TableName"] || env.Bucket != st.Outputs["BucketName"] || env.SecretPrefix != st.Outputs["SecretPrefix"] ||
		env.Prefix != "relay" || env.ScheduleGroup != set.ScheduleGroup || env.AllowPrivateWebhooks {
		t.Errorf("the functions' configuration %+v does not match the outputs %v", env, st.Outputs)
	}
	if env.SchedulerFunctionARN != "arn:aws:lambda:us-east-1:"+emulator.AccountID+":function:relay-scheduler" || !strings.HasPrefix(env.SchedulerRoleARN, "arn:aws:iam::") {
		t.Errorf("scheduler target %q, role %q", env.SchedulerFunctionARN, env.SchedulerRoleARN)
	}
	if len(st.Functions) != len(set.Functions) {
		t.Errorf("%d functions deployed, want %d", len(st.Functions), len(set.Functions))
	}
	for _, def := range set.Functions {
		f, ok := st.Functions["relay-"+def.Name]
		if !ok {
			t.Errorf("function relay-%s not deployed", def.Name)
			continue
		}
		if f.Timeout != def.Timeout || f.Memory != def.Memory {
			t.Errorf("%s: timeout %v memory %d, want %v %d", f.Name, f.Timeout, f.Memory, def.Timeout, def.Memory)
		}
		if def.Queue == "" {
			if len(f.Mappings) != 0 {
				t.Errorf("%s: mappings %+v, want none", f.Name, f.Mappings)
			}
			continue
		}
		want := deployed.Mapping{
			SourceARN: "arn:aws:sqs:us-east-1:" + emulator.AccountID + ":" + def.Queue, BatchSize: def.BatchSize,
			MaxConcurrency: def.MaxConcurrency, ReportBatchItemFailures: true,
		}
		if len(f.Mappings) != 1 || f.Mappings[0] != want {
			t.Errorf("%s: mappings %+v, want %+v", f.Name, f.Mappings, want)
		}
	}
}

// checkSecrets: one secret per api_key_env of the models, holding a
// placeholder until the real key is put.
func checkSecrets(t *testing.T, cfg aws.Config, tpl cfnTemplate) {
	var names []string
	for _, r := range tpl.Resources {
		if r.Type == "AWS::SecretsManager::Secret" {
			names = append(names, r.Properties["Name"].(string))
		}
	}
	models, err := config.LoadModels("../relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range models.Models {
		if n := "relay/" + m.APIKeyEnv; !slices.Contains(want, n) {
			want = append(want, n)
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("secrets in the template %v, want %v", names, want)
	}
	sm := secretsmanager.NewFromConfig(cfg)
	for _, n := range want {
		v, err := sm.GetSecretValue(context.Background(), &secretsmanager.GetSecretValueInput{SecretId: aws.String(n)})
		if err != nil || len(aws.ToString(v.SecretString)) < 20 {
			t.Errorf("secret %s: %v", n, err)
		}
	}
}

func checkTick(t *testing.T, cfg aws.Config, set resources.Set) {
	s, err := scheduler.NewFromConfig(cfg).GetSchedule(context.Background(), &scheduler.GetScheduleInput{
		GroupName: aws.String(set.ScheduleGroup), Name: aws.String("relay-tick"),
	})
	if err != nil {
		t.Fatal(err)
	}
	dispatch := "arn:aws:sqs:us-east-1:" + emulator.AccountID + ":" + set.Queues[0].Name
	if aws.ToString(s.ScheduleExpression) != "rate(1 minute)" || s.Target == nil || aws.ToString(s.Target.Arn) != dispatch ||
		aws.ToString(s.Target.Input) != `{"type":"tick"}` || string(s.State) != "ENABLED" {
		t.Errorf("tick schedule %s, target %+v, state %s; want rate(1 minute) sending a tick to %s",
			aws.ToString(s.ScheduleExpression), s.Target, s.State, dispatch)
	}
}

func checkAlarms(t *testing.T, cfg aws.Config, tpl cfnTemplate, models int) {
	want := map[string]bool{}
	for _, r := range tpl.Resources {
		if r.Type == "AWS::CloudWatch::Alarm" {
			want[r.Properties["AlarmName"].(string)] = true
		}
	}
	got := map[string]bool{}
	for _, a := range describeAlarms(t, cfg) {
		got[a.Name] = true
		if len(a.Actions) != 1 || !strings.HasPrefix(a.Actions[0], "arn:aws:sns:") {
			t.Errorf("alarm %s: actions %v, want the alarm topic", a.Name, a.Actions)
		}
	}
	// The stack's 22, and four per model (infra/observability.go).
	if n := 22 + 4*models; len(want) != n || len(got) != len(want) {
		t.Errorf("%d alarms deployed, %d in the template, want %d", len(got), len(want), n)
	}
	for n := range want {
		if !got[n] {
			t.Errorf("alarm %s not deployed", n)
		}
	}
}

type alarm struct {
	Name    string   `xml:"AlarmName"`
	Actions []string `xml:"AlarmActions>member"`
}

// describeAlarms is CloudWatch's DescribeAlarms in its query protocol: the
// SDK speaks CBOR (smithy-rpcv2-cbor) to CloudWatch, which the emulator
// does not.
func describeAlarms(t *testing.T, cfg aws.Config) []alarm {
	t.Helper()
	ctx := context.Background()
	body := "Action=DescribeAlarms&Version=2010-08-01&MaxRecords=100"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, aws.ToString(cfg.BaseEndpoint)+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "monitoring", cfg.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Alarms []alarm `xml:"DescribeAlarmsResult>MetricAlarms>member"`
	}
	if err := xml.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("describe alarms: %s: %v", resp.Status, err)
	}
	return out.Alarms
}

// batchOnDeployed runs a batch through the official SDK with the local
// runtime on the deployed resources: the configuration the functions were
// given, their mappings' batch sizes and timeouts, and the models file
// bundled with them. Only the mock provider moves, from 127.0.0.1:8090 (a
// make dev on this machine may hold it) to a free port.
func batchOnDeployed(t *testing.T, cfg aws.Config, st *deployed.Stack, tpl cfnTemplate, dir string) {
	mock := freeAddr(t)
	rt := onStack(t, cfg, st, bundleModels(t, st, tpl, dir, mock), mock, nil)
	t.Cleanup(rt.Close)
	c, _ := client(t, rt, "acme")
	rows := nRows(12, "deployed")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != "completed" {
		t.Fatalf("batch %s: %s (%+v)", b.ID, b.Status, b.Errors)
	}
	out, errs := checkInvariant(t, c, b, idsOf(rows))
	if len(errs) != 0 || len(out) != len(rows) {
		t.Fatalf("outputs %d, errors %v", len(out), errs)
	}
	// The rows' results are in the deployed bucket, and the batch in the deployed table.
	if !strings.Contains(string(out["r0003"].Response.Body), "echo: deployed 3") {
		t.Errorf("output line %s", out["r0003"].Response.Body)
	}
}

// onStack starts the local runtime on the deployed stack st: the
// environment its functions were given, path-style S3 (the emulator on a
// loopback address), its mappings' batch sizes and timeouts (st.Apply),
// and models (a models file's bytes) with the mock provider at mock. tweak,
// if not nil, changes the options (lambda mode, a scheduler clock). The
// caller closes it: a runtime left polling the stack's queues would take
// the next one's messages.
func onStack(t *testing.T, cfg aws.Config, st *deployed.Stack, models []byte, mock string, tweak func(*localrun.Options)) *localrun.Runtime {
	t.Helper()
	env, err := st.Env()
	if err != nil {
		t.Fatal(err)
	}
	env.S3PathStyle = true
	parsed, err := config.ParseModels(models)
	if err != nil {
		t.Fatal(err)
	}
	var applyErr error
	o := localrun.Options{
		Env: env, Models: parsed, AWS: cfg, Addr: "127.0.0.1:0", MockAddr: mock, TickEvery: time.Second, Existing: true,
		Tune: func(set *resources.Set) { applyErr = st.Apply(set) },
		Log:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if tweak != nil {
		tweak(&o)
	}
	rt, err := localrun.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if applyErr != nil {
		rt.Close()
		t.Fatal(applyErr)
	}
	return rt
}

// TestDeployBrokenReference deploys a copy of the synthesized template with
// one reference broken (the executor's event source names a queue that is
// not in the template): the deploy must fail, naming it.
func TestDeployBrokenReference(t *testing.T) {
	t.Parallel()
	emutest.Require(t) // it starts an emulator of its own
	readTemplate(t, cdkOut)
	dir := t.TempDir()
	entries, err := os.ReadDir(cdkOut)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		src, _ := filepath.Abs(filepath.Join(cdkOut, e.Name()))
		if e.IsDir() { // assets: the same bundles
			if err := os.Symlink(src, filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "relay.template.json" {
			old := `"EventSourceArn":{"Fn::GetAtt":["WorkQueue","Arn"]}`
			compact := compactJSON(t, b)
			if !strings.Contains(compact, old) {
				t.Fatalf("the template has no %s", old)
			}
			b = []byte(strings.Replace(compact, old, `"EventSourceArn":{"Fn::GetAtt":["WorkQueueMissing","Arn"]}`, 1))
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, out, took, err := deploy(t, dir)
	t.Logf("failed deploy: %v", took.Round(100*time.Millisecond))
	if err == nil {
		t.Fatalf("deploy with a broken reference succeeded:\n%s", out)
	}
	if !strings.Contains(out, "WorkQueueMissing") || !strings.Contains(out, "failed") {
		t.Fatalf("deploy failed without naming the broken reference:\n%s", out)
	}
}

func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	c, _ := json.Marshal(v)
	return string(c)
}
