// Package app wires the service: configuration, AWS clients and domain
// services, built once per process. Each function's main.go and the local
// runtime use it, so they run the same code on the same dependencies.
package app

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/relaybatch/relay/internal/api"
	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batches"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/engine"
	"github.com/relaybatch/relay/internal/files"
	"github.com/relaybatch/relay/internal/govern"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/metrics"
	"github.com/relaybatch/relay/internal/native"
	"github.com/relaybatch/relay/internal/ops"
	"github.com/relaybatch/relay/internal/panel"
	"github.com/relaybatch/relay/internal/plan"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/ratelimit"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/schedule"
	"github.com/relaybatch/relay/internal/store"
	"github.com/relaybatch/relay/internal/webhook"
	"github.com/relaybatch/relay/internal/webhook/delivery"
	"github.com/relaybatch/relay/internal/wfhost"
)

// App is one process's wiring.
type App struct {
	Env       config.Env
	Models    *config.Models
	Resources resources.Set
	AWS       aws.Config
	DB        *dynamodb.Client
	S3        *s3.Client
	SQS       *sqs.Client
	Scheduler *scheduler.Client
	Store     *store.Store
	Blobs     *blob.Store
	Files     *files.Service
	Queue     *queue.Sender
	Engine    *engine.Engine
	Native    *native.Service   // batch: native models' rows, on their provider's batch API (Engine.Native)
	Workflows *wfhost.Runner    // workflow records (Engine.Workflow)
	Govern    *govern.Checker   // budgets, revoked keys and allow-lists: the engine's Governor, GET /v1/usage's budget
	Batches   *batches.Service  // the batches of the API and cron templates: the engine's Lifecycle
	Webhooks  *delivery.Service // completion webhooks: queued by Batches.Terminal, sent by the webhook function
	Audit     *audit.Chain      // this process's audit trail: API calls, rows run (docs/runbook.md "Audit trail")
	Recent    *metrics.Recent   // the rows this process committed, by upstream answer (internal/ops)
	Ops       *ops.Service      // relay admin's figures, and the panel's Operations page
	// OperationsPage serves the panel's Operations page (GET
	// /v1/admin/operations): the local runtime's only, whose one user is
	// the operator. Deployed, a tenant's admin key would see how busy the
	// whole service is; the operator has the dashboard (docs/runbook.md).
	OperationsPage bool
	Log            *slog.Logger
	// UnknownKeyHint ends the API's message for an unknown key
	// (auth.Authenticator).
	UnknownKeyHint string

	secrets *provider.SecretsKeys // the key cache, on the one clock
	// now is the clock every service reads (SetClock).
	now func() time.Time
}

