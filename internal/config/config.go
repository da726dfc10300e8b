// Package config owns the service's configuration: the models file
// (relay.yaml, README "Configuration") and the environment a function or the local runtime
// runs with. Both are parsed once into typed structs and fail fast with a
// message that names the offending field or variable.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
)

// Provider is the upstream a model is called at. OpenAI and Anthropic also
// name the two request shapes (a model's Shape, an endpoint's): the shapes
// are those providers' APIs, which other upstreams (Bedrock) take too.
type Provider string

const (
	OpenAI    Provider = "openai"
	Anthropic Provider = "anthropic"
	// Bedrock is Amazon Bedrock's runtime, called with the function's own
	// AWS credentials (or a Bedrock API key), in either shape.
	Bedrock Provider = "bedrock"
)

// Model is one entry of the models file.
type Model struct {
	Name     string   `yaml:"name"`
	Provider Provider `yaml:"provider"`
	// Shape is the request shape the model takes: its provider's own for
	// openai and anthropic, and anthropic or openai for bedrock.
	Shape Provider `yaml:"shape"`
	// Region is the AWS region of a bedrock model's runtime endpoint.
	Region string `yaml:"region"`
	// Regions are the regions a cross-region inference profile (an
	// upstream_model such as us.anthropic.…) routes to: the deployment
	// grants the foundation model in each of them (infra/bedrock.go).
	Regions       []string `yaml:"regions"`
	BaseURL       string   `yaml:"base_url"`
	APIKeyEnv     string   `yaml:"api_key_env"`
	UpstreamModel string   `yaml:"upstream_model"`
	Fallback      string   `yaml:"fallback"`
	// APIKeyEnvs is a pool of keys, each named as api_key_env names one
	// (give one or the other): rows spread over them and a key answering
	// 401/403 is dropped (docs/design.md "Rate budgets").
	APIKeyEnvs     []string      `yaml:"api_key_envs"`
	MaxConcurrency int           `yaml:"max_concurrency"`
	Timeout        time.Duration `yaml:"timeout"`
	// RPM and TPM are each key's requests and tokens (input + output) per
	// minute at the provider; ITPM and OTPM split the tokens as Anthropic
	// limits them. 0 is no limit. The executors pace the rows to them
	// (docs/design.md "Rate budgets").
	RPM  int `yaml:"rpm"`
	TPM  int `yaml:"tpm"`
	ITPM int `yaml:"itpm"`
	OTPM int `yaml:"otpm"`
	// CallTimeLimit bounds one call of a workflow step's request (docs/api.md
	// "Workflow records"): a call past it is stopped, never retried, and
	// comes back as request_time_limit. The executor's run bounds it too.
	CallTimeLimit time.Duration `yaml:"call_time_limit"`
	// Price, if given, is what the model's tokens cost: tenants' budgets
	// in USD count only priced models (docs/api.md "Budgets, revocation and allow-lists").
	Price *Price `yaml:"price"`
	// Batch is how the model's batch rows run: direct (the default: the
	// executors send every row) or native (the provider's own batch API,
	// internal/native; README "Native, direct or hybrid").
	Batch BatchMode `yaml:"batch"`
	// Tokenizer is how a quote counts the model's input tokens (docs/api.md
	// "Quotes"): o200k_base or cl100k_base (OpenAI's BPE encodings, the
	// default o200k_base for the openai shape), bytes (a calibrated
	// bytes-per-token estimate, the default elsewhere) or words (the mock
	// provider's count: whitespace-separated words plus one per message).
	Tokenizer Tokenizer `yaml:"tokenizer"`
	// Latency is a quote's figure for one request's upstream time, used
	// until the model has answered requests this process saw; 0 is the
	// default (DefaultLatency).
	Latency time.Duration `yaml:"latency"`
	// BatchTurnaround is how long the provider's batches of a native model
	// usually take to end, as the operator observed it; 0 is unknown. A
	// quote's native duration, and a batch whose complete_by comes sooner
	// runs the model's rows directly from the start (docs/api.md
	// "Extensions").
	BatchTurnaround time.Duration `yaml:"batch_turnaround"`
}

// Tokenizer is a model's tokenizer: setting.
type Tokenizer string

