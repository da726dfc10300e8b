package app

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/relaybatch/relay/internal/config"
)

// The engine refuses workflow records it has no runner for (docs/api.md
// "Workflow records"): every app must give it one.
func TestNewWiresWorkflowRecords(t *testing.T) {
	t.Parallel()
	a := New(config.Env{}, &config.Models{}, aws.Config{Region: "us-east-1"}, nil)
	if a.Engine.RunWorkflow == nil {
		t.Fatal("app.New left Engine.RunWorkflow nil: workflow records would be refused")
	}
}
