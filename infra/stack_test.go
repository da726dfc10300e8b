package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/apigw"
	"github.com/relaybatch/relay/internal/metrics"
	"github.com/relaybatch/relay/internal/resources"
)

func TestResourceCounts(t *testing.T) {
	setup(t)
	set := props.Set()
	queueFed := 0
	for _, f := range set.Functions {
		if f.Queue != "" {
			queueFed++
		}
	}
	secrets := map[string]bool{}
	for _, m := range props.Models.Models {
		if m.APIKeyEnv != "" {
			secrets[m.APIKeyEnv] = true
		}
	}
	for _, w := range props.Models.OperatorWebhooks {
		secrets[w.SecretEnv] = true
	}
	want := map[string]int{
		"AWS::DynamoDB::Table":            1,
		"AWS::S3::Bucket":                 1,
		"AWS::SQS::Queue":                 2 * len(set.Queues),
		"AWS::Lambda::Function":           len(set.Functions),
		"AWS::Lambda::EventSourceMapping": queueFed,
		"AWS::Logs::LogGroup":             len(set.Functions) + 1, // + API access logs
		"AWS::SecretsManager::Secret":     len(secrets),
		"AWS::Scheduler::ScheduleGroup":   1,
		"AWS::Scheduler::Schedule":        1,
		"AWS::ApiGateway::RestApi":        1,
		"AWS::ApiGateway::Stage":          1,
		"AWS::Lambda::Permission":         1,
		// A DLQ depth alarm per queue, errors and throttles per function,
		// work and dispatch queue age, oldest batch age, API 5xx; a model's
		// error rate, pinned capacity, circuit opened and key dropped.
		"AWS::CloudWatch::Alarm":     len(set.Queues) + 2*len(set.Functions) + 4 + 4*len(props.Models.Models),
		"AWS::CloudWatch::Dashboard": 1,
	}
	for typ, n := range want {
		check(t, func() { tpl.ResourceCountIs(jsii.String(typ), jsii.Number(float64(n))) })
	}
}

// The local runtime creates its queues and table from resources.Define; the
// stack must deploy exactly the same names, timeouts, redrive and keys.
func TestQueuesMatchDefinitions(t *testing.T) {
	setup(t)
	for _, def := range props.Set().Queues {
		t.Run(def.Name, func(t *testing.T) {
			_, q := template.find(t, "AWS::SQS::Queue", "QueueName", def.Name)
			dlqID, dlq := template.find(t, "AWS::SQS::Queue", "QueueName", def.DLQName)
			if got, want := num(q.Properties["VisibilityTimeout"]), def.VisibilityTimeout.Seconds(); got != want {
				t.Errorf("VisibilityTimeout = %v, want %v", got, want)
			}
			if got, want := num(q.Properties["MessageRetentionPeriod"]), def.Retention.Seconds(); got != want {
				t.Errorf("MessageRetentionPeriod = %v, want %v", got, want)
			}
			redrive, _ := q.Properties["RedrivePolicy"].(map[string]any)
			if got := refID(redrive["deadLetterTargetArn"]); got != dlqID {
				t.Errorf("redrive target = %q, want the DLQ %s (%s)", got, def.DLQName, dlqID)
			}
			if got, want := num(redrive["maxReceiveCount"]), float64(def.MaxReceiveCount); got != want {
				t.Errorf("maxReceiveCount = %v, want %v", got, want)
			}
			dlqDef := def.DLQ()
			if got, want := num(dlq.Properties["VisibilityTimeout"]), dlqDef.VisibilityTimeout.Seconds(); got != want {
				t.Errorf("DLQ VisibilityTimeout = %v, want %v", got, want)
			}
			if got, want := num(dlq.Properties["MessageRetentionPeriod"]), dlqDef.Retention.Seconds(); got != want {
				t.Errorf("DLQ MessageRetentionPeriod = %v, want %v", got, want)
			}
			if dlq.Properties["RedrivePolicy"] != nil {
				t.Errorf("DLQ has a redrive policy: %v", dlq.Properties["RedrivePolicy"])
			}
			for _, r := range []cfnResource{q, dlq} {
				if r.Properties["SqsManagedSseEnabled"] != true {
					t.Errorf("queue is not encrypted: %v", r.Properties)
				}
			}
		})
	}
	if got := props.Set().Queue(resources.Work).MaxReceiveCount; got != resources.WorkMaxReceiveCount {
		t.Errorf("work queue maxReceiveCount = %d, want resources.WorkMaxReceiveCount %d", got, resources.WorkMaxReceiveCount)
	}
}

func TestTableMatchesDefinition(t *testing.T) {
	setup(t)
	def := props.Set().Table
	_, table := template.find(t, "AWS::DynamoDB::Table", "TableName", def.Name)
	p := table.Properties

	wantKeys := fmt.Sprintf(`[{"AttributeName":%q,"KeyType":"HASH"},{"AttributeName":%q,"KeyType":"RANGE"}]`, def.PartitionKey, def.SortKey)
	if got := jsonString(p["KeySchema"]); got != wantKeys {
		t.Errorf("KeySchema = %s, want %s", got, wantKeys)
	}
	var gsis []string
	for _, g := range list(p["GlobalSecondaryIndexes"]) {
		gsis = append(gsis, jsonString(g))
	}
	var wantGSIs []string
	for _, ix := range def.Indexes {
		wantGSIs = append(wantGSIs, fmt.Sprintf(
			`{"IndexName":%q,"KeySchema":[{"AttributeName":%q,"KeyType":"HASH"},{"AttributeName":%q,"KeyType":"RANGE"}],"Projection":{"ProjectionType":"ALL"}}`,
			ix.Name, ix.PartitionKey, ix.SortKey))
	}
	if !slices.Equal(gsis, wantGSIs) {
		t.Errorf("GlobalSecondaryIndexes =\n%v\nwant\n%v", gsis, wantGSIs)
	}
	for _, a := range list(p["AttributeDefinitions"]) {
		if !contains(a, `"AttributeType":"S"`) {
			t.Errorf("attribute %v is not a string", a)
		}
	}
	if got, want := len(list(p["AttributeDefinitions"])), 2+2*len(def.Indexes); got != want {
		t.Errorf("%d attribute definitions, want %d", got, want)
	}

	check(t, func() {
		tpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
			"TableName":                        def.Name,
			"BillingMode":                      "PAY_PER_REQUEST",
			"TimeToLiveSpecification":          map[string]any{"AttributeName": def.TTLAttribute, "Enabled": true},
			"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
			"DeletionProtectionEnabled":        true,
		})
	})
}