const (
	TokensO200k  Tokenizer = "o200k_base"
	TokensCl100k Tokenizer = "cl100k_base"
	TokensBytes  Tokenizer = "bytes"
	TokensWords  Tokenizer = "words"
)

// DefaultLatency is a quote's latency of a model that sets none: a short
// chat completion's usual time upstream.
const DefaultLatency = 2 * time.Second

// Price is a model's price in USD per million input and output tokens.
type Price struct {
	InputPerMTok  float64 `yaml:"input_per_mtok"`
	OutputPerMTok float64 `yaml:"output_per_mtok"`
}

// USD is what input and output tokens cost at p.
func (p Price) USD(input, output int64) float64 {
	return (float64(input)*p.InputPerMTok + float64(output)*p.OutputPerMTok) / 1e6
}

// NativeDiscount is the providers' batch APIs' price as a share of the
// direct price (OpenAI's and Anthropic's batch discounts are 50 %).
const NativeDiscount = 0.5

// NativeUSD is what input and output tokens answered by a provider's
// batch API cost at p: its discount off the direct price.
func (p Price) NativeUSD(input, output int64) float64 {
	return NativeDiscount * p.USD(input, output)
}

// BatchMode is a model's batch: setting.
type BatchMode string

const (
	Direct BatchMode = "direct"
	Native BatchMode = "native"
)

// Native reports whether the model's batch rows go to its provider's
// batch API.
func (m Model) Native() bool { return m.Batch == Native }

// KeyEnvs are the names of the model's keys: api_key_envs, else
// api_key_env alone, else one unnamed key ("", no key).
func (m Model) KeyEnvs() []string {
	if len(m.APIKeyEnvs) > 0 {
		return m.APIKeyEnvs
	}
	return []string{m.APIKeyEnv}
}

// Upstream is the model name sent upstream.
func (m Model) Upstream() string {
	if m.UpstreamModel != "" {
		return m.UpstreamModel
	}
	return m.Name
}

// OperatorWebhook is an endpoint of the deployment's operator that
// receives every tenant's batch events, signed with its own secret
// (docs/api.md "Operator webhooks").
type OperatorWebhook struct {
	// Name identifies the endpoint in its delivery records and circuit.
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// SecretEnv names its whsec_ signing secret as a model's api_key_env
	// names its key: an environment variable locally, a secret (secret
	// prefix + name) in Secrets Manager on AWS.
	SecretEnv string `yaml:"secret_env"`
	// Events are the event types it receives; none is every type.
	Events []string `yaml:"events"`
}

// EventTypes are the batch events a webhook carries (docs/api.md
// "Webhooks").
var EventTypes = []string{"batch.queued", "batch.in_progress", "batch.completed", "batch.failed", "batch.expired", "batch.cancelled"}

// Wants reports whether the endpoint receives events of type eventType.
func (w OperatorWebhook) Wants(eventType string) bool {
	return len(w.Events) == 0 || slices.Contains(w.Events, eventType)
}

// Models is the parsed models file.
type Models struct {
	Models []Model `yaml:"models"`
	// ModerationModel, if set, is the model a /v1/moderations row without
	// body.model runs on, as OpenAI's moderations API defaults it
	// (docs/api.md "Batches"; internal/endpoint.DefaultModel reads it).
	ModerationModel string `yaml:"moderation_model"`
	// OperatorWebhooks are the deployment's webhook endpoints, each
	// receiving every tenant's batch events (docs/api.md "Operator
	// webhooks").
	OperatorWebhooks []OperatorWebhook `yaml:"operator_webhooks"`
	byName           map[string]Model
}

// Lookup returns the model clients call name.
func (ms *Models) Lookup(name string) (Model, bool) {
	m, ok := ms.byName[name]
	return m, ok
}

// Names lists the configured model names in file order.
func (ms *Models) Names() []string {
	out := make([]string, len(ms.Models))
	for i, m := range ms.Models {
		out[i] = m.Name
	}
	return out
}

const (
	defaultConcurrency = 32
	defaultTimeout     = 5 * time.Minute
	// DefaultCallTimeLimit is a model's call_time_limit when it sets none.
	DefaultCallTimeLimit = 30 * time.Minute
)

