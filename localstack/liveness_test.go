package localstack

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/awsfault"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/resources"
)

// Liveness: every batch reaches a terminal state, and a transient fault
// never ends one.

// readsFile matches the dispatcher's DynamoDB reads of a file record (the
// plan's; the API reads it too when the batch is created).
func readsFile(ctx context.Context, in any) bool {
	g, ok := in.(*dynamodb.GetItemInput)
	if lc, _ := lambdacontext.FromContext(ctx); !ok || lc == nil || !strings.HasSuffix(lc.InvokedFunctionArn, ":dispatcher") {
		return false
	}
	sk, ok := g.Key["sk"].(*types.AttributeValueMemberS)
	return ok && strings.HasPrefix(sk.Value, "FILE#")
}

// quickDispatchRetry makes a failed plan message come back in seconds, not
// two minutes.
func quickDispatchRetry(o *localrun.Options) {
	queueTimes(o, resources.Dispatch, 5*time.Second, 4*time.Second)
}

func TestLivenessPlanSurvivesAThrottledRead(t *testing.T) {
	t.Parallel()
	// The plan's read of the input file is throttled once: the plan runs
	// again and the batch completes (it used to fail as input_file_missing).
	in := awsfault.New(4)
	rt := runtime(t, withAPIOption(in.APIOption), quickDispatchRetry)
	c, key := client(t, rt, "acme")
	rows := nRows(12, "throttled")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	in.Add(awsfault.Rule{Service: "DynamoDB", Operation: "GetItem", Kind: awsfault.Before, Times: 1, Match: readsFile})
	id := createBatch(t, c, f.ID).ID
	b := waitBatch(t, c, id)
	if b.Status != "completed" || in.Total() != 1 {
		t.Fatalf("status %s (%+v), faults %d", b.Status, b.Errors, in.Total())
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
}

func TestLivenessUnplannableBatchExpires(t *testing.T) {
	t.Parallel()
	// A batch whose plan keeps failing expires at the end of its window
	// instead of staying validating for ever.
	var offset atomic.Int64
	in := awsfault.New(5)
	rt := runtime(t, withAPIOption(in.APIOption), func(o *localrun.Options) {
		o.Wire = func(a *app.App) {
			a.SetClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
		}
	})
	c, _ := client(t, rt, "acme")
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(3, "never planned")))
	in.Add(awsfault.Rule{Service: "DynamoDB", Operation: "GetItem", Kind: awsfault.Before, Match: readsFile})
	id := createBatch(t, c, f.ID).ID
	ctx := context.Background()
	if b, err := c.Batches.Get(ctx, id); err != nil || b.Status != "validating" {
		t.Fatalf("before its window ends: %v %+v", err, b)
	}
	offset.Store(int64(25 * time.Hour))
	b := waitBatch(t, c, id)
	if b.Status != "expired" || len(b.Errors.Data) != 1 || b.Errors.Data[0].Code != "batch_expired" {
		t.Fatalf("got %s %+v, want expired with the reason", b.Status, b.Errors)
	}
}

func TestLivenessTooManyPartsFailsClearly(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	ctx := context.Background()
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(2, "parts")))
	// A file completed from thousands of tiny parts (written straight to
	// its record: the Uploads API would take minutes to make one here).
	rec, err := rt.App.Store.GetFile(ctx, "acme", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	for len(rec.Objects) <= 1000 {
		rec.Objects = append(rec.Objects, rec.Objects[0])
	}
	if err := rt.App.Store.PutFileOverwrite(ctx, rec); err != nil {
		t.Fatal(err)
	}
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != "failed" || len(b.Errors.Data) != 1 || b.Errors.Data[0].Code != "too_many_parts" {
		t.Fatalf("got %s %+v, want failed with too_many_parts", b.Status, b.Errors)
	}
}

func TestLivenessCallbackCannotExpireABatch(t *testing.T) {
	t.Parallel()
	// A workflow callback's failed answer may carry any code; one that
	// reads batch_expired fails its record (workflow_failed, the code
	// leading its message) and nothing else.
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	cb := newWFCallback(t, func(wfEvent) (int, string) {
		return 200, `{"state":"failed","error":{"message":"gave up","code":"batch_expired"}}`
	})
	data := append(wfLine("wf", map[string]any{"url": cb.URL}), jsonlRows(nRows(2, "plain"))...)
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", data).ID).ID)
	if b.Status != "completed" || b.RequestCounts.Failed != 1 || b.RequestCounts.Completed != 2 {
		t.Fatalf("got %s %+v, want completed with the record failed", b.Status, b.RequestCounts)
	}
	_, errs := checkAccounting(t, rt, c, key, b, append([]string{"wf"}, idsOf(nRows(2, "plain"))...))
	if l := errs["wf"]; l.Error == nil || l.Error.Code != "workflow_failed" || !strings.HasPrefix(l.Error.Message, "batch_expired: gave up") {
		t.Fatalf("the record's line: %+v", l)
	}
}