func TestDeletionProtectionIsConfigurable(t *testing.T) {
	setup(t)
	for _, c := range []struct {
		name           string
		tmpl           cfnTemplate
		policy         string
		tableProtected bool
	}{
		{"protected", template, "Retain", true},
		{"unprotected", unprotected, "Delete", false},
	} {
		stateful := []string{"Table", "Bucket", "ScheduleGroup"}
		stateful = append(stateful, c.tmpl.ofType("AWS::Logs::LogGroup")...)
		for _, id := range stateful {
			r, ok := c.tmpl.Resources[id]
			if !ok {
				t.Fatalf("%s: no resource with logical id %s", c.name, id)
			}
			if r.DeletionPolicy != c.policy {
				t.Errorf("%s: %s DeletionPolicy = %q, want %q", c.name, id, r.DeletionPolicy, c.policy)
			}
		}
		if got := c.tmpl.Resources["Table"].Properties["DeletionProtectionEnabled"]; got != c.tableProtected {
			t.Errorf("%s: DeletionProtectionEnabled = %v, want %v", c.name, got, c.tableProtected)
		}
	}
}

// deploy-local builds the functions for the host: -c arch reaches every function.
func TestArchitecture(t *testing.T) {
	setup(t)
	for _, c := range []struct {
		tmpl cfnTemplate
		want string
	}{{template, `["arm64"]`}, {unprotected, `["x86_64"]`}} {
		for _, id := range c.tmpl.ofType("AWS::Lambda::Function") {
			if got := jsonString(c.tmpl.Resources[id].Properties["Architectures"]); got != c.want {
				t.Errorf("%s: Architectures %s, want %s", id, got, c.want)
			}
		}
	}
}

// Stateful resources keep their logical ids wherever their constructs move.
func TestStableLogicalIDs(t *testing.T) {
	setup(t)
	want := map[string]string{"Table": "AWS::DynamoDB::Table", "Bucket": "AWS::S3::Bucket", "ScheduleGroup": "AWS::Scheduler::ScheduleGroup"}
	for _, key := range []string{resources.Dispatch, resources.Work, resources.Finalize, resources.Webhook} {
		want[titleCase(key)+"Queue"] = "AWS::SQS::Queue"
		want[titleCase(key)+"DLQ"] = "AWS::SQS::Queue"
	}
	for id, typ := range want {
		if got := template.Resources[id].Type; got != typ {
			t.Errorf("logical id %s: type %q, want %s", id, got, typ)
		}
	}
}

func TestBucket(t *testing.T) {
	setup(t)
	set := props.Set()
	check(t, func() {
		tpl.HasResourceProperties(jsii.String("AWS::S3::Bucket"), map[string]any{
			"BucketEncryption": map[string]any{"ServerSideEncryptionConfiguration": []any{
				map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": "AES256"}},
			}},
			"PublicAccessBlockConfiguration": map[string]any{
				"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true,
			},
			"OwnershipControls": map[string]any{"Rules": []any{map[string]any{"ObjectOwnership": "BucketOwnerEnforced"}}},
		})
	})
	// TLS only: the bucket policy denies every request without SecureTransport.
	check(t, func() {
		tpl.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), map[string]any{
			"PolicyDocument": map[string]any{"Statement": []any{map[string]any{
				"Effect":    "Deny",
				"Action":    "s3:*",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
			}}},
		})
	})

	bucket := template.Resources["Bucket"]
	if name := jsonString(bucket.Properties["BucketName"]); !strings.Contains(name, `"`+set.Bucket+`-"`) ||
		!strings.Contains(name, "AWS::AccountId") || !strings.Contains(name, "AWS::Region") {
		t.Errorf("BucketName = %s, want %s-<account>-<region>", name, set.Bucket)
	}
	rules := map[string]map[string]any{}
	for _, r := range list(bucket.Properties["LifecycleConfiguration"].(map[string]any)["Rules"]) {
		rule := r.(map[string]any)
		rules[rule["Id"].(string)] = rule
	}
	for _, e := range set.BucketExpiry() {
		rule, ok := rules[e.ID]
		if !ok {
			t.Errorf("no lifecycle rule %s", e.ID)
			continue
		}
		if got, want := num(rule["ExpirationInDays"]), e.After.Hours()/24; got != want {
			t.Errorf("rule %s expires after %v days, want %v", e.ID, got, want)
		}
		if e.Prefix != "" && rule["Prefix"] != e.Prefix {
			t.Errorf("rule %s prefix = %v, want %s", e.ID, rule["Prefix"], e.Prefix)
		}
		if e.TagValue != "" && jsonString(rule["TagFilters"]) != fmt.Sprintf(`[{"Key":%q,"Value":%q}]`, resources.ExpiryTag, e.TagValue) {
			t.Errorf("rule %s tag filters = %s, want %s=%s", e.ID, jsonString(rule["TagFilters"]), resources.ExpiryTag, e.TagValue)
		}
	}
	if abort, ok := rules["abort-incomplete-uploads"]; !ok || !contains(abort["AbortIncompleteMultipartUpload"], `"DaysAfterInitiation":1`) {
		t.Errorf("no rule aborting incomplete multipart uploads: %v", rules)
	}
}