// ParseModels parses and validates a models file.
func ParseModels(data []byte) (*Models, error) {
	var ms Models
	if err := yaml.UnmarshalWithOptions(data, &ms, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("parse models: %w", err)
	}
	if len(ms.Models) == 0 {
		return nil, errors.New("models: at least one model is required")
	}
	ms.byName = make(map[string]Model, len(ms.Models))
	for i := range ms.Models {
		m := &ms.Models[i]
		field := func(f string) string { return fmt.Sprintf("models[%d].%s", i, f) }
		if m.Name == "" {
			return nil, fmt.Errorf("%s is required", field("name"))
		}
		if _, dup := ms.byName[m.Name]; dup {
			return nil, fmt.Errorf("%s: %q is defined twice", field("name"), m.Name)
		}
		switch m.Batch {
		case "":
			m.Batch = Direct
		case Direct, Native:
		default:
			return nil, fmt.Errorf("%s: %q is not direct or native", field("batch"), m.Batch)
		}
		if m.Batch == Native && m.Provider != OpenAI && m.Provider != Anthropic {
			return nil, fmt.Errorf("%s: native batches run on OpenAI's Batch API or Anthropic's Message Batches; provider %q has none yet, use batch: direct", field("batch"), m.Provider)
		}
		if err := m.checkUpstream(field); err != nil {
			return nil, err
		}
		switch m.Tokenizer {
		case "":
			m.Tokenizer = TokensBytes
			if m.Shape == OpenAI {
				m.Tokenizer = TokensO200k
			}
		case TokensO200k, TokensCl100k, TokensBytes, TokensWords:
		default:
			return nil, fmt.Errorf("%s: %q is not o200k_base, cl100k_base, bytes or words", field("tokenizer"), m.Tokenizer)
		}
		if m.Latency < 0 {
			return nil, fmt.Errorf("%s must be positive", field("latency"))
		}
		if m.BatchTurnaround < 0 {
			return nil, fmt.Errorf("%s must be positive", field("batch_turnaround"))
		}
		if m.MaxConcurrency == 0 {
			m.MaxConcurrency = defaultConcurrency
		}
		if m.MaxConcurrency < 0 {
			return nil, fmt.Errorf("%s must be positive", field("max_concurrency"))
		}
		if err := m.checkLimits(field); err != nil {
			return nil, err
		}
		if m.Timeout == 0 {
			m.Timeout = defaultTimeout
		}
		if m.Timeout < 0 {
			return nil, fmt.Errorf("%s must be positive", field("timeout"))
		}
		if m.CallTimeLimit == 0 {
			m.CallTimeLimit = DefaultCallTimeLimit
		}
		if m.CallTimeLimit < 0 {
			return nil, fmt.Errorf("%s must be positive", field("call_time_limit"))
		}
		if p := m.Price; p != nil && (p.InputPerMTok < 0 || p.OutputPerMTok < 0) {
			return nil, fmt.Errorf("%s must not be negative", field("price"))
		}
		ms.byName[m.Name] = *m
	}
	for i, m := range ms.Models {
		if m.Fallback == "" {
			continue
		}
		fb, ok := ms.byName[m.Fallback]
		if !ok {
			return nil, fmt.Errorf("models[%d].fallback: %q is not a configured model", i, m.Fallback)
		}
		if fb.Name == m.Name {
			return nil, fmt.Errorf("models[%d].fallback: a model cannot fall back to itself", i)
		}
	}
	if name := ms.ModerationModel; name != "" {
		// Only OpenAI serves /v1/moderations (internal/endpoint).
		m, ok := ms.byName[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("moderation_model: %q is not a configured model", name)
		case m.Provider != OpenAI:
			return nil, fmt.Errorf("moderation_model: %q has provider %s; only openai models serve /v1/moderations", name, m.Provider)
		}
	}
	return &ms, nil
}

