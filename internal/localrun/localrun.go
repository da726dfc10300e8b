// Package localrun is the local runtime (SPEC §12): the functions' real
// handlers in one process, against an AWS emulator. The API is served by
// turning each HTTP request into an API Gateway proxy event for the api
// function's handler, with the deployed size and time limits; queues are
// consumed with Lambda's event-source-mapping semantics.
package localrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/relaybatch/relay/internal/apigw"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/mockup"
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
	Log      *slog.Logger
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
	a := app.New(o.Env, o.Models, o.AWS, o.Log)
	if err := Bootstrap(ctx, o.AWS, a.Resources); err != nil {
		return nil, fmt.Errorf("bootstrap resources: %w", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt := &Runtime{App: a, cancel: cancel}

	if mockWanted(o.Models, o.MockAddr) {
		// The mock wants a key, like the real APIs; it checks none.
		for _, m := range o.Models.Models {
			if os.Getenv(m.APIKeyEnv) == "" {
				os.Setenv(m.APIKeyEnv, "sk-relay-local-mock")
			}
		}
		rt.Mock = mockup.New(mockup.Options{})
		if _, err := rt.serve(o.MockAddr, rt.Mock); err != nil {
			rt.Close()
			return nil, fmt.Errorf("mock provider: %w", err)
		}
	}
	front := &apigw.Local{Invoke: apigw.Handler(a.API())}
	addr, err := rt.serve(o.Addr, front)
	if err != nil {
		rt.Close()
		return nil, fmt.Errorf("api: %w", err)
	}
	rt.URL = "http://" + addr
	_ = ctx
	return rt, nil
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
	k, _, err := auth.Create(ctx, rt.App.Store, tenant, scopes)
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