func TestFunctions(t *testing.T) {
	setup(t)
	for _, def := range props.Set().Functions {
		t.Run(def.Name, func(t *testing.T) {
			_, fn := template.find(t, "AWS::Lambda::Function", "FunctionName", functionName(props.Prefix, def.Name))
			p := fn.Properties
			if p["Runtime"] != "provided.al2023" || jsonString(p["Architectures"]) != `["arm64"]` || p["Handler"] != "bootstrap" {
				t.Errorf("runtime %v %v handler %v, want provided.al2023 arm64 bootstrap", p["Runtime"], p["Architectures"], p["Handler"])
			}
			if got, want := num(p["Timeout"]), def.Timeout.Seconds(); got != want {
				t.Errorf("Timeout = %v, want %v", got, want)
			}
			if got, want := num(p["MemorySize"]), float64(def.Memory); got != want {
				t.Errorf("MemorySize = %v, want %v", got, want)
			}
			if got, ok := p["ReservedConcurrentExecutions"]; def.Reserved > 0 && num(got) != float64(def.Reserved) || def.Reserved == 0 && ok {
				t.Errorf("ReservedConcurrentExecutions = %v, want %d", got, def.Reserved)
			}
			if def.TmpSize > 0 && !contains(p["EphemeralStorage"], fmt.Sprintf(`"Size":%d`, def.TmpSize)) {
				t.Errorf("EphemeralStorage = %v, want %d MiB", p["EphemeralStorage"], def.TmpSize)
			}
			if !contains(p["LoggingConfig"], `"LogFormat":"JSON"`) {
				t.Errorf("LoggingConfig = %v, want JSON logs", p["LoggingConfig"])
			}
			env, _ := p["Environment"].(map[string]any)["Variables"].(map[string]any)
			for _, k := range []string{
				"RELAY_PREFIX", "RELAY_TABLE", "RELAY_BUCKET", "RELAY_CONFIG", "RELAY_SCHEDULE_GROUP",
				"RELAY_SCHEDULER_ROLE_ARN", "RELAY_SCHEDULER_FUNCTION_ARN", "RELAY_SECRET_PREFIX", "RELAY_ALLOW_PRIVATE_WEBHOOKS",
			} {
				if _, ok := env[k]; !ok {
					t.Errorf("environment has no %s", k)
				}
			}
			if env["RELAY_CONFIG"] != "/var/task/relay.yaml" || env["RELAY_ALLOW_PRIVATE_WEBHOOKS"] != "false" ||
				env["RELAY_PREFIX"] != props.Prefix || env["RELAY_SECRET_PREFIX"] != props.SecretPrefix() {
				t.Errorf("environment = %v", env)
			}
		})
	}
}

// Every queue-fed function's event source matches its definition, and the
// queue's visibility timeout outlasts the function, or a message would be
// delivered again while its first delivery still runs.
func TestEventSources(t *testing.T) {
	setup(t)
	for _, def := range props.Set().Functions {
		if def.Queue == "" {
			continue
		}
		t.Run(def.Name, func(t *testing.T) {
			fnID, fn := template.find(t, "AWS::Lambda::Function", "FunctionName", functionName(props.Prefix, def.Name))
			var esm *cfnResource
			for _, id := range template.ofType("AWS::Lambda::EventSourceMapping") {
				if r := template.Resources[id]; refID(r.Properties["FunctionName"]) == fnID {
					esm = &r
				}
			}
			if esm == nil {
				t.Fatalf("no event source mapping for %s", def.Name)
			}
			queue := template.Resources[refID(esm.Properties["EventSourceArn"])]
			if queue.Properties["QueueName"] != def.Queue {
				t.Errorf("event source queue = %v, want %s", queue.Properties["QueueName"], def.Queue)
			}
			if got := num(esm.Properties["BatchSize"]); got != float64(def.BatchSize) {
				t.Errorf("BatchSize = %v, want %d", got, def.BatchSize)
			}
			if got := jsonString(esm.Properties["FunctionResponseTypes"]); got != `["ReportBatchItemFailures"]` {
				t.Errorf("FunctionResponseTypes = %s, want ReportBatchItemFailures", got)
			}
			scaling, _ := esm.Properties["ScalingConfig"].(map[string]any)
			if def.MaxConcurrency > 0 && num(scaling["MaximumConcurrency"]) != float64(def.MaxConcurrency) {
				t.Errorf("ScalingConfig = %v, want MaximumConcurrency %d", scaling, def.MaxConcurrency)
			}
			if def.MaxConcurrency == 0 && scaling != nil {
				t.Errorf("ScalingConfig = %v, want none", scaling)
			}
			if vis, timeout := num(queue.Properties["VisibilityTimeout"]), num(fn.Properties["Timeout"]); vis <= timeout {
				t.Errorf("queue visibility timeout %vs is not larger than the function timeout %vs", vis, timeout)
			}
		})
	}
	slots := 0
	for _, m := range props.Models.Models {
		slots += m.MaxConcurrency
	}
	if f := props.Set().Function("executor"); f.MaxConcurrency != min(slots, resources.MaxExecutorConcurrency) {
		t.Errorf("the executor's maximum concurrency is %d, want the models' %d slots (at most %d)", f.MaxConcurrency, slots, resources.MaxExecutorConcurrency)
	}
}

// Every function but the executor has reserved concurrency, which is also
// its maximum, and the executor's event source has a maximum: the stack
// alone never takes an account's default 1,000 (docs/architecture.md
// "Concurrency").
func TestConcurrencyBounds(t *testing.T) {
	setup(t)
	reserved := 0.0
	for _, id := range template.ofType("AWS::Lambda::Function") {
		p := template.Resources[id].Properties
		n, ok := p["ReservedConcurrentExecutions"]
		if !ok && p["FunctionName"] != functionName(props.Prefix, "executor") {
			t.Errorf("function %v has no reserved concurrency", p["FunctionName"])
		}
		reserved += num(n)
	}
	var executorMax float64
	for _, id := range template.ofType("AWS::Lambda::EventSourceMapping") {
		p := template.Resources[id].Properties
		scaling, _ := p["ScalingConfig"].(map[string]any)
		if scaling == nil {
			t.Errorf("event source mapping %s has no maximum concurrency", id)
			continue
		}
		executorMax = max(executorMax, num(scaling["MaximumConcurrency"]))
	}
	if reserved > resources.AccountConcurrency/4 || reserved+executorMax > resources.AccountConcurrency-100 {
		t.Errorf("reserved %v and an executor maximum of %v in an account of %d", reserved, executorMax, resources.AccountConcurrency)
	}
}