// checkLimits refuses rate budgets and key pools that cannot work.
func (m *Model) checkLimits(field func(string) string) error {
	for i, v := range []int{m.RPM, m.TPM, m.ITPM, m.OTPM} {
		if v < 0 {
			return fmt.Errorf("%s must not be negative", field([]string{"rpm", "tpm", "itpm", "otpm"}[i]))
		}
	}
	if (m.ITPM > 0 || m.OTPM > 0) && m.Shape != Anthropic {
		return fmt.Errorf("%s: itpm and otpm are Anthropic's limits; an %s model takes tpm", field("itpm"), m.Shape)
	}
	if len(m.APIKeyEnvs) > 0 && m.APIKeyEnv != "" {
		return fmt.Errorf("%s: give api_key_env or api_key_envs, not both", field("api_key_envs"))
	}
	seen := map[string]bool{}
	for j, env := range m.APIKeyEnvs {
		if !envName.MatchString(env) || seen[env] {
			return fmt.Errorf("%s[%d]: %q is not a variable name, or is listed twice", field("api_key_envs"), j, env)
		}
		seen[env] = true
	}
	return nil
}

// checkOperatorWebhooks refuses an operator endpoint that cannot work.
func (ms *Models) checkOperatorWebhooks() error {
	seen := map[string]bool{}
	for i, w := range ms.OperatorWebhooks {
		field := func(f string) string { return fmt.Sprintf("operator_webhooks[%d].%s", i, f) }
		if !endpointName.MatchString(w.Name) {
			return fmt.Errorf("%s: %q is not a name of lower-case letters, digits and dashes (up to 32)", field("name"), w.Name)
		}
		if seen[w.Name] {
			return fmt.Errorf("%s: %q is defined twice", field("name"), w.Name)
		}
		seen[w.Name] = true
		if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: %q is not an http(s) URL", field("url"), w.URL)
		}
		if !envName.MatchString(w.SecretEnv) {
			return fmt.Errorf("%s: %q is not a variable name (like RELAY_OPS_WEBHOOK_SECRET): the whsec_ secret is read from that variable, or from Secrets Manager under the secret prefix", field("secret_env"), w.SecretEnv)
		}
		for j, ev := range w.Events {
			if !slices.Contains(EventTypes, ev) {
				return fmt.Errorf("%s[%d]: %q is not one of %s", field("events"), j, ev, strings.Join(EventTypes, ", "))
			}
		}
	}
	return nil
}

var (
	endpointName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// checkBaseURL refuses a base URL that cannot work. A base URL is written
// as the provider's own SDKs take it (README "Configuration"): OpenAI's
// ends in /v1 (https://api.openai.com/v1) and the endpoint's path after
// /v1 is added to it; Anthropic's has no /v1 (https://api.anthropic.com)
// and /v1/messages is added to it. A URL pasted in the other provider's
// form would send every row to a path that answers 404, so it is refused
// here, with the URL to write instead.
func checkBaseURL(p Provider, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q has a query or fragment: a base URL is a scheme, host and path only", raw)
	}
	path := strings.TrimSuffix(u.Path, "/")
	base := strings.TrimSuffix(raw, "/")
	switch p {
	case OpenAI:
		if suffix := "/chat/completions"; strings.HasSuffix(path, suffix) {
			return fmt.Errorf("%q names an endpoint: the OpenAI SDKs' base URL stops before it, write %q", raw, strings.TrimSuffix(base, suffix))
		}
		if path == "" {
			return fmt.Errorf("%q has no path: the OpenAI SDKs' base URL ends in /v1 (https://api.openai.com/v1), write %q", raw, base+"/v1")
		}
	case Anthropic:
		for _, suffix := range []string{"/v1/messages", "/v1"} {
			if strings.HasSuffix(path, suffix) {
				return fmt.Errorf("%q ends in %s: the Anthropic SDKs' base URL has no /v1 (https://api.anthropic.com) and relay adds /v1/messages, write %q", raw, suffix, strings.TrimSuffix(base, suffix))
			}
		}
	}
	return nil
}

// OnThisMachine names the models whose base_url is this machine
// (localhost or a loopback address), like the default file's mock
// provider: a deployed function cannot reach them.
func (ms *Models) OnThisMachine() []string {
	var out []string
	for _, m := range ms.Models {
		u, err := url.Parse(m.BaseURL)
		if err != nil {
			continue
		}
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			out = append(out, m.Name)
		}
	}
	return out
}

