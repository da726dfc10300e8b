package app

import (
	"testing"

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
