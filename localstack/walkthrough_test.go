//go:build deploy

package localstack

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/relaybatch/relay/internal/local/deployed"
	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// readmeCommands are the commands of the README's section heading (as
// "### Deploy to AWS"): every line of its sh blocks, without comments.
func readmeCommands(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, heading+"\n")
	if start < 0 {
		t.Fatalf("README.md has no %q", heading)
	}
	s = s[start+1:]
	s = s[:strings.Index(s, "\n### ")]
	var cmds []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "```sh":
			in = true
		case line == "```":
			in = false
		case in && line != "":
			if i := strings.Index(line, "  #"); i >= 0 {
				line = strings.TrimSpace(line[:i])
			}
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// TestReadmeDeployWalkthrough runs the README's "Deploy to AWS"
// walkthrough command by command against the emulator: bootstrap, the
// models file, make deploy, the provider keys, the first key, a batch with
// the CLI, make destroy and the clean-up of what deletion protection kept.
// Every command of the README must have its step here, so the two change
// together. What the emulator cannot do, and how each step differs from
// AWS, is in the step; in short: make deploy and destroy get
// --method=direct and --require-approval never / --force, and the batch
// goes to the local runtime on the deployed resources (the emulator's API
// Gateway cannot invoke the Lambda functions, and the models are moved from
// the providers to the mock provider).
func TestReadmeDeployWalkthrough(t *testing.T) {
	t.Parallel()
	emutest.Require(t) // it starts an emulator of its own
	ctx := context.Background()
	ep, stop, err := emulator.StartOwn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cfg, err := emulator.Config(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("..")
	tmp := t.TempDir()
	// The environment of a shell that followed the README, on the emulator:
	// none of this machine's AWS or relay settings.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "RELAY_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"AWS_ENDPOINT_URL="+ep, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1",
		// As in localstack/deploy.sh: the template URL CloudFormation reads.
		"AWS_ENDPOINT_URL_S3_FOR_CLOUDFORMATION="+strings.Replace(ep, "127.0.0.1", "localhost", 1),
		"CDK_DISABLE_CLI_TELEMETRY=true",
		"OPENAI_API_KEY=sk-walkthrough-openai", "ANTHROPIC_API_KEY=sk-walkthrough-anthropic",
	)
	// Files the README writes in the clone go to tmp; cdk.out/ too, which
	// other tests read (localstack/deploy_test.go).
	paths := strings.NewReplacer("relay.aws.yaml", filepath.Join(tmp, "relay.aws.yaml"), "hello.csv", filepath.Join(tmp, "hello.csv"))
	run := func(cmd, stdin string) string {
		t.Helper()
		start := time.Now()
		c := exec.Command("bash", "-c", cmd)
		c.Dir, c.Env = root, env
		c.Stdin = strings.NewReader(stdin)
		out, err := c.CombinedOutput()
		t.Logf("$ %s  (%v)", cmd, time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	var key, batchID string
	var rt *localrun.Runtime
	deployArgs := " -o " + filepath.Join(tmp, "cdk.out") + " --method=direct --require-approval never"
	steps := []struct {
		readme string
		do     func(cmd string)
	}{
		// make test synthesized already; it would rewrite cdk.out/.
		{"make synth", func(string) {}},
		// --app on that assembly: the environment comes from it, as from the app.
		{"node_modules/.bin/cdk bootstrap", func(cmd string) { run(cmd+" --no-notices --app cdk.out", "") }},
		{"cp relay.aws.example.yaml relay.aws.yaml", func(cmd string) { run(paths.Replace(cmd), "") }},
		// --method=direct: the emulator runs change sets ignoring DependsOn;
		// --require-approval never instead of answering the IAM prompt.
		{`make deploy CDK_ARGS="-c config=relay.aws.yaml -c alarmEmail=ops@example.com"`, func(cmd string) {
			run(strings.TrimSuffix(paths.Replace(cmd), `"`)+deployArgs+`"`, "")
		}},
		{`aws secretsmanager put-secret-value --secret-id relay/OPENAI_API_KEY --secret-string "$OPENAI_API_KEY"`, func(cmd string) { run(cmd, "") }},
		{`aws secretsmanager put-secret-value --secret-id relay/ANTHROPIC_API_KEY --secret-string "$ANTHROPIC_API_KEY"`, func(cmd string) { run(cmd, "") }},
		{"make build/relay", func(cmd string) { run(cmd, "") }},
		{"build/relay keys create --tenant acme", func(cmd string) {
			key = regexp.MustCompile(`rb-[A-Za-z0-9_-]+`).FindString(run(cmd, ""))
			if key == "" {
				t.Fatal("keys create printed no key")
			}
		}},
		// BaseUrl is API Gateway's, which cannot invoke the functions on
		// the emulator: the local runtime serves their code instead, on
		// the deployed resources.
		{"export RELAY_URL=https://….execute-api.<region>.amazonaws.com/prod/v1", func(string) {
			rt = runtimeOnStack(t, cfg, filepath.Join(tmp, "relay.aws.yaml"))
			env = append(env, "RELAY_URL="+rt.URL+"/v1")
		}},
		{"export RELAY_API_KEY=rb-…", func(string) { env = append(env, "RELAY_API_KEY="+key) }},
		{`printf 'prompt\nSay hello\n' > hello.csv`, func(cmd string) { run(paths.Replace(cmd), "") }},
		{"build/relay batch submit hello.csv --model gpt-4o-mini --wait", func(cmd string) {
			out := run(paths.Replace(cmd), "")
			batchID = regexp.MustCompile(`batch_[A-Za-z0-9]+`).FindString(out)
			if batchID == "" || !strings.Contains(out, "completed") {
				t.Fatalf("batch submit: %s", out)
			}
		}},
		{"build/relay batch results batch_…", func(cmd string) {
			if out := run(strings.Replace(cmd, "batch_…", batchID, 1), ""); !strings.Contains(out, "Say hello") {
				t.Fatalf("batch results: %s", out)
			}
			rt.Close()
		}},
		// --force instead of answering cdk destroy's question; --app on what
		// make deploy synthesized, rather than synthesizing it again.
		{`make destroy CDK_ARGS="-c config=relay.aws.yaml"`, func(cmd string) {
			run(strings.TrimSuffix(paths.Replace(cmd), `"`)+" --force --app "+filepath.Join(tmp, "cdk.out")+`"`, "")
			checkTornDown(t, cfg)
		}},
	}
	cmds := readmeCommands(t, "### Deploy to AWS")
	if len(cmds) != len(steps) {
		t.Errorf("the README's walkthrough has %d commands, this test %d steps:\n%s", len(cmds), len(steps), strings.Join(cmds, "\n"))
	}
	for i, cmd := range cmds {
		if i >= len(steps) || steps[i].readme != cmd {
			t.Fatalf("README command %d is %q, this test's step is %q: change them together", i+1, cmd, steps[min(i, len(steps)-1)].readme)
		}
		steps[i].do(cmd)
	}
	// The README's clean-up of what deletion protection kept, as written
	// but for the account and region.
	readme, _ := os.ReadFile("../README.md")
	for _, cmd := range []string{
		"aws dynamodb update-table --table-name relay --no-deletion-protection-enabled",
		"aws dynamodb delete-table --table-name relay",
		"aws s3 rb s3://relay-data-<account>-<region> --force",
		"aws scheduler delete-schedule-group --name relay",
		"aws logs describe-log-groups --log-group-name-prefix relay-",
	} {
		if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), cmd) {
			t.Errorf("README no longer says %q", cmd)
			continue
		}
		run(strings.NewReplacer("<account>", emulator.AccountID, "<region>", emulator.Region).Replace(cmd), "")
	}
	if _, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("relay")}); err == nil {
		t.Error("table relay still there after the clean-up")
	}
}

