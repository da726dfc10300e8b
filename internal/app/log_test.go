package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/relaybatch/relay/internal/config"
)

const testARN = "arn:aws:lambda:us-east-1:000000000000:function:relay-executor"

func invocation(id, arn string) context.Context {
	return lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: id, InvokedFunctionArn: arn})
}

// logLine logs one line with log and returns it, decoded, and the raw text.
func logLine(t *testing.T, buf *bytes.Buffer, logf func()) (map[string]any, string) {
	t.Helper()
	buf.Reset()
	logf()
	raw := strings.TrimSpace(buf.String())
	if strings.Count(raw, "\n") != 0 {
		t.Fatalf("want one line, got:\n%s", raw)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	return m, raw
}

func TestLambdaLogHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(LambdaLogHandler(slog.NewJSONHandler(&buf, nil)))
	inv := invocation("req-1", testARN)

	tests := []struct {
		name         string
		logf         func()
		wantID       string // "" means no request_id
		wantFunction string // "" means no function
	}{
		{"InfoContext in an invocation", func() { log.InfoContext(inv, "hello", "n", 1) }, "req-1", "relay-executor"},
		{"ErrorContext in an invocation", func() { log.ErrorContext(inv, "boom") }, "req-1", "relay-executor"},
		{"Info without a context", func() { log.Info("hello") }, "", ""},
		{"a context without a Lambda context", func() { log.InfoContext(context.Background(), "hello") }, "", ""},
		{"a Lambda context without a request id or ARN", func() { log.InfoContext(invocation("", ""), "hello") }, "", ""},
		{"a qualified ARN", func() { log.InfoContext(invocation("req-2", testARN+":live"), "hello") }, "req-2", "relay-executor"},
		{"the record's own request_id is kept", func() { log.InfoContext(inv, "request failed", "request_id", "api-7") }, "api-7", "relay-executor"},
		{"the logger's own request_id is kept", func() { log.With("request_id", "esm-3").InfoContext(inv, "hello") }, "esm-3", "relay-executor"},
		{"the logger's own function is kept", func() { log.With("function", "mine").WarnContext(inv, "hello") }, "req-1", "mine"},
		{"With other attributes", func() { log.With("batch_id", "b1").InfoContext(inv, "hello") }, "req-1", "relay-executor"},
	}
	for _, tt := range tests {
		// Not parallel: the subtests share buf.
		t.Run(tt.name, func(t *testing.T) {
			m, raw := logLine(t, &buf, tt.logf)
			for key, want := range map[string]string{"request_id": tt.wantID, "function": tt.wantFunction} {
				n := strings.Count(raw, `"`+key+`":`)
				switch {
				case want == "" && n != 0:
					t.Errorf("%s in %s, want none", key, raw)
				case want != "" && (n != 1 || m[key] != want):
					t.Errorf("want one %s %q in %s", key, want, raw)
				}
			}
		})
	}
}

func TestLambdaLogHandlerLevelsAndWrapping(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := LambdaLogHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if LambdaLogHandler(h) != h {
		t.Error("wrapping twice made a second wrapper")
	}
	log := slog.New(h)
	log.InfoContext(invocation("req-1", testARN), "below the level")
	if buf.Len() != 0 {
		t.Errorf("a record below the inner handler's level was written: %s", buf.String())
	}
	log.WarnContext(invocation("req-1", testARN), "at the level")
	if !strings.Contains(buf.String(), `"request_id":"req-1"`) {
		t.Errorf("no request_id: %s", buf.String())
	}
}

// TestNewLogsRequestID: the app's logger, which the engine, the api and the
// webhook deliveries log with, is wrapped.
func TestNewLogsRequestID(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	a, err := New(config.Env{Prefix: "relay"}, &config.Models{}, aws.Config{Region: "us-east-1"}, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for name, log := range map[string]*slog.Logger{"App.Log": a.Log, "Engine.Log": a.Engine.Log, "Webhooks.Log": a.Webhooks.Log} {
		m, _ := logLine(t, &buf, func() { log.InfoContext(invocation("req-9", testARN), "hello") })
		if m["request_id"] != "req-9" {
			t.Errorf("%s: request_id = %v, want req-9", name, m["request_id"])
		}
	}
}
