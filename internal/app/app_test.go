package app

import (
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