// statements are every IAM statement of the template's policies and roles.
func statements() []map[string]any {
	var out []map[string]any
	add := func(doc any) {
		for _, s := range list(doc.(map[string]any)["Statement"]) {
			out = append(out, s.(map[string]any))
		}
	}
	for _, id := range template.ofType("AWS::IAM::Policy") {
		add(template.Resources[id].Properties["PolicyDocument"])
	}
	for _, id := range template.ofType("AWS::IAM::Role") {
		for _, p := range list(template.Resources[id].Properties["Policies"]) {
			if p != nil {
				add(p.(map[string]any)["PolicyDocument"])
			}
		}
	}
	return out
}

func TestIAMHasNoWildcards(t *testing.T) {
	setup(t)
	all := statements()
	if len(all) == 0 {
		t.Fatal("no IAM statements found")
	}
	for _, s := range all {
		for _, a := range list(s["Action"]) {
			if strings.Contains(fmt.Sprint(a), "*") {
				t.Errorf("action %v has a wildcard: %s", a, jsonString(s))
			}
		}
		if s["NotAction"] != nil || s["NotResource"] != nil {
			t.Errorf("NotAction/NotResource: %s", jsonString(s))
		}
		for _, r := range list(s["Resource"]) {
			if r == "*" {
				t.Errorf("resource *: %s", jsonString(s))
			}
		}
	}
	// Functions' roles carry no managed policy (AWSLambdaBasicExecutionRole
	// would allow every log group); only API Gateway's account role does.
	for _, id := range template.ofType("AWS::IAM::Role") {
		r := template.Resources[id]
		if mp := r.Properties["ManagedPolicyArns"]; mp != nil && !contains(mp, "AmazonAPIGatewayPushToCloudWatchLogs") {
			t.Errorf("role %s has managed policies %s", id, jsonString(mp))
		}
	}
}

// grants maps each function to the actions its role may take, each with
// the logical ids of the resources it may take them on.
func grants(t *testing.T, name string) map[string][]string {
	t.Helper()
	_, fn := template.find(t, "AWS::Lambda::Function", "FunctionName", functionName(props.Prefix, name))
	role := refID(fn.Properties["Role"])
	out := map[string][]string{}
	for _, id := range template.ofType("AWS::IAM::Policy") {
		p := template.Resources[id].Properties
		if !slices.ContainsFunc(list(p["Roles"]), func(r any) bool { return refID(r) == role }) {
			continue
		}
		for _, s := range list(p["PolicyDocument"].(map[string]any)["Statement"]) {
			s := s.(map[string]any)
			for _, a := range list(s["Action"]) {
				for _, r := range list(s["Resource"]) {
					target := refID(r)
					if target == "" {
						target = jsonString(r)
					}
					out[a.(string)] = append(out[a.(string)], target)
				}
			}
		}
	}
	for a := range out {
		sort.Strings(out[a])
		out[a] = slices.Compact(out[a])
	}
	return out
}

func TestLeastPrivilege(t *testing.T) {
	setup(t)
	sends := map[string][]string{
		"api":        {"DispatchQueue", "WebhookQueue"},
		"dispatcher": {"DispatchQueue", "FinalizeQueue", "WebhookQueue", "WorkDLQ", "WorkQueue"},
		"executor":   {"FinalizeQueue", "WorkQueue"},
		"deadletter": {"FinalizeQueue", "WorkQueue"},
		"finalizer":  {"WebhookQueue"},
		"webhook":    {"WebhookQueue"},
		"scheduler":  {"DispatchQueue", "WebhookQueue"},
	}
	for _, def := range props.Set().Functions {
		t.Run(def.Name, func(t *testing.T) {
			g := grants(t, def.Name)
			if got := g["sqs:SendMessage"]; !slices.Equal(got, sends[def.Name]) {
				t.Errorf("sends to %v, want %v", got, sends[def.Name])
			}
			if !slices.Contains(g["dynamodb:UpdateItem"], "Table") {
				t.Errorf("cannot update the table: %v", g)
			}
			if s3 := g["s3:PutObject"]; (def.Name == "webhook") != (len(s3) == 0) {
				t.Errorf("s3:PutObject on %v", s3)
			}
			// The executor reads the provider keys, the webhook function
			// the operator endpoints' secrets (only theirs).
			sec := g["secretsmanager:GetSecretValue"]
			if (def.Name == "executor" || def.Name == "webhook") != (len(sec) > 0) {
				t.Errorf("secretsmanager:GetSecretValue on %v", sec)
			}
			if def.Name == "webhook" {
				if id, _ := template.find(t, "AWS::SecretsManager::Secret", "Name", props.SecretPrefix()+"OPS_WEBHOOK_SECRET"); !slices.Equal(sec, []string{id}) {
					t.Errorf("webhook function reads secrets %v, want the operator endpoint's only", sec)
				}
			}
			if (def.Name == "api") != (len(g["scheduler:CreateSchedule"]) > 0 && len(g["iam:PassRole"]) > 0) {
				t.Errorf("scheduler:CreateSchedule on %v, iam:PassRole on %v", g["scheduler:CreateSchedule"], g["iam:PassRole"])
			}
			if del := g["scheduler:DeleteSchedule"]; (def.Name == "api" || def.Name == "scheduler") != (len(del) > 0) {
				t.Errorf("scheduler:DeleteSchedule on %v", del)
			}
			for _, arn := range append(g["scheduler:CreateSchedule"], g["scheduler:DeleteSchedule"]...) {
				if !strings.Contains(arn, ":schedule/"+props.Set().ScheduleGroup+"/*") {
					t.Errorf("scheduler grant on %s, want the group's schedules only", arn)
				}
			}
		})
	}
	if g := grants(t, "executor"); !slices.Contains(g["sqs:ChangeMessageVisibility"], "WorkQueue") {
		t.Errorf("the executor cannot extend its work message's visibility: %v", g["sqs:ChangeMessageVisibility"])
	}
}

