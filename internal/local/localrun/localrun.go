// Package localrun is the local runtime (README "The two commands"): the functions' real
// handlers in one process, against an AWS emulator. The API is served by
// turning each HTTP request into an API Gateway proxy event for the api
// function's handler, with the deployed size and time limits; queues are
// consumed with Lambda's event-source-mapping semantics.
package localrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/relaybatch/relay/internal/apigw"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/engine"
	"github.com/relaybatch/relay/internal/lambdasqs"
	"github.com/relaybatch/relay/internal/local/esm"
	"github.com/relaybatch/relay/internal/local/firer"
	"github.com/relaybatch/relay/internal/local/gateway"
	"github.com/relaybatch/relay/internal/local/rie"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
)

// Options configure a local runtime.
type Options struct {
	Env    config.Env
	Models *config.Models
	AWS    aws.Config // pointing at the emulator
	Addr   string     // API listen address; "127.0.0.1:0" picks a port
	// MockAddr is where the mock provider listens when a model points at it
	// (default 127.0.0.1:8090); "" with Mock set means pick a port.
	MockAddr string
	// MockOptions are the mock provider's knobs (latency, error rate:
	// relay dev --mock-latency, --mock-error-rate).
	MockOptions mockup.Options
	Log         *slog.Logger
	// Tune, if set, adjusts the resource definitions before they are
	// created (tests shorten visibility timeouts to see redeliveries soon).
	Tune func(*resources.Set)
	// TickEvery is how often the dispatcher's sweep runs (default one
	// minute, as the deployed schedule).
	TickEvery time.Duration
	// OnInvoke, if set, is called before each invocation of a function fed
	// by a queue; returning esm.ErrCrash drops the invocation as if the
	// Lambda died (fault tests).
	OnInvoke func(function string, ev events.SQSEvent) error
	// AfterInvoke, if set, is called after each invocation of a function
	// fed by a queue with how long it ran (the benchmark's GB-seconds).
	AfterInvoke func(function string, elapsed time.Duration)
	// ExecutorConcurrency is the work queue's concurrent invocations
	// (default: enough for every model's max_concurrency, see
	// executorConcurrency).
	ExecutorConcurrency int
	// StrictWebhooks applies the deployment's webhook policy (https only,
	// public addresses only) instead of the local runtime's, which lets
	// webhooks reach receivers on this machine over http.
	StrictWebhooks bool
	// SchedulerClock is the clock the schedule firer evaluates schedules
	// against (default time.Now), and SchedulerRefresh how often it re-reads
	// them (default firer.DefaultRefresh): tests move the clock to fire a
	// cron template's minutes at once.
	SchedulerClock   func() time.Time
	SchedulerRefresh time.Duration
	// Wire, if set, adjusts the wired app before anything runs (tests
	// shorten the webhook retry schedule).
	Wire func(*app.App)
	// DuplicateInvoke, if set and true for a batch of a queue-fed function,
	// also hands the batch to a second invocation at the same time
	// (esm.Poller.Duplicate): chaos runs deliver work twice at once.
	DuplicateInvoke func(function string, ev events.SQSEvent) bool
	// InvocationClock, if set, gives each invocation of a function the
	// engine runs (dispatcher, executor, deadletter, finalizer) the clock
	// it returns as the engine's Now: chaos runs skew each invocation's
	// clock by a few seconds, as the clocks of Lambda hosts differ.
	InvocationClock func(function string) func() time.Time
	// Existing runs on resources that exist already, such as a stack that
	// make deploy-emulator deployed (Env and Tune from
	// internal/local/deployed), instead of creating them: Start only checks
	// that they are there.
	Existing bool
	// Lambda, if set, runs every function as its real bootstrap under the
	// Lambda Runtime Interface Emulator (internal/local/rie, README "Lambda
	// mode"), by short name: the event-source mapping, the API front and
	// the schedule firer invoke them with their triggers' event JSON
	// instead of calling the handlers in this process. Their environment
	// is their own (rie.Prepare), not Env; OnInvoke, AfterInvoke,
	// DuplicateInvoke and InvocationClock do not reach them.
	Lambda map[string]*rie.Function
}

// Runtime is a running local service.
type Runtime struct {
	URL  string // the API's base URL
	App  *app.App
	Mock *mockup.Server // nil when no model points at the mock

	cancel context.CancelFunc
	wg     sync.WaitGroup
	srvs   []*http.Server
}

