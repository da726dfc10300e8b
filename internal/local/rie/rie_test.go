package rie

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
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

// fakeSandbox is an idle sandbox whose emulator is srv: the invocations
// of f go there.
func fakeSandbox(f *Function, srv *httptest.Server) {
	f.idle = append(f.idle, &sandbox{cmd: &exec.Cmd{}, url: srv.URL, exited: make(chan struct{})})
}

// The ESM's event reaches the emulator as Lambda's SQS event JSON (the
// record's attributes, ApproximateReceiveCount among them), with the
// invocation's request id, and the function's batchItemFailures come back
// for the poller to honour; a handler's error is an error.
func TestSQSEventAndPartialBatchResponse(t *testing.T) {
	var got map[string]any
	var id string
	answer := `{"batchItemFailures":[{"itemIdentifier":"m2"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &got)
		id = r.Header.Get("X-Amzn-RequestId")
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	f := &Function{Name: "relay-executor"}
	fakeSandbox(f, srv)
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: "{}", Attributes: map[string]string{"ApproximateReceiveCount": "3"}, EventSource: "aws:sqs"},
		{MessageId: "m2", Body: "{}", Attributes: map[string]string{"ApproximateReceiveCount": "1"}, EventSource: "aws:sqs"},
	}}
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	resp, err := f.SQS(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m2" {
		t.Fatalf("response %+v, %v; want m2 failed", resp, err)
	}
	recs, _ := got["Records"].([]any)
	if id != "req-1" || len(recs) != 2 || recs[0].(map[string]any)["attributes"].(map[string]any)["ApproximateReceiveCount"] != "3" ||
		recs[0].(map[string]any)["eventSource"] != "aws:sqs" {
		t.Fatalf("the emulator got request id %q and %v", id, got)
	}
	answer = `{"errorMessage":"boom","errorType":"errorString"}`
	if _, err := f.SQS(ctx, ev); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("a handler's error: %v", err)
	}
}

// The api's answer is the buffered proxy response JSON, or, on a streamed
// route, the response stream (prelude, eight NUL bytes, body) for the
// front to read as API Gateway does.
func TestAPIAnswerBufferedOrStreamed(t *testing.T) {
	stream := "{\"statusCode\":200,\"headers\":{\"Content-Type\":\"application/jsonl\"}}\x00\x00\x00\x00\x00\x00\x00\x00{\"a\":1}\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev events.APIGatewayProxyRequest
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &ev)
		if ev.Resource == "/v1/files/{id}/content" {
			_, _ = io.WriteString(w, stream)
			return
		}
		_, _ = io.WriteString(w, `{"statusCode":201,"multiValueHeaders":{"X-A":["1","2"]},"body":"eyJ4IjoxfQ==","isBase64Encoded":true}`)
	}))
	defer srv.Close()
	f := &Function{Name: "relay-api"}
	fakeSandbox(f, srv)
	v, err := f.API(context.Background(), events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/v1/files/f/content", Resource: "/v1/files/{id}/content"})
	r, ok := v.(io.Reader)
	if err != nil || !ok {
		t.Fatalf("streamed route: %T %v", v, err)
	}
	if b, _ := io.ReadAll(r); string(b) != stream {
		t.Fatalf("stream %q", b)
	}
	v, err = f.API(context.Background(), events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/v1/batches", Resource: "/{proxy+}"})
	raw, ok := v.(json.RawMessage)
	if err != nil || !ok || !strings.Contains(string(raw), `"statusCode":201`) {
		t.Fatalf("buffered route: %T %s %v", v, raw, err)
	}
}
