// Package rie runs the functions' real bootstrap binaries under the Lambda
// Runtime Interface Emulator (README "Lambda mode"): each function is its
// own bootstrap, built for this machine with the CDK bundling's tags and
// flags, started by aws-lambda-rie with the environment the deployed
// template gives it, and invoked over the emulator's invoke API with the
// event JSON its trigger sends. The local runtime (internal/local/localrun)
// feeds it: its event-source mapping calls SQS, its API front API, its
// schedule firer Fire.
//
// The emulator runs one invocation at a time (it crashes on overlapping
// ones), as one Lambda execution environment does, so a Function is a pool
// of them: an invocation takes an idle one or starts a new one (a cold
// start), and one that timed out, crashed or failed its init is killed, as
// Lambda discards it.
package rie

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/relaybatch/relay/internal/apigw"
)

// taskRoot is where Lambda unpacks a bundle; values of the template's
// environment under it point into the function's TaskDir here.
const taskRoot = "/var/task/"

// invokePath is the emulator's invoke API, Lambda's Invoke.
const invokePath = "/2015-03-31/functions/function/invocations"

// Function is one deployed function run under the emulator.
type Function struct {
	Name    string            // the deployed name (<prefix>-<name>): AWS_LAMBDA_FUNCTION_NAME
	Env     map[string]string // the template's environment of the function
	Timeout time.Duration
	Memory  int    // MB
	TaskDir string // the bundle: bootstrap and the models file
	RIE     string // the aws-lambda-rie binary
	Region  string
	// Extra are variables of the local setup, set after Env's: the
	// emulator's endpoint and credentials stand in for AWS's (the only
	// ones Lambda would give), and what the local runtime changes (Start).
	Extra map[string]string
	// Output receives the emulator's and the function's output (stdout and
	// stderr, as Lambda sends both to the function's log group).
	Output io.Writer

	mu     sync.Mutex
	idle   []*sandbox
	all    map[*sandbox]bool
	closed bool
	stats  Stats
}

// Stats count a Function's invocations.
type Stats struct {
	Cold, Warm int           // invocations that started a sandbox, and those that found one idle
	ColdTotal  time.Duration // the cold invocations' round trips, start of the process included
	StartTotal time.Duration // of which starting the emulator's process until it listens
	WarmTotal  time.Duration // the warm invocations' round trips
}

// Stats returns the invocation counts so far.
func (f *Function) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// sandbox is one execution environment: an emulator process running the
// bootstrap, serving one invocation at a time.
type sandbox struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
}

// FunctionError is the error a handler returned: the emulator answers it
// as Lambda's Invoke does, an errorMessage and errorType.
type FunctionError struct {
	Message string `json:"errorMessage"`
	Type    string `json:"errorType"`
}

func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

// Invoke runs one invocation with the event payload and returns the
// function's answer. requestID is the invocation's id (a new one if "").
// When ctx ends first, the sandbox is killed: Lambda would have stopped
// it at the timeout.
func (f *Function) Invoke(ctx context.Context, requestID string, payload []byte) ([]byte, error) {
	began := time.Now()
	sb, cold, err := f.take(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sb.url+invokePath, bytes.NewReader(payload))
	if err != nil {
		f.discard(sb)
		return nil, err
	}
	if requestID != "" {
		req.Header.Set("X-Amzn-RequestId", requestID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.discard(sb)
		return nil, fmt.Errorf("invoke %s: %w", f.Name, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		// An init that failed, a crash or a timeout: this sandbox is done.
		f.discard(sb)
		if err == nil {
			err = fmt.Errorf("%s: %.500s", resp.Status, body)
		}
		return nil, fmt.Errorf("invoke %s: %w", f.Name, err)
	}
	f.release(sb, cold, time.Since(began))
	var fe FunctionError
	if isFunctionError(body, &fe) {
		return nil, &fe
	}
	return body, nil
}

// isFunctionError reports whether body is the emulator's answer for a
// handler's error: an object of exactly errorMessage and errorType (no
// handler of this service answers that).
func isFunctionError(body []byte, fe *FunctionError) bool {
	var m map[string]json.RawMessage
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &m) != nil || len(m) != 2 || m["errorMessage"] == nil || m["errorType"] == nil {
		return false
	}
	return json.Unmarshal(body, fe) == nil
}

// take returns an idle sandbox, or starts one (cold).
func (f *Function) take(ctx context.Context) (*sandbox, bool, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, false, fmt.Errorf("function %s is closed", f.Name)
	}
	if n := len(f.idle); n > 0 {
		sb := f.idle[n-1]
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		select {
		case <-sb.exited:
			f.discard(sb)
			return f.take(ctx)
		default:
			return sb, false, nil
		}
	}
	f.mu.Unlock()
	var err error
	for range 3 { // a port taken between choosing it and binding it
		began := time.Now()
		var sb *sandbox
		if sb, err = f.start(ctx); err == nil {
			f.mu.Lock()
			f.stats.StartTotal += time.Since(began)
			f.mu.Unlock()
			return sb, true, nil
		}
	}
	return nil, false, err
}

