package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/resources"
)

// cdkContext is the context of cdk.json: the feature flags and the default
// context. The cdk CLI passes it to the app itself; reading it here too
// makes a run without the CLI (the tests, a plain `go run ./infra`) build
// the same template. Context from the CLI takes precedence over it.
func cdkContext(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c.Context, nil
}

// RelayProps is what a deployment varies: everything else comes from
// resources.Define(Prefix).
type RelayProps struct {
	Prefix string
	// ModelsPath is the models file baked into every function (-c config=…).
	ModelsPath string
	Models     *config.Models
	// BuildDir holds build/<function>/bootstrap from `make build`.
	BuildDir string
	// Arch is the bootstraps' architecture: arm64 in AWS; LocalStack runs
	// the host's (deploy-local builds for it).
	Arch awslambda.Architecture
	// BundleDir holds one asset directory per function (stageBundles).
	BundleDir string
	// DeletionProtection keeps the table and bucket when the stack goes:
	// table deletion protection on and both retained.
	DeletionProtection bool
	// CORSOrigins may call the API (and PUT presigned uploads) from a browser: the panel.
	CORSOrigins []string
	// AlarmEmail, when set, is subscribed to the alarm topic.
	AlarmEmail    string
	StageName     string
	ThrottleRate  float64 // requests per second, stage-wide
	ThrottleBurst float64
	// ReserveConcurrency gives every function but the executor its
	// reserved concurrency (docs/architecture.md "Concurrency"); turn it off
	// in an account whose Lambda limit is below what they need.
	ReserveConcurrency bool
	// AuditRetentionDays, when above 0, is how long the audit trail is
	// kept (resources.DefaultAuditRetention otherwise).
	AuditRetentionDays float64
	// AuditObjectLock, "governance" or "compliance", turns S3 Object Lock
	// on for the bucket and puts each audit trail object under it in that
	// mode for the audit retention (auditLock); "" (the default) none.
	AuditObjectLock string
	// WAFRateLimit, when above 0, puts a web ACL on the stage that blocks
	// a client IP past this many requests in 5 minutes (newFirewall).
	WAFRateLimit float64
	// APIGatewayAccountRole makes the stack set the account-wide role API
	// Gateway writes logs with, which access logs need; turn it off in an
	// account that already has one.
	APIGatewayAccountRole bool
	// RequireRemoteModels refuses a models file with a model on this
	// machine (the default file's mock): make deploy sets it, make synth
	// and deploy-local do not.
	RequireRemoteModels bool
}

// Set is the deployment's resource definitions, the executor's maximum
// concurrency sized for its models.
func (p RelayProps) Set() resources.Set {
	slots := 0
	if p.Models != nil {
		for _, m := range p.Models.Models {
			slots += m.MaxConcurrency
		}
	}
	set := resources.Define(p.Prefix).SizedFor(slots)
	if p.AuditRetentionDays > 0 {
		set.AuditRetention = time.Duration(p.AuditRetentionDays) * 24 * time.Hour
	}
	return set
}

// auditLock is the functions' environment of the Object Lock of audit
// trail objects (config.Env.AuditLockMode): none unless AuditObjectLock.
func (p RelayProps) auditLock() map[string]string {
	if p.AuditObjectLock == "" {
		return nil
	}
	return map[string]string{
		"RELAY_AUDIT_LOCK_MODE": strings.ToUpper(p.AuditObjectLock),
		"RELAY_AUDIT_LOCK_DAYS": strconv.Itoa(int(p.Set().AuditRetention / (24 * time.Hour))),
	}
}

// RemovalPolicy is what happens to stateful resources (table, bucket,
// schedule group, log groups) when the stack is deleted.
func (p RelayProps) RemovalPolicy() awscdk.RemovalPolicy {
	if p.DeletionProtection {
		return awscdk.RemovalPolicy_RETAIN
	}
	return awscdk.RemovalPolicy_DESTROY
}

// SecretPrefix starts the name of every provider key secret: the secret
// of a model is SecretPrefix + its api_key_env.
func (p RelayProps) SecretPrefix() string { return p.Prefix + "/" }