// runtimeOnStack is the local runtime on the stack relay (as
// checkDeployedStack's), with the models of the file models, whose
// providers are replaced by the mock provider: the emulator reaches none.
func runtimeOnStack(t *testing.T, cfg aws.Config, models string) *localrun.Runtime {
	t.Helper()
	ctx := context.Background()
	st, err := deployed.Read(ctx, cfg, "relay")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(models)
	if err != nil {
		t.Fatal(err)
	}
	mock := freeAddr(t)
	local := regexp.MustCompile(`https://[a-z0-9.-]+\.com(/openai)?`).ReplaceAllString(string(raw), "http://"+mock)
	rt := onStack(t, cfg, st, []byte(local), mock, nil)
	t.Cleanup(rt.Close)
	return rt
}

// checkTornDown: after make destroy the stack is gone with its queues, and
// what the README says deletion protection keeps is there.
func checkTornDown(t *testing.T, cfg aws.Config) {
	t.Helper()
	ctx := context.Background()
	if st, err := deployed.Read(ctx, cfg, "relay"); err == nil && st.Status != "DELETE_COMPLETE" {
		t.Errorf("stack relay still %s after make destroy", st.Status)
	}
	if _, err := sqs.NewFromConfig(cfg).GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("relay-work")}); err == nil {
		t.Error("queue relay-work still there after make destroy")
	}
	if _, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("relay")}); err != nil {
		t.Errorf("table relay, which deletion protection keeps: %v", err)
	}
	bucket := "relay-data-" + emulator.AccountID + "-" + emulator.Region
	if _, err := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true }).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket}); err != nil {
		t.Errorf("bucket %s, which deletion protection keeps: %v", bucket, err)
	}
	if _, err := scheduler.NewFromConfig(cfg).GetScheduleGroup(ctx, &scheduler.GetScheduleGroupInput{Name: aws.String("relay")}); err != nil {
		t.Errorf("schedule group relay, which deletion protection keeps: %v", err)
	}
}

