package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
)

// The stack is synthesized once for the whole test binary: every restart of
// the jsii kernel costs seconds; under -short not at all (make unit leaves
// this package out: it would link the CDK only to skip), and
// the tests that need it are skipped. Two stacks: the default deployment, and one
// without deletion protection.
var (
	props          RelayProps
	tpl            assertions.Template // for the assertions API (panics on failure: use check)
	template       cfnTemplate         // the same template as plain Go values
	templateJSON   []byte
	unprotected    cfnTemplate // no deletion protection, x86_64: a LocalStack deployment
	firewalled     cfnTemplate // with the WAF rate-based rule (-c wafRateLimit=…)
	firewalledJSON []byte
	locked         cfnTemplate // with Object Lock on the audit objects (-c auditObjectLock=compliance)
	setupFailure   error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	code := func() int {
		defer jsii.Close()
		dir, err := os.MkdirTemp("", "relay-infra-test-")
		if err != nil {
			setupFailure = err
			return emutest.Run(m)
		}
		defer os.RemoveAll(dir)
		setupFailure = synthForTest(dir)
		return emutest.Run(m)
	}()
	os.Exit(code)
}

func synthForTest(dir string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	props = defaultProps()
	props.ModelsPath = filepath.Join("..", "relay.yaml")
	data, err := os.ReadFile(props.ModelsPath)
	if err != nil {
		return err
	}
	ms, err := config.ParseModels(append(data, bedrockModels+operatorWebhooks...))
	if err != nil {
		return err
	}
	props.Models = ms
	// Stand-in binaries: the template does not depend on their content.
	props.BuildDir = filepath.Join(dir, "build")
	for _, f := range props.Set().Functions {
		bin := filepath.Join(props.BuildDir, f.Name, "bootstrap")
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
			return err
		}
	}
	props.BundleDir = filepath.Join(dir, "bundles")
	if err := stageBundles(props.BundleDir, props.BuildDir, props.ModelsPath, props.Set().Functions); err != nil {
		return err
	}

	ctx, err := cdkContext(filepath.Join("..", "cdk.json"))
	if err != nil {
		return err
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(filepath.Join(dir, "cdk.out")), Context: &ctx})
	dev := props
	dev.Prefix = "relaydev"
	dev.DeletionProtection = false
	dev.Arch = awslambda.Architecture_X86_64() // what deploy-local does on an x86 host
	waf := props
	waf.Prefix = "relaywaf"
	waf.WAFRateLimit = 600
	lock := props
	lock.Prefix = "relaylock"
	lock.AuditObjectLock = "compliance"
	lock.AuditRetentionDays = 30
	// Every stack exists before the first synth: the tree is frozen after it.
	stack, devStack, wafStack := NewRelayStack(app, props), NewRelayStack(app, dev), NewRelayStack(app, waf)
	lockStack := NewRelayStack(app, lock)
	tpl = assertions.Template_FromStack(stack, nil)
	if template, err = toTemplate(tpl); err != nil {
		return err
	}
	if unprotected, err = toTemplate(assertions.Template_FromStack(devStack, nil)); err != nil {
		return err
	}
	if locked, err = toTemplate(assertions.Template_FromStack(lockStack, nil)); err != nil {
		return err
	}
	if firewalledJSON, err = json.Marshal(assertions.Template_FromStack(wafStack, nil).ToJSON()); err != nil {
		return err
	}
	return json.Unmarshal(firewalledJSON, &firewalled)
}

// bedrockModels are added to the default models file in the test stack:
// one of each kind of Bedrock model the grant has to cover.
const bedrockModels = `
  - {name: claude-bedrock, provider: bedrock, shape: anthropic, region: us-east-1, upstream_model: "anthropic.claude-haiku-4-5-20251001-v1:0"}
  - {name: claude-us, provider: bedrock, shape: anthropic, region: us-east-1, upstream_model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", regions: [us-east-1, us-east-2, us-west-2]}
  - {name: claude-global, provider: bedrock, shape: anthropic, region: eu-west-1, upstream_model: "global.anthropic.claude-sonnet-4-5-20250929-v1:0"}
  - {name: gpt-oss-bedrock, provider: bedrock, shape: openai, region: us-west-2, upstream_model: "openai.gpt-oss-120b-1:0", api_key_env: BEDROCK_API_KEY}
`

// operatorWebhooks are added to the test stack's models file: an operator
// endpoint's secret is in Secrets Manager, readable by the webhook function.
const operatorWebhooks = `
operator_webhooks:
  - {name: ops, url: https://ops.example.com/relay, secret_env: OPS_WEBHOOK_SECRET, events: [batch.completed, batch.failed]}
`

func toTemplate(t assertions.Template) (cfnTemplate, error) {
	var out cfnTemplate
	b, err := json.Marshal(t.ToJSON())
	if err != nil {
		return out, err
	}
	if templateJSON == nil {
		templateJSON = b
	}
	return out, json.Unmarshal(b, &out)
}

// setup fails the test when the stack could not be synthesized.
func setup(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the stack synthesized through jsii and Node.js (about 20 s): -short runs without it; make test and make infra-test run this")
	}
	if setupFailure != nil {
		t.Fatalf("synthesize stack: %v", setupFailure)
	}
}

// check runs an assertions call, which panics when it fails, as a test error.
func check(t *testing.T, assertion func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%v", r)
		}
	}()
	assertion()
}

// cfnTemplate is a synthesized CloudFormation template.
type cfnTemplate struct {
	Resources map[string]cfnResource `json:"Resources"`
	Outputs   map[string]any         `json:"Outputs"`
}

type cfnResource struct {
	Type           string         `json:"Type"`
	Properties     map[string]any `json:"Properties"`
	DeletionPolicy string         `json:"DeletionPolicy"`
	DependsOn      any            `json:"DependsOn"`
}

// ofType returns the logical ids of the resources of one type, sorted.
func (c cfnTemplate) ofType(typ string) []string {
	var ids []string
	for id, r := range c.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// find returns the one resource of typ whose property key equals value.
func (c cfnTemplate) find(t *testing.T, typ, key string, value any) (string, cfnResource) {
	t.Helper()
	var found []string
	for _, id := range c.ofType(typ) {
		if fmt.Sprint(c.Resources[id].Properties[key]) == fmt.Sprint(value) {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s with %s=%v: found %d (%v), want 1", typ, key, value, len(found), found)
	}
	return found[0], c.Resources[found[0]]
}

// refID is the logical id a {"Ref": id} or {"Fn::GetAtt": [id, attr]} names.
func refID(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if r, ok := m["Ref"].(string); ok {
		return r
	}
	if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) > 0 {
		s, _ := ga[0].(string)
		return s
	}
	return ""
}

// list turns a single value or a list into a list, as IAM allows both.
func list(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

func num(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case string:
		var f float64
		fmt.Sscan(n, &f)
		return f
	}
	return -1
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func contains(haystack any, needle string) bool {
	return strings.Contains(jsonString(haystack), needle)
}