// The executor, and no other function, may call exactly the configured
// Bedrock models: each foundation model in its region, an inference profile
// and its foundation model in each region it routes to, every region only
// for a global profile.
func TestBedrockLeastPrivilege(t *testing.T) {
	setup(t)
	var want []string
	for _, m := range props.Models.Models {
		want = append(want, m.BedrockARNs("aws", "123456789012")...)
	}
	if len(want) < 4 {
		t.Fatalf("the test stack has %d Bedrock ARNs to grant, want the test's Bedrock models", len(want))
	}
	for _, def := range props.Set().Functions {
		var got []string
		for a, arns := range grants(t, def.Name) {
			if !strings.HasPrefix(a, "bedrock:") {
				continue
			}
			if a != "bedrock:InvokeModel" {
				t.Errorf("%s may %s", def.Name, a)
			}
			for _, arn := range arns {
				got = append(got, resolveArn(t, arn))
			}
		}
		sort.Strings(got)
		if def.Name != "executor" {
			if len(got) > 0 {
				t.Errorf("%s may invoke Bedrock models %q", def.Name, got)
			}
			continue
		}
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("executor may invoke\n  %q\nwant exactly\n  %q", got, want)
		}
		for _, arn := range got {
			if strings.Contains(arn, ":bedrock:*:") && !strings.Contains(arn, "/anthropic.claude-sonnet-4-5-20250929-v1:0") {
				t.Errorf("%s: a wildcard region for a model no global profile runs", arn)
			}
		}
	}
}

// resolveArn reads an ARN the template builds with Fn::Join from the
// partition and account, as in account 123456789012 of partition aws.
func resolveArn(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	if str, ok := v.(string); ok {
		return str
	}
	obj, _ := v.(map[string]any)
	join, ok := obj["Fn::Join"].([]any)
	if !ok {
		t.Fatalf("resource %s is not a string or Fn::Join", s)
	}
	var b strings.Builder
	for _, part := range join[1].([]any) {
		switch p := part.(type) {
		case string:
			b.WriteString(p)
		case map[string]any:
			switch p["Ref"] {
			case "AWS::Partition":
				b.WriteString("aws")
			case "AWS::AccountId":
				b.WriteString("123456789012")
			default:
				t.Fatalf("resource %s refers to %v", s, p)
			}
		}
	}
	return b.String()
}

func TestSchedules(t *testing.T) {
	setup(t)
	set := props.Set()
	check(t, func() {
		tpl.HasResourceProperties(jsii.String("AWS::Scheduler::ScheduleGroup"), map[string]any{"Name": set.ScheduleGroup})
	})
	_, tick := template.find(t, "AWS::Scheduler::Schedule", "Name", props.Prefix+"-tick")
	p := tick.Properties
	if p["ScheduleExpression"] != "rate(1 minute)" || p["GroupName"] != set.ScheduleGroup || !contains(tick.DependsOn, "ScheduleGroup") {
		t.Errorf("tick schedule %v in group %v after %v, want rate(1 minute) in the schedule group, created after it", p["ScheduleExpression"], p["GroupName"], tick.DependsOn)
	}
	target := p["Target"].(map[string]any)
	if refID(target["Arn"]) != "DispatchQueue" || target["Input"] != tickMessage {
		t.Errorf("tick target %v with input %v, want the dispatch queue with %s", target["Arn"], target["Input"], tickMessage)
	}

	// The role template schedules run as may invoke the scheduler function only.
	_, api := template.find(t, "AWS::Lambda::Function", "FunctionName", functionName(props.Prefix, "api"))
	roleID := refID(api.Properties["Environment"].(map[string]any)["Variables"].(map[string]any)["RELAY_SCHEDULER_ROLE_ARN"])
	role, ok := template.Resources[roleID]
	if !ok || !contains(role.Properties["AssumeRolePolicyDocument"], `"Service":"scheduler.amazonaws.com"`) {
		t.Fatalf("RELAY_SCHEDULER_ROLE_ARN names %q, not a role Scheduler assumes", roleID)
	}
	if trust := role.Properties["AssumeRolePolicyDocument"]; !contains(trust, `"aws:SourceArn":{"Fn::GetAtt":["ScheduleGroup","Arn"]}`) ||
		!contains(trust, `"aws:SourceAccount"`) {
		t.Errorf("scheduler role trust %s, want it limited to the schedule group of this account", jsonString(trust))
	}
	var invoke []string
	for _, id := range template.ofType("AWS::IAM::Policy") {
		pol := template.Resources[id].Properties
		if refID(list(pol["Roles"])[0]) == roleID {
			for _, s := range list(pol["PolicyDocument"].(map[string]any)["Statement"]) {
				invoke = append(invoke, jsonString(s))
			}
		}
	}
	if len(invoke) != 1 || !strings.Contains(invoke[0], `"Action":"lambda:InvokeFunction"`) ||
		!strings.Contains(invoke[0], ":function:"+functionName(props.Prefix, "scheduler")) {
		t.Errorf("scheduler role statements = %v, want lambda:InvokeFunction on the scheduler function", invoke)
	}
}