// defaultProps is a deployment with no context given.
func defaultProps() RelayProps {
	return RelayProps{
		Prefix:                "relay",
		ModelsPath:            "relay.yaml",
		BuildDir:              "build",
		Arch:                  awslambda.Architecture_ARM_64(),
		DeletionProtection:    true,
		CORSOrigins:           []string{"*"},
		StageName:             "prod",
		ThrottleRate:          100,
		ThrottleBurst:         200,
		APIGatewayAccountRole: true,
		ReserveConcurrency:    true,
	}
}

// propsFromContext reads `-c key=value` context: prefix, config, build,
// arch, deletionProtection, corsOrigins (comma-separated), alarmEmail, stage,
// throttleRate, throttleBurst, wafRateLimit, auditRetentionDays, auditObjectLock, apiGatewayAccountRole,
// requireRemoteModels, reserveConcurrency.
// It loads and validates the models file, so a bad one fails the synth.
func propsFromContext(node constructs.Node) (RelayProps, error) {
	p := defaultProps()
	str := func(key string, dst *string) {
		if v, ok := node.TryGetContext(jsii.String(key)).(string); ok && v != "" {
			*dst = v
		}
	}
	var errs []string
	boolean := func(key string, dst *bool) {
		switch v := node.TryGetContext(jsii.String(key)).(type) {
		case bool:
			*dst = v
		case string:
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Sprintf("context %s: %q is not a boolean", key, v))
			}
			*dst = b
		}
	}
	number := func(key string, dst *float64) {
		switch v := node.TryGetContext(jsii.String(key)).(type) {
		case float64:
			*dst = v
		case string:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				errs = append(errs, fmt.Sprintf("context %s: %q is not a positive number", key, v))
			}
			*dst = f
		}
	}
	str("prefix", &p.Prefix)
	str("config", &p.ModelsPath)
	str("build", &p.BuildDir)
	str("alarmEmail", &p.AlarmEmail)
	str("stage", &p.StageName)
	var arch string
	str("arch", &arch)
	switch arch {
	case "", "arm64":
	case "amd64", "x86_64":
		p.Arch = awslambda.Architecture_X86_64()
	default:
		errs = append(errs, fmt.Sprintf("context arch: %q is not arm64 or amd64", arch))
	}
	str("auditObjectLock", &p.AuditObjectLock)
	if m := p.AuditObjectLock; m != "" && m != "governance" && m != "compliance" {
		errs = append(errs, fmt.Sprintf("context auditObjectLock: %q is not governance or compliance", m))
	}
	var origins string
	str("corsOrigins", &origins)
	if origins != "" {
		p.CORSOrigins = strings.Split(origins, ",")
	}
	boolean("deletionProtection", &p.DeletionProtection)
	boolean("apiGatewayAccountRole", &p.APIGatewayAccountRole)
	boolean("requireRemoteModels", &p.RequireRemoteModels)
	boolean("reserveConcurrency", &p.ReserveConcurrency)
	number("throttleRate", &p.ThrottleRate)
	number("throttleBurst", &p.ThrottleBurst)
	number("wafRateLimit", &p.WAFRateLimit)
	number("auditRetentionDays", &p.AuditRetentionDays)
	if d := p.AuditRetentionDays; d != float64(int64(d)) {
		errs = append(errs, fmt.Sprintf("context auditRetentionDays: %v is not a whole number of days", d))
	}
	if l := p.WAFRateLimit; l != 0 && (l < minWAFRateLimit || l > maxWAFRateLimit || l != float64(int64(l))) {
		errs = append(errs, fmt.Sprintf("context wafRateLimit: %v is not a whole number of requests from %d to %d", l, minWAFRateLimit, maxWAFRateLimit))
	}
	if len(errs) > 0 {
		return p, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	if err := resources.ValidPrefix(p.Prefix); err != nil {
		return p, err
	}
	ms, err := config.LoadModels(p.ModelsPath)
	if err != nil {
		return p, fmt.Errorf("context config: %w", err)
	}
	if local := ms.OnThisMachine(); p.RequireRemoteModels && len(local) > 0 {
		return p, fmt.Errorf("context config: %s: the base_url of %s is this machine, which deployed functions cannot reach: "+
			"deploy with a models file of your providers (-c config=…; README \"Deploy to AWS\", relay.aws.example.yaml)", p.ModelsPath, strings.Join(local, ", "))
	}
	p.Models = ms
	return p, nil
}