// TestReadmeDeployEmulatorWalkthrough runs the commands of the README's
// "make deploy-emulator" section in order, each in a shell that has none
// of this machine's AWS or relay settings but what the section exports, on
// a port of its own instead of 4566: make deploy-emulator (its cloud
// assembly in a directory of its own: other tests read cdk.out/) prints
// the section's export line, the AWS CLI then describes the stack (and
// checkDeployedStack checks what was deployed), relay
// dev --stack runs a batch on the stack's own table and bucket (no second
// bucket), and the emulator stops.
func TestReadmeDeployEmulatorWalkthrough(t *testing.T) {
	t.Parallel()
	emutest.Require(t) // it starts an emulator of its own
	root, _ := filepath.Abs("..")
	tmp := t.TempDir()
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	ep := "http://127.0.0.1:" + port
	t.Cleanup(func() {
		stop := exec.Command("localstack/emulator.sh", "stop")
		stop.Dir, stop.Env = root, append(os.Environ(), "EMULATOR_PORT="+port)
		_ = stop.Run()
	})
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "RELAY_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CDK_DISABLE_CLI_TELEMETRY=true")
	run := func(cmd string) string {
		t.Helper()
		start := time.Now()
		c := exec.Command("bash", "-c", cmd)
		c.Dir, c.Env = root, env
		out, err := c.CombinedOutput()
		t.Logf("$ %s  (%v)", cmd, time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	var exports string
	steps := []struct {
		readme string
		do     func(cmd string)
	}{
		{"make deploy-emulator", func(cmd string) {
			exports = run(cmd + " DEPLOY_EMULATOR_PORT=" + port + " CDK_OUT=" + filepath.Join(tmp, "cdk.out"))
		}},
		{"export AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_DEFAULT_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test", func(cmd string) {
			cmd = strings.ReplaceAll(cmd, "4566", port)
			if !strings.Contains(exports, cmd) {
				t.Fatalf("make deploy-emulator printed\n%s\nwithout the README's %q", exports, cmd)
			}
			env = append(env, strings.Fields(strings.TrimPrefix(cmd, "export "))...)
		}},
		{"aws cloudformation describe-stacks --stack-name relay", func(cmd string) {
			if out := run(cmd); !strings.Contains(out, "CREATE_COMPLETE") {
				t.Fatalf("%s:\n%s", cmd, out)
			}
			cfg, err := emulator.Config(context.Background(), ep)
			if err != nil {
				t.Fatal(err)
			}
			checkDeployedStack(t, cfg, exports, filepath.Join(tmp, "cdk.out"))
		}},
		{"build/relay dev --stack relay", func(cmd string) { devOnStack(t, root, env, tmp) }},
		{"EMULATOR_PORT=4566 localstack/emulator.sh stop", func(cmd string) {
			run(strings.ReplaceAll(cmd, "4566", port))
			if emulator.Answers(ep) {
				t.Fatalf("the emulator on %s still answers after %s", ep, cmd)
			}
		}},
	}
	cmds := readmeCommands(t, "### `make deploy-emulator`")
	if len(cmds) != len(steps) {
		t.Errorf("the README's section has %d commands, this test %d steps:\n%s", len(cmds), len(steps), strings.Join(cmds, "\n"))
	}
	for i, cmd := range cmds {
		if i >= len(steps) || steps[i].readme != cmd {
			t.Fatalf("README command %d is %q, this test's step is %q: change them together", i+1, cmd, steps[min(i, len(steps)-1)].readme)
		}
		steps[i].do(cmd)
	}
}

// devOnStack runs build/relay dev --stack relay in env (the walkthrough's
// shell) with the default models file on a mock of its own port, runs a
// batch through it, and checks the batch's files went to the stack's
// bucket and no second bucket was made; relay dev without --stack there
// refuses to start.
func devOnStack(t *testing.T, root string, env []string, tmp string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "relay.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	models, mock := filepath.Join(tmp, "relay.yaml"), freeAddr(t)
	if err := os.WriteFile(models, []byte(strings.ReplaceAll(string(raw), "127.0.0.1:8090", mock)), 0o600); err != nil {
		t.Fatal(err)
	}
	env = append(env, "RELAY_ADDR="+freeAddr(t), "RELAY_CONFIG="+models)
	// Without --stack it would share the stack's table beside a bucket
	// of its own: it stops, naming --stack.
	plain := exec.Command(filepath.Join(root, "build/relay"), "dev", "--mock-addr", mock)
	plain.Env = env
	if out, err := plain.CombinedOutput(); err == nil || !strings.Contains(string(out), "relay dev --stack relay") {
		t.Fatalf("relay dev without --stack on the stack's emulator: %v\n%s", err, out)
	}
	d := startRelayDev(t, filepath.Join(root, "build/relay"), env, "--stack", "relay", "--mock-addr", mock)
	defer func() { _ = d.cmd.Process.Signal(os.Interrupt); _ = d.cmd.Wait() }()
	c := d.client()
	f := upload(t, c, "hello.jsonl", jsonlRows([]row{{id: "a", content: "hello"}}))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != "completed" || b.RequestCounts.Completed != 1 {
		t.Fatalf("batch on the stack: %s, %+v", b.Status, b.RequestCounts)
	}
	var ep string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "AWS_ENDPOINT_URL="); ok {
			ep = v
		}
	}
	cfg, err := emulator.Config(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	stackBucket := "relay-data-" + emulator.AccountID + "-" + emulator.Region
	objs, err := s3c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &stackBucket})
	if err != nil || len(objs.Contents) == 0 {
		t.Fatalf("the stack's bucket %s holds nothing after a batch (%v)", stackBucket, err)
	}
	if _, err := s3c.HeadBucket(context.Background(), &s3.HeadBucketInput{Bucket: aws.String("relay-data")}); err == nil {
		t.Fatal("relay dev --stack made a second bucket relay-data")
	}
}