func TestSecrets(t *testing.T) {
	setup(t)
	for _, m := range props.Models.Models {
		if m.APIKeyEnv == "" {
			continue // a Bedrock model signed with the role's credentials
		}
		check(t, func() {
			tpl.HasResourceProperties(jsii.String("AWS::SecretsManager::Secret"), map[string]any{"Name": props.SecretPrefix() + m.APIKeyEnv})
		})
	}
	if len(props.Models.OperatorWebhooks) == 0 {
		t.Fatal("the test stack has no operator webhook endpoint")
	}
	for _, w := range props.Models.OperatorWebhooks {
		check(t, func() {
			tpl.HasResourceProperties(jsii.String("AWS::SecretsManager::Secret"), map[string]any{"Name": props.SecretPrefix() + w.SecretEnv})
		})
	}
}

// The routes that return file content and results use response streaming,
// through Lambda's response-streaming invocation; everything else is
// buffered, and every path reaches the api function.
func TestStreamedRoutes(t *testing.T) {
	setup(t)
	// Resource paths from PathPart and ParentId.
	paths := map[string]string{}
	var pathOf func(id string) string
	pathOf = func(id string) string {
		if p, ok := paths[id]; ok {
			return p
		}
		r, ok := template.Resources[id]
		if !ok || r.Type != "AWS::ApiGateway::Resource" {
			return "" // the root
		}
		paths[id] = pathOf(refID(r.Properties["ParentId"])) + "/" + r.Properties["PathPart"].(string)
		return paths[id]
	}
	streamed := map[string]bool{}
	anyMethod := map[string]bool{}
	for _, id := range template.ofType("AWS::ApiGateway::Method") {
		p := template.Resources[id].Properties
		path := pathOf(refID(p["ResourceId"]))
		if path == "" {
			path = "/"
		}
		integration, _ := p["Integration"].(map[string]any)
		switch p["HttpMethod"] {
		case "OPTIONS":
			// With binary media type */* a MOCK integration must convert to text.
			if integration["ContentHandling"] != "CONVERT_TO_TEXT" {
				t.Errorf("OPTIONS %s: ContentHandling %v, want CONVERT_TO_TEXT", path, integration["ContentHandling"])
			}
			continue
		case "ANY":
			anyMethod[path] = true
		default:
			t.Errorf("%v %s: want only ANY and OPTIONS methods", p["HttpMethod"], path)
		}
		if integration["Type"] != "AWS_PROXY" || !contains(integration["Uri"], "ApiFunction") {
			t.Errorf("%s: integration %s, want a proxy to the api function", path, jsonString(integration))
		}
		uri := jsonString(integration["Uri"])
		if integration["ResponseTransferMode"] == "STREAM" {
			streamed[path] = true
			if got, want := num(integration["TimeoutInMillis"]), float64(resources.StreamTimeout(props.Set().Function("api").Timeout).Milliseconds()); got != want {
				t.Errorf("%s: stream timeout %vms, want %vms", path, got, want)
			}
			if !strings.Contains(uri, "/response-streaming-invocations") {
				t.Errorf("%s streams, but its URI is %s", path, uri)
			}
		} else if strings.Contains(uri, "response-streaming") || !strings.HasSuffix(uri, `/invocations"]]}`) {
			t.Errorf("%s is buffered, but its URI is %s", path, uri)
		}
	}
	want := map[string]bool{}
	for _, r := range apigw.StreamedRoutes {
		want[r] = true
	}
	if fmt.Sprint(streamed) != fmt.Sprint(want) {
		t.Errorf("streamed routes = %v, want apigw.StreamedRoutes %v", streamed, want)
	}
	for _, id := range template.ofType("AWS::ApiGateway::Resource") {
		if !anyMethod[pathOf(id)] {
			t.Errorf("resource %s has no ANY method: requests to it would not reach the api", pathOf(id))
		}
	}
	for _, p := range []string{"/", "/{proxy+}", "/v1/{proxy+}", "/v1/batches/{id}/{proxy+}"} {
		if !anyMethod[p] {
			t.Errorf("no ANY method on %s", p)
		}
	}
}

func TestRestAPI(t *testing.T) {
	setup(t)
	check(t, func() {
		tpl.HasResourceProperties(jsii.String("AWS::ApiGateway::RestApi"), map[string]any{
			"BinaryMediaTypes":      binaryMediaTypes,
			"EndpointConfiguration": map[string]any{"Types": []any{"REGIONAL"}},
		})
	})
	_, stage := template.find(t, "AWS::ApiGateway::Stage", "StageName", props.StageName)
	p := stage.Properties
	if !contains(p["AccessLogSetting"], "DestinationArn") || !contains(p["AccessLogSetting"], "$context.requestId") {
		t.Errorf("AccessLogSetting = %v, want JSON access logs", p["AccessLogSetting"])
	}
	if !contains(p["MethodSettings"], fmt.Sprintf(`"ThrottlingRateLimit":%v`, props.ThrottleRate)) ||
		!contains(p["MethodSettings"], fmt.Sprintf(`"ThrottlingBurstLimit":%v`, props.ThrottleBurst)) {
		t.Errorf("MethodSettings = %v, want stage throttling", jsonString(p["MethodSettings"]))
	}
	for _, h := range corsHeaders {
		check(t, func() {
			tpl.HasResourceProperties(jsii.String("AWS::ApiGateway::Method"), map[string]any{
				"HttpMethod": "OPTIONS",
				"Integration": map[string]any{"IntegrationResponses": []any{map[string]any{"ResponseParameters": map[string]any{
					"method.response.header.Access-Control-Allow-Headers": assertions.Match_StringLikeRegexp(jsii.String(h)),
				}}}},
			})
		})
	}
	for _, typ := range []string{"DEFAULT_4XX", "DEFAULT_5XX"} {
		_, gr := template.find(t, "AWS::ApiGateway::GatewayResponse", "ResponseType", typ)
		if !contains(gr.Properties["ResponseTemplates"], `{\"error\":{\"message\":$context.error.messageString`) {
			t.Errorf("%s body = %v, want OpenAI's error shape", typ, gr.Properties["ResponseTemplates"])
		}
	}
	for _, out := range []string{"BaseUrl", "PanelUrl"} {
		if _, ok := template.Outputs[out]; !ok {
			t.Errorf("no %s output", out)
		}
	}
}

