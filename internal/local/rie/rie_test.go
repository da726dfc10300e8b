package rie

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// A sandbox starts with Lambda's variables, the template's (its paths under
// /var/task moved to the task directory) and the local ones, and nothing
// of this process's: no HOME, as in Lambda.
func TestEnvironIsLambdasAndTheTemplates(t *testing.T) {
	t.Setenv("HOME", "/root")
	f := &Function{Name: "relay-api", Timeout: 30 * time.Second, Memory: 1024, TaskDir: "/tmp/task/api", Region: "us-east-1",
		Env:   map[string]string{"RELAY_CONFIG": "/var/task/relay.yaml", "RELAY_TABLE": "relay", "RELAY_ALLOW_PRIVATE_WEBHOOKS": "false"},
		Extra: map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "RELAY_ALLOW_PRIVATE_WEBHOOKS": "true"}}
	env := f.Environ()
	for _, want := range []string{
		"RELAY_CONFIG=/tmp/task/api/relay.yaml", "RELAY_TABLE=relay", "RELAY_ALLOW_PRIVATE_WEBHOOKS=true",
		"AWS_ENDPOINT_URL=http://127.0.0.1:4566", "AWS_LAMBDA_FUNCTION_NAME=relay-api", "AWS_LAMBDA_FUNCTION_TIMEOUT=30",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1024", "AWS_REGION=us-east-1", "LAMBDA_TASK_ROOT=/tmp/task/api",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("environment %v lacks %s", env, want)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "HOME=") {
			t.Errorf("environment has %s", kv)
		}
	}
}

// The emulator answers a handler's error with errorMessage and errorType,
// status 200; anything else is the handler's answer.
func TestFunctionErrorTold(t *testing.T) {
	var fe FunctionError
	if !isFunctionError([]byte(`{"errorMessage":"boom","errorType":"errorString"}`), &fe) || fe.Message != "boom" {
		t.Fatalf("error answer not told: %+v", fe)
	}
	for _, body := range []string{`{"batchItemFailures":[]}`, `null`, `{"statusCode":200,"errorMessage":"x","errorType":"y"}`, ``} {
		if isFunctionError([]byte(body), &FunctionError{}) {
			t.Errorf("%s read as an error", body)
		}
	}
}