// LoadModels reads the models file at path.
func LoadModels(path string) (*Models, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read models file (RELAY_CONFIG): %w", err)
	}
	ms, err := ParseModels(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ms, nil
}

// ModelsPath is RELAY_CONFIG or relay.yaml.
func ModelsPath() string {
	if p := os.Getenv("RELAY_CONFIG"); p != "" {
		return p
	}
	return "relay.yaml"
}

// Defaults of the abuse limits (SECURITY.md).
const (
	DefaultRateLimit   = 50
	DefaultMaxInflight = 100
	// DefaultMaxTemplates keeps a tenant's schedules a small share of
	// EventBridge Scheduler's per-account quota.
	DefaultMaxTemplates = 100
	// DefaultMaxPendingWebhooks bounds the webhooks one tenant keeps in
	// the webhook queue (delivery.Service.MaxPending).
	DefaultMaxPendingWebhooks = 1000
)

// DefaultChunkRows is RELAY_CHUNK_ROWS's default: 24 upstream round trips
// (plan.RoundTrips) of the 32 slots a chunk's claim takes (more, and so
// fewer round trips, only on a model larger than an invocation's claims
// of 32 cover: plan.Limits.SlotsFor), so a chunk of a model of 32 slots or
// more makes as many round trips as one of a smaller model (docs/design.md
// "Chunk size").
const DefaultChunkRows = 768

// Env is what every function reads from its environment.
type Env struct {
	Prefix               string // resource name prefix (RELAY_PREFIX, default "relay")
	Table                string // RELAY_TABLE, default <prefix>
	Bucket               string // RELAY_BUCKET, default <prefix>-data
	ModelsPath           string // RELAY_CONFIG
	AllowPrivateWebhooks bool   // RELAY_ALLOW_PRIVATE_WEBHOOKS: webhooks may go to loopback, private, link-local addresses
	AllowHTTPWebhooks    bool   // RELAY_ALLOW_HTTP_WEBHOOKS: plain http webhook URLs are accepted
	ScheduleGroup        string // RELAY_SCHEDULE_GROUP, default <prefix>
	ChunkRows            int    // RELAY_CHUNK_ROWS, default DefaultChunkRows
	// Lease (RELAY_LEASE, a Go duration, default 1m) is how long a claimed
	// chunk stays its run's without a heartbeat: about how long recovery
	// from a crashed executor or a lost work message takes.
	Lease time.Duration
	// RateLimit (RELAY_RATE_LIMIT) is the requests per second one API key
	// may make, default 50; MaxInflight (RELAY_MAX_INFLIGHT_BATCHES) the
	// batches a tenant may have running at once, default 100. 0 turns
	// either off.
	RateLimit   int
	MaxInflight int
	// MaxTemplates (RELAY_MAX_TEMPLATES) is the scheduled templates a
	// tenant may have, default 100; 0 turns it off.
	MaxTemplates int
	// MaxPendingWebhooks (RELAY_MAX_PENDING_WEBHOOKS) is the webhooks of a
	// tenant not yet delivered or given up, default 1000; 0 turns it off.
	MaxPendingWebhooks int
	// S3PathStyle (RELAY_S3_PATH_STYLE) addresses buckets by path, which
	// emulators on a loopback endpoint need.
	S3PathStyle bool
	// AuditLockMode (RELAY_AUDIT_LOCK_MODE: GOVERNANCE or COMPLIANCE) puts
	// each audit trail object under S3 Object Lock in that mode for
	// AuditLockDays (RELAY_AUDIT_LOCK_DAYS) days; "" puts none. The stack
	// sets both when deployed with -c auditObjectLock=… (docs/runbook.md
	// "Audit trail").
	AuditLockMode string
	AuditLockDays int
	// SecretPrefix (RELAY_SECRET_PREFIX) prefixes the Secrets Manager names
	// of provider keys in AWS.
	SecretPrefix string
	// SchedulerRoleARN (RELAY_SCHEDULER_ROLE_ARN) is the role EventBridge
	// Scheduler assumes to invoke the scheduler function, whose ARN is
	// SchedulerFunctionARN (RELAY_SCHEDULER_FUNCTION_ARN): the target of
	// every template's schedule.
	SchedulerRoleARN     string
	SchedulerFunctionARN string
	// MaxResponseBytes (RELAY_MAX_RESPONSE_BYTES) caps an upstream
	// answer's body; 0 is the provider's default (internal/provider
	// DefaultMaxResponseBytes, 16 MiB).
	MaxResponseBytes int64
}

