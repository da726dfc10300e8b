// Package inittest starts a function's main as Lambda would, in a child
// process (the test binary running that main), to see what its init does
// with a given environment: internal/app/fn tests with it that a variable
// the template must give (app.LambdaVars) missing fails each function's
// init at once, with one line naming the function and the variable.
package inittest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/app"
)

// childVar, set in a child's environment to a function's name, makes
// Main run that function's main instead of the tests.
const childVar = "RELAY_INITTEST_RUN_MAIN"

// Main is the TestMain of the package testing the functions' mains, by
// function name: in a child started by Init it runs the main it names,
// otherwise the tests.
func Main(m *testing.M, mains map[string]func()) {
	if name := os.Getenv(childVar); name != "" {
		main, ok := mains[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "inittest: no main for function %q\n", name)
			os.Exit(2)
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Env is an environment like the one a deployed function starts with: every
// variable of app.LambdaVars, a region and credentials, a readable models
// file (written under t.TempDir), no AWS endpoint reachable and no Lambda
// runtime API.
func Env(t testing.TB) map[string]string {
	t.Helper()
	models := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(models, []byte("models:\n- {name: m, provider: openai, base_url: https://api.openai.com/v1, api_key_env: OPENAI_API_KEY}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"RELAY_PREFIX": "relay", "RELAY_TABLE": "relay", "RELAY_BUCKET": "relay-data-123456789012-us-east-1",
		"RELAY_CONFIG": models, "RELAY_SCHEDULE_GROUP": "relay", "RELAY_SECRET_PREFIX": "relay/",
		"RELAY_SCHEDULER_ROLE_ARN":     "arn:aws:iam::123456789012:role/relay-scheduler",
		"RELAY_SCHEDULER_FUNCTION_ARN": "arn:aws:lambda:us-east-1:123456789012:function:relay-scheduler",
		"AWS_REGION":                   "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "PATH": os.Getenv("PATH"),
	}
	for _, k := range app.LambdaVars {
		if env[k] == "" {
			t.Fatalf("inittest.Env has no value for %s (app.LambdaVars)", k)
		}
	}
	return env
}

// Init runs the main of the function named in a child with exactly env,
// and returns what it wrote to stderr and its exit error (nil for status 0).
func Init(t *testing.T, name string, env map[string]string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{childVar + "=" + name}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

// FailsWithout checks that the init of the function named fails, with one
// line naming the function and what is wrong, without a variable of
// app.LambdaVars; and that with all of them it gets past its configuration
// (to lambda.Start, which then finds no runtime API outside Lambda). What
// each variable, the region and the models file do to LoadLambda, which
// every function's init calls, internal/app tests in its own process. Its
// subtests run in parallel.
func FailsWithout(t *testing.T, function string) {
	t.Helper()
	t.Run("complete", func(t *testing.T) {
		t.Parallel()
		stderr, err := Init(t, function, Env(t))
		if strings.Contains(stderr, "init failed") || !strings.Contains(stderr, "AWS_LAMBDA_RUNTIME_API") {
			t.Fatalf("%s's init with the whole environment: %v\n%s", function, err, stderr)
		}
	})
	missing := app.LambdaVars[0]
	t.Run("without "+missing, func(t *testing.T) {
		t.Parallel()
		env := Env(t)
		delete(env, missing)
		stderr, err := Init(t, function, env)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if err == nil || len(lines) != 1 || !strings.Contains(lines[0], `"msg":"init failed"`) ||
			!strings.Contains(lines[0], `"function":"`+function+`"`) || !strings.Contains(lines[0], missing) {
			t.Fatalf("%s's init without %s: %v, stderr %q; want exit status 1 and one line naming the function and %s", function, missing, err, stderr, missing)
		}
	})
}