// Start bootstraps the resources and starts serving.
func Start(ctx context.Context, o Options) (*Runtime, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.MockAddr == "" {
		o.MockAddr = "127.0.0.1:8090"
	}
	if !o.StrictWebhooks {
		o.Env.AllowPrivateWebhooks, o.Env.AllowHTTPWebhooks = true, true
	}
	a, err := app.New(o.Env, o.Models, o.AWS, o.Log)
	if err != nil {
		return nil, err
	}
	a.OperationsPage = true
	if o.Tune != nil {
		o.Tune(&a.Resources)
		a.Engine.Set, a.Workflows.Set = a.Resources, a.Resources
	}
	// Schedules live in the group bootstrapped below and are fired by this
	// process, so their target only has to be well-formed.
	sch := a.Batches.Schedules
	sch.Group = a.Resources.ScheduleGroup
	sch.TargetARN = cmp.Or(sch.TargetARN, fmt.Sprintf("arn:aws:lambda:%s:000000000000:function:%s-scheduler", cmp.Or(o.AWS.Region, "us-east-1"), a.Resources.Prefix))
	sch.RoleARN = cmp.Or(sch.RoleARN, fmt.Sprintf("arn:aws:iam::000000000000:role/%s-scheduler", a.Resources.Prefix))
	if o.Wire != nil {
		o.Wire(a)
	}
	if o.Existing {
		if err := Check(ctx, o.AWS, o.Env, a.Resources); err != nil {
			return nil, fmt.Errorf("existing resources: %w", err)
		}
	} else if err := Bootstrap(ctx, o.AWS, a.Resources); err != nil {
		return nil, fmt.Errorf("bootstrap resources: %w", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt := &Runtime{App: a, cancel: cancel}

	if mockWanted(o.Models, o.MockAddr) {
		// The mock wants a key, like the real APIs; it checks none.
		// Each key of a pool has its own value, so the mock's limits per
		// key (mockup.Options.RPM) see them apart.
		for _, m := range o.Models.Models {
			for _, env := range m.KeyEnvs() {
				if env != "" && os.Getenv(env) == "" {
					os.Setenv(env, "sk-relay-local-mock-"+env)
				}
			}
		}
		rt.Mock = mockup.New(o.MockOptions)
		if _, err := rt.serve(o.MockAddr, rt.Mock); err != nil {
			rt.Close()
			return nil, fmt.Errorf("mock provider: %w", err)
		}
	}
	for _, f := range a.Resources.Functions {
		if o.Lambda != nil && o.Lambda[f.Name] == nil {
			return nil, fmt.Errorf("lambda mode: no bootstrap for function %s", f.Name)
		}
	}
	front := &gateway.Front{Invoke: apigw.Handler(a.API())}
	if f := o.Lambda["api"]; f != nil {
		front.Invoke = f.API
	}
	addr, err := rt.serve(o.Addr, front)
	if err != nil {
		rt.Close()
		return nil, fmt.Errorf("api: %w", err)
	}
	rt.URL = "http://" + addr
	if err := rt.startPollers(ctx, o); err != nil {
		rt.Close()
		return nil, err
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		rt.tick(ctx, o.TickEvery)
	}()
	rt.startFirer(ctx, o)
	return rt, nil
}

// startFirer fires the emulator's schedules, which it stores but never
// fires, by calling the scheduler function's handler as Scheduler would:
// one invocation (its own request id) per attempt.
func (rt *Runtime) startFirer(ctx context.Context, o Options) {
	s := rt.App.Batches
	now := time.Now
	if o.SchedulerClock != nil {
		now = o.SchedulerClock
	}
	f := &firer.Firer{
		API: rt.App.Scheduler, Group: s.Schedules.Group, Refresh: o.SchedulerRefresh, Now: now, Logger: o.Log,
		// From the start of the runtime, not of the goroutine: a time that
		// comes due once Start has returned fires.
		Since: now(),
		Fire: func(ctx context.Context, _ string, input []byte, _ time.Time) error {
			if f := o.Lambda["scheduler"]; f != nil {
				return f.Fire(ctx, input)
			}
			ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: esm.NewRequestID(), InvokedFunctionArn: s.Schedules.TargetARN})
			return s.Fire(ctx, input)
		},
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := f.Run(ctx); err != nil && ctx.Err() == nil {
			o.Log.Error("schedule firer stopped", "err", err)
		}
	}()
}

