// Package emulator gives tests and the local runtime an AWS endpoint to talk
// to: the one in AWS_ENDPOINT_URL when set (LocalStack, a shared moto), or a
// moto_server of their own on a free loopback port. It owns nothing else; the
// resources on the endpoint are created by whoever uses it.
package emulator

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Region and AccountID are what the emulator reports; the account id is
// LocalStack's, so ARNs look the same on either emulator.
const (
	Region    = "us-east-1"
	AccountID = "000000000000"
)

// readyTimeout bounds how long Start waits for moto to answer; it is usually
// ready in half a second, but a cold Python import on a busy CI box is slower.
const readyTimeout = 30 * time.Second

// Start returns the endpoint to use and a function that releases it.
//
// When AWS_ENDPOINT_URL is set it is returned as is with a no-op stop, so the
// same tests run against LocalStack or a moto someone else started. Otherwise
// Start runs moto's server (through moto_server.py, which gives DynamoDB
// transactions the isolation they have in AWS) on a free 127.0.0.1 port and waits until it answers. ctx bounds
// only the start-up; the server lives until stop is called. Start does not set
// AWS_ENDPOINT_URL: callers that want the SDK's default resolution to find it
// set it themselves (os.Setenv in TestMain) or use Config.
func Start(ctx context.Context) (endpoint string, stop func(), err error) {
	return StartOn(ctx, 0)
}

// DefaultPort is where `make dev` runs the emulator, as LocalStack does.
const DefaultPort = 4566

// StartOn is Start on a given port (0: a free one). An emulator is reused
// only when AWS_ENDPOINT_URL names it: one that already answers on port
// (left by a run that was killed, or started by hand) is an error, not
// silently reused with whatever state it holds; so is an AWS_ENDPOINT_URL
// where nothing answers (left set from an earlier run).
func StartOn(ctx context.Context, port int) (endpoint string, stop func(), err error) {
	if ep := os.Getenv("AWS_ENDPOINT_URL"); ep != "" {
		if err := CheckEndpoint(ep); err != nil {
			return "", nil, fmt.Errorf("%w; or unset AWS_ENDPOINT_URL to have an emulator started here", err)
		}
		return ep, func() {}, nil
	}
	return startOwn(ctx, port)
}

// StartOwn is Start that runs a moto of its own even when AWS_ENDPOINT_URL
// names an emulator: for a test that needs one nobody else writes to, such
// as a CloudFormation deploy, which moto cannot roll back.
func StartOwn(ctx context.Context) (endpoint string, stop func(), err error) {
	return startOwn(ctx, 0)
}

func startOwn(ctx context.Context, port int) (endpoint string, stop func(), err error) {
	if port == 0 {
		if port, err = freePort(); err != nil {
			return "", nil, fmt.Errorf("emulator: find a free port: %w", err)
		}
	} else if ep := "http://127.0.0.1:" + strconv.Itoa(port); Answers(ep) {
		return "", nil, fmt.Errorf("emulator: something already answers on %s (an emulator left running, such as make deploy-emulator's? one that make dev "+
			"started runs relay-moto-….py): stop it, or use it as it is with export AWS_ENDPOINT_URL=%s (on a stack make deploy-emulator "+
			"deployed: relay dev --stack relay)", ep, ep)
	}
	script, err := motoScript()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(motoPython(), script, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "MOTO_ACCOUNT_ID="+AccountID)
	// moto logs every request; keep only the tail, for the start-up error.
	out := &tail{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so stop also reaches the python child when the
	// pyenv shim does not exec it directly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("emulator: start %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			// SIGKILL: after a SIGTERM moto spends minutes at full CPU
			// freeing its in-memory state, which nobody keeps.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			os.Remove(script)
		})
	}

	endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	if err := waitReady(ctx, endpoint, exited); err != nil {
		stop()
		return "", nil, fmt.Errorf("emulator: %s: %w; output: %s", cmd.Path, err, out)
	}
	return endpoint, stop, nil
}

// Config is the SDK configuration for the emulator at endpoint: fixed test
// credentials (the emulator accepts any) and region, and BaseEndpoint set so
// it does not depend on AWS_ENDPOINT_URL being in the environment. S3 clients
// built from it still need o.UsePathStyle = true.
func Config(ctx context.Context, endpoint string) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion(Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		config.WithBaseEndpoint(endpoint),
	)
	if err != nil {
		return aws.Config{}, fmt.Errorf("emulator: load SDK config: %w", err)
	}
	return cfg, nil
}

// freePort asks the kernel for a port; another process could take it before
// moto binds it, which is rare enough on a test machine to accept.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls until the server answers any HTTP request.
func waitReady(ctx context.Context, endpoint string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/moto-api/", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited before answering")
		case <-ctx.Done():
			return fmt.Errorf("not answering on %s: %w", endpoint, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// CheckEndpoint says, naming AWS_ENDPOINT_URL, when nothing answers at
// endpoint.
func CheckEndpoint(endpoint string) error {
	if Answers(endpoint) {
		return nil
	}
	return fmt.Errorf("nothing answers at AWS_ENDPOINT_URL=%s: start the emulator it names (make dev prints the URL of the one it runs)", endpoint)
}

// Answers says whether an HTTP server answers at endpoint.
func Answers(endpoint string) bool {
	resp, err := (&http.Client{Timeout: time.Second}).Get(endpoint + "/moto-api/")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// motoServerPy wraps moto_server so DynamoDB transactions are isolated
// from concurrent requests, as in AWS (see the file's doc string).
//
//go:embed moto_server.py
var motoServerPy []byte

// motoScript writes the wrapper to a temporary file and returns its path.
func motoScript() (string, error) {
	f, err := os.CreateTemp("", "relay-moto-*.py")
	if err != nil {
		return "", fmt.Errorf("emulator: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(motoServerPy); err != nil {
		return "", fmt.Errorf("emulator: %w", err)
	}
	return f.Name(), nil
}

// motoPython is the interpreter moto is installed for: the python3 beside
// moto_server (a pyenv shim or a virtualenv's bin), else python3 on PATH,
// which may be the system's, without moto.
func motoPython() string {
	if ms, err := exec.LookPath("moto_server"); err == nil {
		py := filepath.Join(filepath.Dir(ms), "python3")
		if _, err := os.Stat(py); err == nil {
			return py
		}
	}
	return "python3"
}