// FromEnv parses the environment.
func FromEnv() (Env, error) { return FromVars(os.Getenv) }

// FromVars parses the variables that getenv returns ("" for unset): the
// environment, or the one a deployed function was given (read back from
// Lambda by internal/local/deployed).
func FromVars(getenv func(string) string) (Env, error) {
	or := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	e := Env{
		Prefix:             or("RELAY_PREFIX", "relay"),
		ModelsPath:         or("RELAY_CONFIG", "relay.yaml"),
		ChunkRows:          DefaultChunkRows,
		RateLimit:          DefaultRateLimit,
		MaxInflight:        DefaultMaxInflight,
		MaxTemplates:       DefaultMaxTemplates,
		MaxPendingWebhooks: DefaultMaxPendingWebhooks,
	}
	if v := getenv("RELAY_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return e, fmt.Errorf("RELAY_LEASE: %q is not a duration of at least 1s (like 1m or 30s)", v)
		}
		e.Lease = d
	}
	e.Table = or("RELAY_TABLE", e.Prefix)
	e.SecretPrefix = or("RELAY_SECRET_PREFIX", e.Prefix+"/")
	e.Bucket = or("RELAY_BUCKET", e.Prefix+"-data")
	e.ScheduleGroup = or("RELAY_SCHEDULE_GROUP", e.Prefix)
	e.SchedulerRoleARN = getenv("RELAY_SCHEDULER_ROLE_ARN")
	e.SchedulerFunctionARN = getenv("RELAY_SCHEDULER_FUNCTION_ARN")
	if v := getenv("RELAY_CHUNK_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return e, fmt.Errorf("RELAY_CHUNK_ROWS: %q is not a number from 1 to 10000", v)
		}
		e.ChunkRows = n
	}
	for name, dst := range map[string]*int{
		"RELAY_RATE_LIMIT":           &e.RateLimit,
		"RELAY_MAX_INFLIGHT_BATCHES": &e.MaxInflight,
		"RELAY_MAX_TEMPLATES":        &e.MaxTemplates,
		"RELAY_MAX_PENDING_WEBHOOKS": &e.MaxPendingWebhooks,
	} {
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1_000_000 {
				return e, fmt.Errorf("%s: %q is not a number from 0 (off) to 1000000", name, v)
			}
			*dst = n
		}
	}
	if v := getenv("RELAY_MAX_RESPONSE_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1024 || n > 1<<30 {
			return e, fmt.Errorf("RELAY_MAX_RESPONSE_BYTES: %q is not a number of bytes from 1024 to 1073741824", v)
		}
		e.MaxResponseBytes = n
	}
	for name, dst := range map[string]*bool{
		"RELAY_ALLOW_PRIVATE_WEBHOOKS": &e.AllowPrivateWebhooks,
		"RELAY_ALLOW_HTTP_WEBHOOKS":    &e.AllowHTTPWebhooks,
		"RELAY_S3_PATH_STYLE":          &e.S3PathStyle,
	} {
		if v := getenv(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return e, fmt.Errorf("%s: %q is not a boolean", name, v)
			}
			*dst = b
		}
	}
	if v := getenv("RELAY_AUDIT_LOCK_MODE"); v != "" {
		days, err := strconv.Atoi(getenv("RELAY_AUDIT_LOCK_DAYS"))
		switch {
		case v != "GOVERNANCE" && v != "COMPLIANCE":
			return e, fmt.Errorf("RELAY_AUDIT_LOCK_MODE: %q is not GOVERNANCE or COMPLIANCE", v)
		case err != nil || days < 1 || days > 36500:
			return e, fmt.Errorf("RELAY_AUDIT_LOCK_DAYS: %q is not a number of days from 1 to 36500", getenv("RELAY_AUDIT_LOCK_DAYS"))
		}
		e.AuditLockMode, e.AuditLockDays = v, days
	}
	return e, nil
}
