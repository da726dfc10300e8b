package rie

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/relaybatch/relay/internal/local/deployed"
)

// Module is the emulator's Go module, at the version this repository was
// verified with; EnsureEmulator installs its aws-lambda-rie command.
const Module = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

// EnsureEmulator returns dir/aws-lambda-rie (an absolute path), building it from Module first
// (go install: the Go module proxy, no Docker) when it is not there.
func EnsureEmulator(ctx context.Context, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(abs, "aws-lambda-rie")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.CommandContext(ctx, "go", "install", Module)
	cmd.Env = append(os.Environ(), "GOBIN="+abs, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %w\n%s", Module, err, out)
	}
	return bin, nil
}

// Build builds each of functions (functions/<name>, from the module at
// root) into dir/<name>/bootstrap for this machine, with the tags of the
// CDK bundling (the Makefile's build/%/bootstrap) and GOARCH the host's:
// the deployed arm64 binaries cannot run here. Neither -trimpath nor
// CGO_ENABLED=0: the packages then compile as go test compiles them, so a
// make test builds the bootstraps from its own build cache instead of
// compiling every dependency a second time. go build skips what is up to
// date.
func Build(ctx context.Context, root, dir string, functions []string) error {
	out, err := filepath.Abs(filepath.Join(dir, ".bin"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	args := []string{"build", "-tags", "lambda.norpc", "-ldflags=-s -w", "-o", out + "/"}
	for _, f := range functions {
		args = append(args, "./functions/"+f)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build the functions: %w\n%s", err, b)
	}
	for _, f := range functions {
		if err := os.MkdirAll(filepath.Join(dir, f), 0o755); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(out, f), filepath.Join(dir, f, "bootstrap")); err != nil {
			return err
		}
	}
	return nil
}

// Stage lays out dir as the bundle of asset (a function's asset directory
// in cdk.out) with bootstrap in place of the bundle's: every other file of
// the bundle (the models file) copied, or models when it is not nil.
func Stage(dir, asset, bootstrap string, models []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(asset)
	if err != nil {
		return fmt.Errorf("the function's bundle: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "bootstrap" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(asset, e.Name()))
		if err != nil {
			return err
		}
		if models != nil && strings.HasSuffix(e.Name(), ".yaml") {
			b = models
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(bootstrap)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "bootstrap"), b, 0o755)
}

// Setup is what Prepare needs to run a deployed stack's functions here.
type Setup struct {
	Root     string          // the repository (go build runs there)
	CdkOut   string          // the cloud assembly the stack was deployed from
	BuildDir string          // where the bootstraps and the emulator are cached (build/)
	Stack    *deployed.Stack // the stack, read back from the emulator
	Prefix   string          // the functions' prefix (<prefix>-<name>)
	Names    []string        // the functions to run, by short name
	AWS      aws.Config      // the emulator's endpoint, region and credentials
	// Models, if not nil, replaces the bundles' models file (tests move
	// the mock provider's address).
	Models []byte
	// Extra are variables set after the template's (Function.Extra), beside
	// the emulator's endpoint, credentials and path-style addressing.
	Extra  map[string]string
	Output io.Writer
}

// Prepare builds the emulator and the bootstraps, stages each function's
// bundle under BuildDir/lambda-<arch>/task and returns the functions by
// short name, each with its deployed environment, timeout and memory.
func Prepare(ctx context.Context, s Setup) (map[string]*Function, error) {
	rie, err := EnsureEmulator(ctx, filepath.Join(s.BuildDir, "rie"))
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(s.BuildDir, "lambda-"+runtime.GOARCH)
	if err := Build(ctx, s.Root, bin, s.Names); err != nil {
		return nil, err
	}
	assets, err := deployed.Assets(s.CdkOut)
	if err != nil {
		return nil, err
	}
	creds, err := s.AWS.Credentials.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("the emulator's credentials: %w", err)
	}
	extra := map[string]string{
		"AWS_ENDPOINT_URL":      aws.ToString(s.AWS.BaseEndpoint),
		"AWS_ACCESS_KEY_ID":     creds.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY": creds.SecretAccessKey,
		"RELAY_S3_PATH_STYLE":   "true", // the emulator on a loopback address
	}
	if creds.SessionToken != "" {
		extra["AWS_SESSION_TOKEN"] = creds.SessionToken
	}
	for k, v := range s.Extra {
		extra[k] = v
	}
	fns := map[string]*Function{}
	for _, name := range s.Names {
		deployedName := s.Prefix + "-" + name
		d, ok := s.Stack.Functions[deployedName]
		if !ok {
			return nil, fmt.Errorf("function %s is not in stack %s", deployedName, s.Stack.Name)
		}
		asset, ok := assets[deployedName]
		if !ok {
			return nil, fmt.Errorf("function %s has no bundle in %s", deployedName, s.CdkOut)
		}
		task, err := filepath.Abs(filepath.Join(bin, "task", name))
		if err != nil {
			return nil, err
		}
		if err := Stage(task, asset, filepath.Join(bin, name, "bootstrap"), s.Models); err != nil {
			return nil, fmt.Errorf("stage %s: %w", name, err)
		}
		fns[name] = &Function{
			Name: deployedName, Env: d.Env, Timeout: d.Timeout, Memory: d.Memory, TaskDir: task,
			RIE: rie, Region: s.AWS.Region, Extra: extra, Output: s.Output,
		}
	}
	return fns, nil
}
