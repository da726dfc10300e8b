package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/workflow"
)

// A step's spend is added to the tenant's daily usage with its checkpoint,
// once: a save of the same step again (the retry of an ambiguous write
// that took effect) succeeds without adding it twice, a save by an owner
// that lost the lease adds nothing, and the checkpoint reads back counted.
func TestSaveWorkflowCountsAStepsSpendOnce(t *testing.T) {
	s := emulatorStore(t)
	ctx := context.Background()
	now := time.Now()
	if _, err := s.AcquireWorkflow(ctx, "b1", 3, "me", now, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	spend := Spend{Tenant: "t", Day: "2026-12-02", ByModel: map[string]sched.UsageAgg{"m": {Input: 4, Output: 6, Total: 10}, "fb": {Total: 5, Input: 5}}}
	cp := WorkflowCheckpoint{State: workflow.State{Step: 1, Requests: 2, Usage: workflow.Usage{TotalTokens: 15}}}
	for try := range 2 {
		if err := s.SaveWorkflow(ctx, "b1", 3, "me", cp, now.Add(time.Minute), spend); err != nil {
			t.Fatalf("save %d: %v", try, err)
		}
	}
	if err := s.SaveWorkflow(ctx, "b1", 3, "another", WorkflowCheckpoint{State: workflow.State{Step: 2}}, now.Add(time.Minute), spend); !errors.Is(err, ErrWorkflowLeaseLost) {
		t.Fatalf("a save without the lease: %v, want ErrWorkflowLeaseLost", err)
	}
	rows, err := s.Usage(ctx, "t", "2026-12-01", "2026-12-31")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Model] = r.TotalTokens
	}
	if len(got) != 2 || got["m"] != 10 || got["fb"] != 5 {
		t.Fatalf("daily usage %+v, want m 10 and fb 5 tokens: the step counted once", rows)
	}
	back, err := s.AcquireWorkflow(ctx, "b1", 3, "me", now, now.Add(time.Minute))
	if err != nil || !back.Counted || back.State.Step != 1 || back.State.Usage.TotalTokens != 15 {
		t.Fatalf("checkpoint %+v, %v; want step 1, counted", back, err)
	}
}

// The governor reads the tenant's usage before each of a record's events
// (docs/design.md "Governance"), just after the step before it counted its
// spend: the read must see that write, or on DynamoDB (eventually
// consistent by default) a record may run steps past a spent budget.
func TestUsageReadsWhatWasJustCounted(t *testing.T) {
	t.Parallel()
	base := emulatorStore(t)
	var consistent []bool
	hook := func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("record", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if q, ok := in.Parameters.(*dynamodb.QueryInput); ok {
				consistent = append(consistent, aws.ToBool(q.ConsistentRead))
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
	}
	s := New(dynamodb.NewFromConfig(emutest.Config(t), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, hook) }), base.Table)
	if _, err := s.Usage(context.Background(), "t", "2026-12-01", "2026-12-31"); err != nil {
		t.Fatal(err)
	}
	if len(consistent) != 1 || !consistent[0] {
		t.Fatalf("the usage queries' ConsistentRead: %v, want [true]", consistent)
	}
}

// WorkflowSpent reads a record's saved spend and whether it is counted,
// zero for a record without a checkpoint (engine.DeadLetter's line).
func TestWorkflowSpentReadsTheCheckpoint(t *testing.T) {
	t.Parallel()
	s := emulatorStore(t)
	ctx := context.Background()
	now := time.Now()
	if u, counted, err := s.WorkflowSpent(ctx, "b1", 0); err != nil || u != (workflow.Usage{}) || counted {
		t.Fatalf("no record: %+v %v %v, want zero", u, counted, err)
	}
	if _, err := s.AcquireWorkflow(ctx, "b1", 0, "me", now, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if u, counted, err := s.WorkflowSpent(ctx, "b1", 0); err != nil || u != (workflow.Usage{}) || counted {
		t.Fatalf("a record leased, not saved: %+v %v %v, want zero", u, counted, err)
	}
	want := workflow.Usage{PromptTokens: 4, CompletionTokens: 6, TotalTokens: 10}
	spend := Spend{Tenant: "t", Day: "2026-12-02", ByModel: map[string]sched.UsageAgg{"m": {Input: 4, Output: 6, Total: 10}}}
	if err := s.SaveWorkflow(ctx, "b1", 0, "me", WorkflowCheckpoint{State: workflow.State{Step: 1, Usage: want}}, now.Add(time.Minute), spend); err != nil {
		t.Fatal(err)
	}
	if u, counted, err := s.WorkflowSpent(ctx, "b1", 0); err != nil || u != want || !counted {
		t.Fatalf("a record saved: %+v %v %v, want %+v counted", u, counted, err, want)
	}
}