// The per-client rate-based rule is off by default; with -c wafRateLimit=N
// a regional web ACL blocks a client IP past N requests in 5 minutes with a
// 429 in OpenAI's error shape, and is associated with the API's stage.
func TestWAFRateRule(t *testing.T) {
	setup(t)
	for _, typ := range []string{"AWS::WAFv2::WebACL", "AWS::WAFv2::WebACLAssociation"} {
		if ids := template.ofType(typ); len(ids) != 0 {
			t.Errorf("default stack has %s %v, want none", typ, ids)
		}
	}
	acls := firewalled.ofType("AWS::WAFv2::WebACL")
	if len(acls) != 1 {
		t.Fatalf("stack with wafRateLimit: web ACLs %v, want one", acls)
	}
	acl := firewalled.Resources[acls[0]].Properties
	rule := jsonString(acl["Rules"])
	if acl["Scope"] != "REGIONAL" || !contains(acl["DefaultAction"], `"Allow"`) ||
		!strings.Contains(rule, `"RateBasedStatement":{"AggregateKeyType":"IP","EvaluationWindowSec":300,"Limit":600}`) ||
		!strings.Contains(rule, `"ResponseCode":429`) || !contains(acl["CustomResponseBodies"], `rate_limit_exceeded`) {
		t.Errorf("web ACL: scope %v, default %v, rules %s, bodies %v", acl["Scope"], acl["DefaultAction"], rule, acl["CustomResponseBodies"])
	}
	assoc := firewalled.ofType("AWS::WAFv2::WebACLAssociation")
	if len(assoc) != 1 {
		t.Fatalf("web ACL associations %v, want one", assoc)
	}
	a := firewalled.Resources[assoc[0]].Properties
	if !contains(a["WebACLArn"], acls[0]) || !contains(a["ResourceArn"], "/stages/") || !contains(a["ResourceArn"], "RestApi") {
		t.Errorf("association %v, want the web ACL on the API's stage", jsonString(a))
	}
}

func TestAlarms(t *testing.T) {
	setup(t)
	byMetric := map[string]int{}
	for _, id := range template.ofType("AWS::CloudWatch::Alarm") {
		p := template.Resources[id].Properties
		if p["Metrics"] != nil { // metric math: a model's alarms, named <prefix>-<kind>-<model>
			byMetric["math "+strings.Split(fmt.Sprint(p["AlarmName"]), "-")[1]]++
			continue
		}
		byMetric[fmt.Sprint(p["Namespace"], " ", p["MetricName"])]++
		if !contains(p["AlarmActions"], "ObservabilityAlarms") {
			t.Errorf("alarm %s notifies %v, want the alarm topic", id, p["AlarmActions"])
		}
	}
	set := props.Set()
	want := map[string]int{
		"AWS/SQS ApproximateNumberOfMessagesVisible":                     len(set.Queues),
		"AWS/Lambda Errors":                                              len(set.Functions),
		"AWS/Lambda Throttles":                                           len(set.Functions),
		"AWS/SQS ApproximateAgeOfOldestMessage":                          2,
		resources.MetricNamespace + " " + resources.MetricOldestBatchAge: 1,
		"AWS/ApiGateway 5XXError":                                        1,
		"math ModelErrorRate":                                            len(props.Models.Models),
		"math ModelCapacityPinned":                                       len(props.Models.Models),
		"math UpstreamCircuitOpen":                                       len(props.Models.Models),
		"math UpstreamKeyDropped":                                        len(props.Models.Models),
	}
	if fmt.Sprint(byMetric) != fmt.Sprint(want) {
		t.Errorf("alarms by metric = %v, want %v", byMetric, want)
	}
}

// The dashboard shows every metric the functions publish per model
// (internal/metrics), for every model.
func TestDashboard(t *testing.T) {
	setup(t)
	ids := template.ofType("AWS::CloudWatch::Dashboard")
	if len(ids) != 1 {
		t.Fatalf("%d dashboards, want 1", len(ids))
	}
	body := jsonString(template.Resources[ids[0]].Properties["DashboardBody"])
	for _, name := range append(metrics.ModelNames, metrics.InFlight, metrics.Capacity, metrics.ChunkDuration, metrics.CircuitsOpened, metrics.KeysDropped) {
		if !strings.Contains(body, `\"`+name+`\"`) {
			t.Errorf("dashboard has no metric %s", name)
		}
	}
	if !strings.Contains(body, `\"`+metrics.Function+`\",\"executor\"`) {
		t.Errorf("dashboard's chunk durations are not the executor's (dimension %s)", metrics.Function)
	}
	for _, m := range props.Models.Models {
		if !strings.Contains(body, m.Name) {
			t.Errorf("dashboard has no model %s", m.Name)
		}
	}
}

// Every alarm's description names an entry of docs/runbook.md that exists.
func TestAlarmsNameTheirRunbookEntry(t *testing.T) {
	setup(t)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for line := range strings.Lines(string(doc)) {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			anchors[strings.ToLower(strings.TrimSpace(h))] = true
		}
	}
	ids := template.ofType("AWS::CloudWatch::Alarm")
	if len(ids) == 0 {
		t.Fatal("no alarms")
	}
	for _, id := range ids {
		desc := fmt.Sprint(template.Resources[id].Properties["AlarmDescription"])
		_, anchor, ok := strings.Cut(desc, "Runbook: docs/runbook.md#")
		if !ok || !anchors[anchor] {
			t.Errorf("alarm %s: description %q names no entry of docs/runbook.md (entries: %d)", id, desc, len(anchors))
		}
	}
}