// Load reads the environment and the models file and builds the app with
// the SDK's default configuration (which honours AWS_ENDPOINT_URL).
func Load(ctx context.Context) (*App, error) {
	env, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	models, err := config.LoadModels(env.ModelsPath)
	if err != nil {
		return nil, err
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	return New(env, models, cfg, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
}

// New builds the app from parsed configuration. Its logger is log with
// LambdaLogHandler: lines logged with an invocation's ctx carry its request
// id. The services are built in the order they depend on each other
// (docs/design.md "Wiring"); the engine last, from every part it needs.
func New(env config.Env, models *config.Models, cfg aws.Config, log *slog.Logger) (*App, error) {
	log = slog.New(LambdaLogHandler(cmp.Or(log, slog.Default()).Handler()))
	a := &App{Env: env, Models: models, AWS: cfg, Log: log}
	a.Resources = resources.Define(env.Prefix)
	a.DB = dynamodb.NewFromConfig(cfg)
	a.S3 = s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = env.S3PathStyle
		// Emulators send no checksums; the SDK would log that on every GET.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	a.SQS = sqs.NewFromConfig(cfg)
	a.Scheduler = scheduler.NewFromConfig(cfg)
	a.Store = store.New(a.DB, env.Table)
	a.Blobs = blob.New(a.S3, env.Bucket)
	// One clock for every service (SetClock moves it in tests).
	now := time.Now
	a.now = now
	a.Files = &files.Service{Store: a.Store, Blobs: a.Blobs, Now: now}
	a.Audit = audit.NewChain(auditBucket{b: a.Blobs, lockMode: env.AuditLockMode, lockDays: env.AuditLockDays, now: time.Now}, now())
	a.Queue = &queue.Sender{SQS: a.SQS, Prefix: env.Prefix}
	a.Recent = &metrics.Recent{}
	a.Ops = &ops.Service{Store: a.Store, Models: models, Queue: a.Queue, Recent: a.Recent, Now: now}
	// Keys from the environment first (local runs), then Secrets Manager (AWS).
	a.secrets = &provider.SecretsKeys{Client: secretsmanager.NewFromConfig(cfg), Prefix: env.SecretPrefix, Now: now}
	keys := provider.ChainKeys{provider.EnvKeys{}, a.secrets}
	// Bedrock models are signed for with the function's own role.
	// Rate budgets, circuits and key pools (docs/design.md "Rate
	// budgets"): paced on the real clock, shared through the table.
	upstream := &provider.Client{HTTP: provider.NewHTTPClient(), Models: models, Keys: keys, Credentials: cfg.Credentials,
		MaxResponseBytes: env.MaxResponseBytes, Limits: &ratelimit.Registry{Shared: a.Store, Log: log, OnDrop: a.recordDrop, OnOpen: a.circuitOpened,
			Publish: a.publishLimiter(ids.New("ex"))}}
	a.Govern = &govern.Checker{Store: a.Store, Models: models, Now: now}
	// One client, so one policy, for the check at create, workflow
	// callbacks and every delivery.
	hooks := webhook.NewClient(egress.Policy{AllowPrivate: env.AllowPrivateWebhooks, AllowHTTP: env.AllowHTTPWebhooks})
	// An operator endpoint's URL the policy refuses would give up every
	// event: refused at start, as a batch's webhook_url is at create.
	for _, op := range models.OperatorWebhooks {
		if err := hooks.Policy.CheckURL(op.URL); err != nil {
			return nil, fmt.Errorf("operator_webhooks %s: url: %w", op.Name, err)
		}
	}
	a.Webhooks = &delivery.Service{Store: a.Store, Queue: a.Queue, Log: log, Now: now, Client: hooks, MaxPending: env.MaxPendingWebhooks,
		Operators: models.OperatorWebhooks, OperatorKeys: keys}
	a.Batches = &batches.Service{
		Models: models, Log: log, Now: now,
		Store: a.Store, Blobs: a.Blobs, Queue: a.Queue, Files: a.Files, Webhooks: hooks.Policy,
		MaxInflight: env.MaxInflight, MaxTemplates: env.MaxTemplates, Chunks: plan.Limits{Rows: env.ChunkRows},
		Reservations: a.Govern,
		Schedules: &schedule.Manager{
			API: a.Scheduler, Group: cmp.Or(env.ScheduleGroup, a.Resources.ScheduleGroup),
			TargetARN: env.SchedulerFunctionARN, RoleARN: env.SchedulerRoleARN,
		},
		Deliveries: a.Webhooks,
	}
	// Workflow records and native steps commit through the engine that
	// hands them their chunks: engine.New builds them on itself (the two
	// methods below), so each is built once, complete, with its engine.
	e, err := engine.New(engine.Deps{
		Store: a.Store, Blobs: a.Blobs, Queue: a.Queue, Provider: upstream, Models: models, Set: a.Resources, Log: log,
		Now: now, Govern: a.Govern, Lifecycle: a.Batches,
		Workflow: func(e *engine.Engine) engine.Workflow { return a.workflows(e, hooks) },
		Native:   func(e *engine.Engine) engine.Delegate { return a.native(e, upstream, keys) },
		Audit:    a.Audit, Recent: a.Recent,
		Chunks: plan.Limits{Rows: env.ChunkRows}, Lease: env.Lease,
	})
	if err != nil {
		return nil, fmt.Errorf("build the engine: %w", err)
	}
	a.Engine = e
	return a, nil
}

// auditBucket writes the audit trail's objects to the bucket, each under
// Object Lock in lockMode for lockDays when set (config.Env.AuditLockMode).
type auditBucket struct {
	b        *blob.Store
	lockMode string
	lockDays int
	now      func() time.Time
}

func (a auditBucket) Put(ctx context.Context, key string, body []byte) error {
	if a.lockMode != "" {
		return a.b.PutLocked(ctx, key, body, a.lockMode, a.now().Add(time.Duration(a.lockDays)*24*time.Hour))
	}
	return a.b.Put(ctx, key, bytes.NewReader(body), int64(len(body)))
}

// SetClock sets the clock of every service that reads one: tests move time
// with it, the engine's, the batches' and the files' together, the
// webhooks' and the key cache's.
func (a *App) SetClock(now func() time.Time) {
	a.Engine.Now, a.Batches.Now, a.Files.Now, a.Govern.Now, a.Native.Now, a.Workflows.Now = now, now, now, now, now, now
	a.Webhooks.Now, a.secrets.Now, a.now = now, now, now
}

// ForgetKeys drops the provider keys read from Secrets Manager, which the
// functions keep for 5 minutes: what a new execution environment starts
// without (tests use it to stand for those minutes).
func (a *App) ForgetKeys() { a.secrets.Forget() }

// workflows builds the workflow records' runner on e (engine.Deps.Workflow).
func (a *App) workflows(e *engine.Engine, hooks *webhook.Client) engine.Workflow {
	a.Workflows = &wfhost.Runner{Engine: e, Store: a.Store, Blobs: a.Blobs, Provider: e.Provider, Log: a.Log, Set: a.Resources,
		Now: e.Now, Client: hooks}
	return a.Workflows
}

// native builds the native models' service on e (engine.Deps.Native).
// recordDrop writes a key dropped from its pool to the table, for relay
// admin models; the log line and its alarm do not wait on it.
func (a *App) recordDrop(model, env string, status int) {
	a.Log.Info("model metrics", metrics.UpstreamLine(a.Resources.Prefix, model, metrics.KeysDropped, env, a.now())...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Store.DropKey(ctx, model, env, status, a.now()); err != nil {
		a.Log.Warn("record a dropped key", "model", model, "key_env", env, "error", err)
	}
}

// publishLimiter writes the pool states of this process's executor,
// named executor, to the table, for relay admin models and the panel
// (docs/design.md "Rate budgets"); the rows do not wait on it.
func (a *App) publishLimiter(executor string) func(model string, states []ratelimit.KeyState) {
	return func(model string, states []ratelimit.KeyState) {
		// Called in a row's answer (ratelimit.Ticket.Done): the write goes
		// beside it.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.Store.PublishLimiter(ctx, model, executor, a.now(), states); err != nil {
				a.Log.Warn("publish the limiter state", "model", model, "error", err)
			}
		}()
	}
}

// circuitOpened publishes a circuit of model's key env that opened
// (metrics.CircuitsOpened, the UpstreamCircuitOpen alarm).
func (a *App) circuitOpened(model, env string) {
	a.Log.Info("model metrics", metrics.UpstreamLine(a.Resources.Prefix, model, metrics.CircuitsOpened, env, a.now())...)
}

func (a *App) native(e *engine.Engine, upstream *provider.Client, keys provider.KeySource) engine.Delegate {
	a.Native = &native.Service{Store: a.Store, Blobs: a.Blobs, Queue: a.Queue, Engine: e, Provider: upstream,
		Models: a.Models, Keys: keys, HTTP: upstream.HTTP, MaxResponseBytes: upstream.MaxResponseBytes, Log: a.Log, Now: e.Now}
	return a.Native
}

// API is the HTTP handler of the api function.
func (a *App) API() http.Handler {
	// Keys expire by the app's clock, read at each request: SetClock may
	// move it after the handler is built.
	clock := func() time.Time { return a.now() }
	h := &api.API{Auth: auth.Authenticator{Store: a.Store, UnknownKeyHint: a.UnknownKeyHint, Now: clock}, Files: a.Files, Batches: a.Batches, Log: a.Log,
		Limiter: api.NewRateLimiter(a.Store, a.Env.RateLimit, a.Log), Budgets: a.Govern, Audit: a.Audit,
		Panel: panel.Handler(a.uploadOrigin())}
	if a.OperationsPage {
		h.Operations = a.Ops
	}
	return h.Handler()
}

// uploadOrigin is the origin of the bucket's presigned uploads, the only
// one the panel's page may send to; "" when it cannot be known, which
// leaves the panel unable to upload rather than open to every bucket.
func (a *App) uploadOrigin() string {
	o, err := a.Blobs.UploadOrigin(context.Background())
	if err != nil {
		a.Log.Warn("panel: the bucket's upload origin is unknown; the panel cannot upload", "err", err)
	}
	return o
}

// LambdaVars are the variables every function's environment in the
// template sets (infra/stack.go) and a function refuses to start without:
// outside Lambda their defaults name a local setup, inside it a default
// would silently point the function at the wrong table, bucket or
// schedule target (docs/design.md "Wiring").
var LambdaVars = []string{
	"RELAY_PREFIX", "RELAY_TABLE", "RELAY_BUCKET", "RELAY_CONFIG", "RELAY_SCHEDULE_GROUP",
	"RELAY_SECRET_PREFIX", "RELAY_SCHEDULER_ROLE_ARN", "RELAY_SCHEDULER_FUNCTION_ARN",
}

// Handler is a Lambda handler whose event and answer types the compiler
// checks (lambda.StartHandlerFunc), not the first invocation.
type Handler[E, R any] = func(context.Context, E) (R, error)

// Start loads the app and runs the handler that pick returns as the Lambda
// function name: each function's main (internal/app/fn) is this one call. A
// configuration error (a variable of LambdaVars unset, no region, an
// unreadable models file) ends the init with one JSON log line naming it
// and exit status 1, which Lambda reports as the init's failure, before
// any invocation.
func Start[E, R any](name string, pick func(*App) Handler[E, R]) {
	a, err := LoadLambda(context.Background())
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("init failed", "function", name, "err", err.Error())
		os.Exit(1)
	}
	// What logs to slog's default (the API Gateway adapter) logs as the
	// app does: JSON, with the invocation's request id.
	slog.SetDefault(a.Log)
	lambda.StartHandlerFunc(pick(a))
}

// LoadLambda is Load for a Lambda function: every variable of LambdaVars
// must be set and a region known.
func LoadLambda(ctx context.Context) (*App, error) {
	for _, k := range LambdaVars {
		if os.Getenv(k) == "" {
			return nil, fmt.Errorf("%s is not set: the function's environment (infra/stack.go) must give it", k)
		}
	}
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		return nil, errors.New("AWS_REGION is not set: Lambda sets it; set it to run a bootstrap elsewhere")
	}
	return Load(ctx)
}