// startPollers consumes every queue that feeds a function, with the
// function's batch size, timeout and concurrency.
func (rt *Runtime) startPollers(ctx context.Context, o Options) error {
	e := rt.App.Engine
	handlers := map[string]msg.Handler{
		"dispatcher": e.Dispatch,
		"executor":   e.Execute,
		"deadletter": e.DeadLetter,
		"finalizer":  e.Finalize,
		"webhook":    rt.App.Webhooks.Deliver,
	}
	if o.InvocationClock != nil {
		for name := range handlers {
			if name != "webhook" {
				handlers[name] = skewed(e, name, o.InvocationClock)
			}
		}
	}
	for _, f := range rt.App.Resources.Functions {
		h, ok := handlers[f.Name]
		if !ok || f.Queue == "" {
			continue
		}
		url, err := rt.App.Queue.URL(ctx, strings.TrimPrefix(f.Queue, rt.App.Env.Prefix+"-"))
		if err != nil {
			return err
		}
		conc := 2
		if f.Name == "executor" {
			conc = cmp.Or(o.ExecutorConcurrency, executorConcurrency(rt.App.Engine))
		}
		p := &esm.Poller{
			Client: rt.App.SQS, QueueURL: url, FunctionName: f.Name, BatchSize: f.BatchSize,
			Concurrency: conc, FunctionTimeout: f.Timeout, Handler: lambdasqs.Handler(h), Logger: o.Log,
		}
		if lf := o.Lambda[f.Name]; lf != nil {
			p.Handler = lf.SQS
		}
		name := f.Name
		if o.OnInvoke != nil {
			p.OnInvoke = func(ev events.SQSEvent) error { return o.OnInvoke(name, ev) }
		}
		if o.AfterInvoke != nil {
			p.AfterInvoke = func(d time.Duration) { o.AfterInvoke(name, d) }
		}
		if o.DuplicateInvoke != nil {
			p.Duplicate = func(ev events.SQSEvent) bool { return o.DuplicateInvoke(name, ev) }
		}
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			if err := p.Run(ctx); err != nil {
				o.Log.Error("poller stopped", "function", f.Name, "err", err)
			}
		}()
	}
	return nil
}

// skewed is the engine handler of function run on a copy of e whose Now
// is clock(function), drawn anew for each invocation.
func skewed(e *engine.Engine, function string, clock func(string) func() time.Time) msg.Handler {
	return func(ctx context.Context, ds []msg.Delivery) ([]string, error) {
		inv := *e
		inv.Now = clock(function)
		switch function {
		case "dispatcher":
			return inv.Dispatch(ctx, ds)
		case "executor":
			return inv.Execute(ctx, ds)
		case "deadletter":
			return inv.DeadLetter(ctx, ds)
		default:
			return inv.Finalize(ctx, ds)
		}
	}
}

// tick sends the dispatcher's periodic sweep, as the deployed 1-minute
// schedule does.
func (rt *Runtime) tick(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := rt.App.Queue.Send(ctx, resources.Dispatch, msg.Message{Type: msg.Tick}, 0); err != nil && ctx.Err() == nil {
				rt.App.Log.Warn("send tick", "err", err)
			}
		}
	}
}

// mockWanted reports whether any model's base URL is the mock's address.
func mockWanted(ms *config.Models, addr string) bool {
	for _, m := range ms.Models {
		if u, err := url.Parse(m.BaseURL); err == nil && u.Host == addr {
			return true
		}
	}
	return false
}

func (rt *Runtime) serve(addr string, h http.Handler) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	rt.srvs = append(rt.srvs, srv)
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("serve", "addr", addr, "err", err)
		}
	}()
	return l.Addr().String(), nil
}

// Key creates a key for tenant with the default scopes.
func (rt *Runtime) Key(ctx context.Context, tenant string, scopes ...string) (string, error) {
	k, _, err := auth.Create(ctx, rt.App.Store, auth.NewKey{Tenant: tenant, Scopes: scopes})
	return k, err
}

// Close stops serving and waits for the workers.
func (rt *Runtime) Close() {
	rt.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range rt.srvs {
		_ = s.Shutdown(ctx)
	}
	rt.wg.Wait()
}

// executorConcurrency is how many executor invocations the local runtime
// runs at once: enough for every model's max_concurrency to be in flight
// (each invocation holds at least one chunk of the engine's slots), so the
// models bound upstream concurrency, not the function.
func executorConcurrency(e *engine.Engine) int {
	n := 0
	for _, m := range e.Models.Models {
		slots := min(e.Chunks.OrDefaults().SlotsFor(m.MaxConcurrency, resources.WorkBatch), m.MaxConcurrency)
		n += (m.MaxConcurrency + slots - 1) / slots
	}
	return max(n, 4)
}