// cfn-lint, the CloudFormation linter, finds nothing in the template but
// W3005 (a DependsOn a reference already implies), which CDK emits for every
// function's role policy.
func TestCfnLint(t *testing.T) {
	setup(t)
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Fatal("cfn-lint is not installed: it is part of the test suite (pip's cfn-lint; .ci/run checks for it)")
	}
	// The stack with the WAF rule (off by default) is linted too.
	for name, data := range map[string][]byte{"relay": templateJSON, "relaywaf": firewalledJSON} {
		path := filepath.Join(t.TempDir(), name+".template.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(lint, "--ignore-checks", "W3005", "--", path).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("cfn-lint %s: %v\n%s", name, err, out)
		}
	}
}

func TestPropsFromContext(t *testing.T) {
	setup(t)
	ctx := func(kv map[string]any) map[string]any {
		kv["config"] = filepath.Join("..", "relay.yaml")
		return kv
	}
	p, err := propsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"config": filepath.Join("..", "relay.yaml")}}).Node())
	if err != nil {
		t.Fatal(err)
	}
	if !p.DeletionProtection || *p.Arch.Name() != "arm64" || p.Prefix != "relay" || len(p.Models.Models) == 0 || !p.ReserveConcurrency {
		t.Errorf("defaults: %+v", p)
	}
	p, err = propsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{
		"config": filepath.Join("..", "relay.yaml"), "arch": "amd64", "deletionProtection": "false",
		"corsOrigins": "https://a.example,https://b.example", "throttleRate": "5", "prefix": "relay-dev", "wafRateLimit": "1000", "reserveConcurrency": "false",
		"auditRetentionDays": "2555", "auditObjectLock": "governance",
	}}).Node())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := propsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{
		"config": filepath.Join("..", "relay.aws.example.yaml"), "requireRemoteModels": "true",
	}}).Node()); err != nil {
		t.Errorf("the example models file for AWS: %v", err)
	}
	if p.DeletionProtection || *p.Arch.Name() != "x86_64" || p.ThrottleRate != 5 || p.Prefix != "relay-dev" || p.WAFRateLimit != 1000 || p.ReserveConcurrency ||
		p.Set().AuditRetention != 2555*24*time.Hour || p.auditLock()["RELAY_AUDIT_LOCK_DAYS"] != "2555" || p.auditLock()["RELAY_AUDIT_LOCK_MODE"] != "GOVERNANCE" ||
		!slices.Equal(p.CORSOrigins, []string{"https://a.example", "https://b.example"}) {
		t.Errorf("from context: %+v", p)
	}
	for _, bad := range []map[string]any{
		{"arch": "mips"}, {"deletionProtection": "maybe"}, {"throttleRate": "-1"}, {"prefix": "Relay"},
		{"wafRateLimit": "5"}, {"wafRateLimit": "many"}, {"wafRateLimit": "2500000000"},
		{"auditRetentionDays": "0.5"}, {"auditRetentionDays": "-3"}, {"auditObjectLock": "forever"},
		{"config": "no-such-file.yaml"},
		{"requireRemoteModels": "true"}, // relay.yaml points at the mock on 127.0.0.1
	} {
		c := ctx(map[string]any{})
		for k, v := range bad {
			c[k] = v
		}
		if _, err := propsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: &c}).Node()); err == nil {
			t.Errorf("context %v: no error", bad)
		}
	}
}

// -c auditObjectLock=compliance turns Object Lock on for the bucket (and so
// versioning, with noncurrent versions expiring), lets the functions put
// a retention on audit objects only, and tells them the mode and days;
// no bucket-wide default retention locks the other objects. Without it
// the stack has none of these.
func TestAuditObjectLock(t *testing.T) {
	setup(t)
	bucket := func(tpl cfnTemplate) map[string]any { return tpl.Resources["Bucket"].Properties }
	b := bucket(locked)
	if b["ObjectLockEnabled"] != true || !contains(b["VersioningConfiguration"], `"Status":"Enabled"`) {
		t.Errorf("locked bucket: ObjectLockEnabled %v, versioning %v; want both on", b["ObjectLockEnabled"], b["VersioningConfiguration"])
	}
	if _, ok := b["ObjectLockConfiguration"]; ok {
		t.Errorf("locked bucket has a default retention %v: it would lock every object", b["ObjectLockConfiguration"])
	}
	if !contains(b["LifecycleConfiguration"], `"NoncurrentVersionExpiration":{"NoncurrentDays":1}`) {
		t.Errorf("locked bucket's lifecycle %v: want noncurrent versions expiring", b["LifecycleConfiguration"])
	}
	for _, id := range locked.ofType("AWS::Lambda::Function") {
		env, _ := locked.Resources[id].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
		if env["RELAY_AUDIT_LOCK_MODE"] != "COMPLIANCE" || env["RELAY_AUDIT_LOCK_DAYS"] != "30" {
			t.Errorf("function %s: lock mode %v, days %v; want COMPLIANCE, 30", id, env["RELAY_AUDIT_LOCK_MODE"], env["RELAY_AUDIT_LOCK_DAYS"])
		}
	}
	retention := func(tpl cfnTemplate) (n int) {
		for _, id := range tpl.ofType("AWS::IAM::Policy") {
			doc, _ := json.Marshal(tpl.Resources[id].Properties["PolicyDocument"])
			if strings.Contains(string(doc), "s3:PutObjectRetention") {
				n++
				if !strings.Contains(string(doc), "/audit/*") {
					t.Errorf("policy %s allows a retention beyond audit/: %s", id, doc)
				}
			}
		}
		return n
	}
	if retention(locked) == 0 {
		t.Error("no function may put an audit object's retention")
	}
	b = bucket(template)
	if _, ok := b["ObjectLockEnabled"]; ok || b["VersioningConfiguration"] != nil || retention(template) != 0 {
		t.Errorf("default stack: ObjectLockEnabled %v, versioning %v; want no Object Lock", b["ObjectLockEnabled"], b["VersioningConfiguration"])
	}
	for _, id := range template.ofType("AWS::Lambda::Function") {
		env, _ := template.Resources[id].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
		if _, ok := env["RELAY_AUDIT_LOCK_MODE"]; ok {
			t.Errorf("default stack: function %s has a lock mode", id)
		}
	}
}