func (f *Function) release(sb *sandbox, cold bool, took time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cold {
		f.stats.Cold++
		f.stats.ColdTotal += took
	} else {
		f.stats.Warm++
		f.stats.WarmTotal += took
	}
	if f.closed {
		go kill(sb)
		return
	}
	f.idle = append(f.idle, sb)
}

func (f *Function) discard(sb *sandbox) {
	f.mu.Lock()
	delete(f.all, sb)
	f.mu.Unlock()
	kill(sb)
}

// start runs a new emulator process and waits until it listens; the
// bootstrap's init runs at the first invocation, as the emulator does it.
func (f *Function) start(ctx context.Context) (*sandbox, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	addr, runtimeAPI := "127.0.0.1:"+ports[0], "127.0.0.1:"+ports[1]
	cmd := exec.Command(f.RIE, "--runtime-interface-emulator-address", addr, "--runtime-api-address", runtimeAPI, "--log-level", "warn", "./bootstrap")
	cmd.Dir = f.TaskDir
	cmd.Env = f.Environ()
	cmd.Stdout, cmd.Stderr = f.Output, f.Output
	// Its own process group: killing the sandbox kills the bootstrap too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the emulator for %s: %w", f.Name, err)
	}
	sb := &sandbox{cmd: cmd, url: "http://" + addr, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(sb.exited)
	}()
	f.mu.Lock()
	if f.all == nil {
		f.all = map[*sandbox]bool{}
	}
	f.all[sb] = true
	f.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return sb, nil
		}
		select {
		case <-sb.exited:
			f.discard(sb)
			return nil, fmt.Errorf("the emulator for %s exited at start", f.Name)
		case <-ctx.Done():
			f.discard(sb)
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			f.discard(sb)
			return nil, fmt.Errorf("the emulator for %s does not listen on %s", f.Name, addr)
		}
	}
}

// Environ is the environment a sandbox starts with: Lambda's own
// variables for the function, the template's (paths under /var/task moved
// to TaskDir), then Extra. Nothing of this process's environment: no HOME,
// as in Lambda.
func (f *Function) Environ() []string {
	vars := map[string]string{
		"AWS_LAMBDA_FUNCTION_NAME":        f.Name,
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(f.Memory),
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(int(f.Timeout.Seconds())),
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + f.Name,
		"AWS_LAMBDA_LOG_FORMAT":           "JSON",
		"AWS_REGION":                      f.Region,
		"AWS_DEFAULT_REGION":              f.Region,
		"LAMBDA_TASK_ROOT":                f.TaskDir,
		"TZ":                              ":UTC",
		"LANG":                            "en_US.UTF-8",
		"PATH":                            "/usr/local/bin:/usr/bin/:/bin",
	}
	if f.Memory == 0 {
		delete(vars, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
	}
	for k, v := range f.Env {
		if rest, ok := strings.CutPrefix(v, taskRoot); ok {
			v = filepath.Join(f.TaskDir, rest)
		}
		vars[k] = v
	}
	for k, v := range f.Extra {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Close kills every sandbox.
func (f *Function) Close() {
	f.mu.Lock()
	f.closed = true
	all := f.all
	f.all, f.idle = nil, nil
	f.mu.Unlock()
	for sb := range all {
		kill(sb)
	}
}

func kill(sb *sandbox) {
	if sb.cmd.Process != nil {
		_ = syscall.Kill(-sb.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-sb.exited
}

func freePorts(n int) ([]string, error) {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

// requestID is the Lambda request id the caller put in ctx, if any (the
// event-source mapping does).
func requestID(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc != nil {
		return lc.AwsRequestID
	}
	return ""
}

// SQS invokes the function with the SQS event Lambda's event-source mapping
// sends and reads its partial batch response: an esm.Handler.
func (f *Function) SQS(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	payload, err := json.Marshal(ev)
	if err != nil {
		return events.SQSEventResponse{}, err
	}
	out, err := f.Invoke(ctx, requestID(ctx), payload)
	if err != nil {
		return events.SQSEventResponse{}, err
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return events.SQSEventResponse{}, fmt.Errorf("%s answered %.200q, not an SQS batch response: %w", f.Name, out, err)
	}
	return resp, nil
}

// API invokes the function with the REST API proxy event, for the local API
// front (gateway.Front.Invoke). A streamed route's answer is the response
// stream as the runtime wrote it (the HTTP-integration prelude, eight NUL
// bytes, the body), which the front reads as API Gateway does; the
// emulator hands it over whole, not as it is written. Any other route's is
// the buffered proxy response JSON.
func (f *Function) API(ctx context.Context, ev events.APIGatewayProxyRequest) (any, error) {
	payload, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	if f.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.Timeout)
		defer cancel()
	}
	out, err := f.Invoke(ctx, "", payload)
	if err != nil {
		return nil, err
	}
	if apigw.Streamed(ev.Resource) {
		return bytes.NewReader(out), nil
	}
	return json.RawMessage(out), nil
}

// Fire invokes the function with the payload EventBridge Scheduler sends: the
// schedule target's input, its context attributes filled in.
func (f *Function) Fire(ctx context.Context, input []byte) error {
	if f.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.Timeout)
		defer cancel()
	}
	_, err := f.Invoke(ctx, "", input)
	return err
}