func TestLivenessPlanRecordFailsOnce(t *testing.T) {
	t.Parallel()
	// The write that records a plan's chunks fails after the chunks are
	// written: no chunk may run before the batch points to its input, and
	// the plan that runs again must not count any row twice.
	in := awsfault.New(6)
	rt := runtime(t, withAPIOption(in.APIOption), shortLease, quickDispatchRetry)
	c, key := client(t, rt, "acme")
	rows := nRows(30, "recorded once")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	in.Add(awsfault.Rule{Service: "DynamoDB", Operation: "PutItem", Kind: awsfault.Throttle, Times: 1,
		Match: func(_ context.Context, v any) bool {
			p := v.(*dynamodb.PutItemInput)
			n, ok := p.Item["chunks_total"].(*types.AttributeValueMemberN)
			return ok && n.Value != "0"
		}})
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != "completed" || in.Total() != 1 {
		t.Fatalf("status %s, faults %d", b.Status, in.Total())
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
	if b.RequestCounts.Completed != int64(len(rows)) || b.RequestCounts.Total != int64(len(rows)) {
		t.Fatalf("counts %+v, want %d completed of %d", b.RequestCounts, len(rows), len(rows))
	}
	if got := rt.Mock.Stats().Requests; got != int64(len(rows)) {
		t.Fatalf("upstream requests: got %d, want %d", got, len(rows))
	}
}

func TestLivenessPlanStartFailsOnce(t *testing.T) {
	t.Parallel()
	// The plan records its chunks, then putting them in the ready index is
	// throttled once: the plan message comes back in seconds and starts
	// them. It used to keep the plan's two-minute lease, so the retry was
	// dropped and the batch waited for the tick to plan it again.
	// (PutReady: a check that the chunk is pending, and the entry's put.)
	planFaultedOnce(t, 7, awsfault.Rule{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.Throttle, Times: 1,
		Match: func(_ context.Context, v any) bool {
			items := v.(*dynamodb.TransactWriteItemsInput).TransactItems
			if len(items) != 2 || items[0].ConditionCheck == nil || items[1].Put == nil {
				return false
			}
			pk, ok := items[1].Put.Item["pk"].(*types.AttributeValueMemberS)
			return ok && strings.HasPrefix(pk.Value, "READY#")
		}})
}

func TestLivenessPlanLeaseTakenAmbiguously(t *testing.T) {
	t.Parallel()
	// The write that takes the plan lease takes effect and fails all the
	// same: the plan message comes back and must find the lease over (it
	// lasts until the attempt's deadline), not wait two minutes for it.
	planFaultedOnce(t, 8, awsfault.Rule{Service: "DynamoDB", Operation: "PutItem", Kind: awsfault.After, Times: 1,
		Match: func(_ context.Context, v any) bool {
			n, ok := v.(*dynamodb.PutItemInput).Item["plan_lease"].(*types.AttributeValueMemberN)
			return ok && n.Value != "0"
		}})
}

// planFaultedOnce runs a batch whose plan meets fault once: it must end,
// completed with every row accounted for, well within the plan lease's two
// minutes (the plan message comes back in seconds, quickDispatchRetry).
func planFaultedOnce(t *testing.T, seed uint64, fault awsfault.Rule) {
	t.Helper()
	in := awsfault.New(seed)
	rt := runtime(t, withAPIOption(in.APIOption), quickDispatchRetry)
	c, key := client(t, rt, "acme")
	rows := nRows(12, "planned")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	in.Add(fault)
	id := createBatch(t, c, f.ID).ID
	var b *openai.Batch
	eventually(t, "the batch ends well within the plan lease (2 minutes)", time.Minute, func() bool {
		got, err := c.Batches.Get(context.Background(), id)
		b = got
		return err == nil && terminal[got.Status]
	})
	if b.Status != "completed" || in.Total() != 1 {
		t.Fatalf("status %s, faults %d", b.Status, in.Total())
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
}
