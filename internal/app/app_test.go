package app

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/relaybatch/relay/internal/config"
)

// New gives the engine every part engine.New requires, the workflow
// runner and native delegate built on the engine they serve.
func TestNewBuildsTheEngine(t *testing.T) {
	t.Parallel()
	a, err := New(config.Env{}, &config.Models{}, aws.Config{Region: "us-east-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Engine.Workflow != a.Workflows || a.Engine.Native != a.Native || a.Workflows.Engine != a.Engine || a.Native.Engine != a.Engine {
		t.Fatalf("engine %p: its Workflow %v (app's %v on %p), its Native %v (app's %v)", a.Engine, a.Engine.Workflow, a.Workflows, a.Workflows.Engine, a.Engine.Native, a.Native)
	}
}

// An operator endpoint whose URL the webhook policy refuses (plain http
// when RELAY_ALLOW_HTTP_WEBHOOKS is off) stops the start, naming it.
func TestNewRefusesAnOperatorURLThePolicyRefuses(t *testing.T) {
	t.Parallel()
	ms, err := config.ParseModels([]byte("models:\n- {name: a, provider: openai, base_url: http://x/v1}\n" +
		"operator_webhooks:\n- {name: ops, url: http://ops.example/relay, secret_env: S}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(config.Env{}, ms, aws.Config{Region: "us-east-1"}, nil); err == nil || !strings.Contains(err.Error(), "operator_webhooks ops: url") {
		t.Fatalf("New: %v, want the operator endpoint's URL refused", err)
	}
	if _, err := New(config.Env{AllowHTTPWebhooks: true}, ms, aws.Config{Region: "us-east-1"}, nil); err != nil {
		t.Fatalf("New with http webhooks allowed: %v", err)
	}
}

// SetClock moves every service's clock: the times batches records at
// create and the engine compares them with are read from the same one.
func TestSetClockMovesEveryService(t *testing.T) {
	t.Parallel()
	a, err := New(config.Env{}, &config.Models{}, aws.Config{Region: "us-east-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_900_000_000, 0)
	a.SetClock(func() time.Time { return at })
	for name, now := range map[string]func() time.Time{"Engine": a.Engine.Now, "Batches": a.Batches.Now, "Files": a.Files.Now,
		"Govern": a.Govern.Now, "Native": a.Native.Now, "Workflows": a.Workflows.Now, "Webhooks": a.Webhooks.Now, "the key cache": a.secrets.Now} {
		if got := now(); !got.Equal(at) {
			t.Errorf("%s.Now() = %s, want %s", name, got, at)
		}
	}
}
