package localstack

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/relaybatch/relay/internal/awsfault"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// Regression tests of the scheduling protocol (docs/design.md
// "Scheduling"). Faults the emulator never produces are injected at the
// AWS SDK (internal/awsfault). No timing is asserted: the work queue's
// visibility timeout is far above the lease (shortLease), and which run
// completed a chunk is read from its item.

// isCommit matches the transaction that commits a chunk.
func isCommit(_ context.Context, in any) bool {
	tx, ok := in.(*dynamodb.TransactWriteItemsInput)
	return ok && len(tx.TransactItems) > 0 && tx.TransactItems[0].Update != nil &&
		strings.HasPrefix(*tx.TransactItems[0].Update.UpdateExpression, "SET #st = :done")
}

func TestSchedLostWorkMessage(t *testing.T) {
	t.Parallel()
	// The first chunk's work message is never sent (the send fails after
	// the claim, and nothing retries it): its lease runs out and the tick
	// gives the chunk to a new run.
	var mu sync.Mutex
	lost := map[string]bool{}
	in := awsfault.New(1).Add(awsfault.Rule{Service: "SQS", Operation: "SendMessageBatch", Kind: awsfault.Before, Times: 1,
		Match: func(_ context.Context, v any) bool {
			in := v.(*sqs.SendMessageBatchInput)
			if !strings.HasSuffix(*in.QueueUrl, "-work") {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			for _, e := range in.Entries {
				var m msg.Message
				json.Unmarshal([]byte(*e.MessageBody), &m)
				lost[fmt.Sprint(m.Chunk)+"/"+m.Run] = true
			}
			return true
		}})
	rt := runtime(t, shortLease, withAPIOption(in.APIOption))
	c, key := client(t, rt, "acme")
	rows := nRows(30, "lost")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "completed" || in.Total() != 1 {
		t.Fatalf("status %s, faults injected %d", b.Status, in.Total())
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
	ctx := context.Background()
	chunks, err := rt.App.Store.Chunks(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	retaken := 0
	for _, ch := range chunks {
		if lost[fmt.Sprint(ch.Index)+"/"+ch.Run] {
			t.Errorf("chunk %d was completed by run %s, whose message was lost", ch.Index, ch.Run)
		}
		if ch.Attempts > 1 {
			retaken++
		}
	}
	if retaken == 0 {
		t.Errorf("no chunk was taken over: %d chunks, lost %v", len(chunks), lost)
	}
	if n, _ := rt.App.Store.InFlight(ctx, "gpt-4o-mini"); n != 0 {
		t.Fatalf("model in-flight after the batch: %d, want 0", n)
	}
	if got := rt.Mock.Stats().Requests; got != int64(len(rows)) {
		t.Fatalf("upstream requests: got %d, want %d (nothing ran twice)", got, len(rows))
	}
}

func TestSchedCommitConflictRetried(t *testing.T) {
	t.Parallel()
	// DynamoDB cancels two commits for conflicts with other transactions:
	// they are retried, never turned into a re-run or a dead letter.
	in := awsfault.New(2).Add(awsfault.Rule{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.Conflict, Times: 2, Match: isCommit})
	rt := runtime(t, shortLease, withAPIOption(in.APIOption))
	c, key := client(t, rt, "acme")
	rows := nRows(30, "conflict")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "completed" || in.Total() != 2 {
		t.Fatalf("status %s, conflicts injected %d", b.Status, in.Total())
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
	if b.RequestCounts.Completed != int64(len(rows)) {
		t.Fatalf("completed %d of %d", b.RequestCounts.Completed, len(rows))
	}
	if got := rt.Mock.Stats().Requests; got != int64(len(rows)) {
		t.Fatalf("upstream requests: got %d, want %d (a conflict must not re-run a chunk)", got, len(rows))
	}
	dl := rawGet(t, rt, key, "/v1/batches/"+b.ID+"/dead_letters")
	if strings.Contains(string(dl), "custom_id") {
		t.Fatalf("dead letters after conflicts: %s", dl)
	}
}

func TestSchedCommitTookEffectDespiteError(t *testing.T) {
	t.Parallel()
	// A commit takes effect and its call fails all the same (a timeout):
	// its retry must recognise the commit as its own, keep its parts and
	// hand its slots on.
	in := awsfault.New(3).Add(awsfault.Rule{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.After, Times: 2, Match: isCommit})
	rt := runtime(t, shortLease, withAPIOption(in.APIOption))
	c, key := client(t, rt, "acme")
	rows := nRows(30, "after")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "completed" || in.Total() != 2 {
		t.Fatalf("status %s, faults injected %d", b.Status, in.Total())
	}
	out, _ := checkAccounting(t, rt, c, key, b, idsOf(rows))
	if len(out) != len(rows) {
		t.Fatalf("output lines: got %d, want %d: a committed part was lost", len(out), len(rows))
	}
	if got := rt.Mock.Stats().Requests; got != int64(len(rows)) {
		t.Fatalf("upstream requests: got %d, want %d", got, len(rows))
	}
	if n, _ := rt.App.Store.InFlight(context.Background(), "gpt-4o-mini"); n != 0 {
		t.Fatalf("model in-flight after the batch: %d, want 0", n)
	}
}

// opCounter counts AWS calls by operation, and DynamoDB reads of batch
// records, as an SDK middleware.
type opCounter struct {
	mu         sync.Mutex
	ops        map[string]int
	batchReads int
}

func (c *opCounter) option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("opcount", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		c.mu.Lock()
		c.ops[awsmiddleware.GetServiceID(ctx)+"."+awsmiddleware.GetOperationName(ctx)]++
		if g, ok := in.Parameters.(*dynamodb.GetItemInput); ok {
			if sk, ok := g.Key["sk"]; ok && strings.HasPrefix(fmt.Sprint(sk), "&{BATCH#") {
				c.batchReads++
			}
		}
		c.mu.Unlock()
		return next.HandleInitialize(ctx, in)
	}), middleware.After)
}

func (c *opCounter) reset() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, reads := c.ops, c.batchReads
	c.ops, c.batchReads = map[string]int{}, 0
	return ops, reads
}

func TestSchedCostIndependentOfActiveBatches(t *testing.T) {
	t.Parallel()
	counter := &opCounter{ops: map[string]int{}}
	rt := runtime(t, withAPIOption(counter.option), func(o *localrun.Options) {
		o.TickEvery = time.Hour // ticks are run by hand below
	})
	ctx := context.Background()
	st := rt.App.Store
	// 300 other batches wait on a model whose capacity is taken: planned,
	// with chunks and a ready entry each, and due long after this test.
	const others = 300
	quota := sched.Quotas(8)[0]
	holder := batch.Chunk{Batch: "batch_holder", Tenant: "other", Model: "storm-ratelimited", State: batch.ChunkPending, Rows: 1, NextSame: -1}
	if err := st.PutChunks(ctx, []batch.Chunk{holder}); err != nil {
		t.Fatal(err)
	}
	entry := sched.Ready{Model: "storm-ratelimited", Batch: holder.Batch, Tenant: "other", Total: 1}
	if err := st.PutReady(ctx, entry); err != nil {
		t.Fatal(err)
	}
	if err := st.ClaimFromPool(ctx, quota, sched.Claim{Entry: entry, After: -1, Run: "holder", Slots: quota, Lease: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range others {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			exp := time.Now().Add(24 * time.Hour).Unix()
			b := batch.Batch{ID: fmt.Sprintf("batch_waiting%03d", i), Tenant: "other", Status: batch.InProgress, CreatedAt: time.Now().Unix(),
				ExpiresAt: &exp, ChunksTotal: 1, Started: true, Endpoint: "/v1/chat/completions"}
			if _, _, err := st.CreateBatch(ctx, b, store.IdemKey{}); err != nil {
				t.Error(err)
				return
			}
			ch := []batch.Chunk{{Batch: b.ID, Tenant: "other", Model: "storm-ratelimited", State: batch.ChunkPending, Rows: 1, NextSame: -1}}
			if err := st.PutChunks(ctx, ch); err != nil {
				t.Error(err)
				return
			}
			if err := st.PutReady(ctx, sched.Ready{Model: "storm-ratelimited", Tenant: "other", Batch: b.ID, Total: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	counter.reset()
	if err := rt.App.Engine.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	ops, reads := counter.reset()
	total := 0
	for op, n := range ops {
		if !strings.HasPrefix(op, "SQS.ReceiveMessage") && !strings.HasPrefix(op, "SQS.DeleteMessage") {
			total += n // the pollers' own receives go on beside the tick
		}
	}
	t.Logf("one tick with %d waiting batches: %d AWS requests %v, %d batch reads", others, total, ops, reads)
	if reads > 0 || total > 30 {
		t.Errorf("a tick made %d requests and read %d batches: its cost must not grow with the %d waiting batches", total, reads, others)
	}

	c, key := client(t, rt, "acme")
	rows := nRows(40, "busy")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	counter.reset()
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	ops, reads = counter.reset()
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
	t.Logf("a 40-row batch beside %d waiting ones: %d batch reads, %v", others, reads, ops)
	if reads > 60 || ops["DynamoDB.Query"] > 60 {
		t.Errorf("running 4 chunks read %d batch records and made %d queries: the cost of a chunk must not grow with the %d waiting batches",
			reads, ops["DynamoDB.Query"], others)
	}
}

func TestListKeys(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	for _, tenant := range []string{"acme", "globex"} {
		if _, err := rt.Key(ctx, tenant); err != nil {
			t.Fatal(err)
		}
	}
	ks, err := rt.App.Store.ListKeys(ctx)
	if err != nil {
		t.Fatalf("relay keys list: %v", err)
	}
	tenants := map[string]bool{}
	for _, k := range ks {
		tenants[k.Tenant] = true
	}
	if len(ks) != 2 || !tenants["acme"] || !tenants["globex"] {
		t.Fatalf("keys: got %+v", ks)
	}
}

func TestSchedTransientErrorsSpendNoAttempt(t *testing.T) {
	t.Parallel()
	// Throttled reads of chunk input fail three runs: each goes back to the
	// queue as the same run and succeeds, without spending an attempt
	// (three spent attempts would dead-letter a chunk).
	in := awsfault.New(7).Add(awsfault.Rule{Service: "S3", Operation: "GetObject", Kind: awsfault.Throttle, Times: 3,
		Match: func(ctx context.Context, _ any) bool {
			lc, ok := lambdacontext.FromContext(ctx)
			return ok && strings.HasSuffix(lc.InvokedFunctionArn, ":executor")
		}})
	rt := runtime(t, shortLease, withAPIOption(in.APIOption))
	c, key := client(t, rt, "acme")
	rows := nRows(30, "throttled reads")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "completed" || in.Total() != 3 || b.RequestCounts.Completed != int64(len(rows)) {
		t.Fatalf("status %s %+v, faults %d", b.Status, b.RequestCounts, in.Total())
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
	chunks, err := rt.App.Store.Chunks(context.Background(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chunks {
		if ch.Attempts != 1 {
			t.Errorf("chunk %d took %d attempts, want 1: a throttle is not a failed attempt", ch.Index, ch.Attempts)
		}
	}
}

// A plan that runs again puts its batch's ready entry again: it must not
// step back the entry a claim moved on (to chunk 1, one turn later, as a
// real claim does), nor point an entry at the claimed chunk 0 (whose
// commit would then pick its own chunk); and an entry is deleted only
// while it points where its reader saw it.
func TestSchedReadyEntryNotSteppedBack(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	st := rt.App.Store
	var chunks []batch.Chunk
	for i := range 3 {
		chunks = append(chunks, batch.Chunk{Batch: "batch_x", Tenant: "acme", Index: i, Model: "solo-model", State: batch.ChunkPending, Rows: 1, NextSame: -1})
	}
	if err := st.PutChunks(ctx, chunks); err != nil {
		t.Fatal(err)
	}
	first := sched.Ready{Model: "solo-model", Tenant: "acme", Batch: "batch_x", Next: 0, Total: 3}
	if err := st.PutReady(ctx, first); err != nil {
		t.Fatal(err)
	}
	claim := sched.Claim{Entry: first, After: 1, Run: "run0", Slots: 1, Lease: time.Now().Add(time.Minute)}
	if err := st.ClaimFromPool(ctx, 8, claim); err != nil {
		t.Fatal(err)
	}
	moved, ok, err := st.ReadyHead(ctx, "solo-model")
	if err != nil || !ok || moved.Next != 1 || moved.Seq != first.Seq+1 {
		t.Fatalf("head after the claim: %+v %v %v, want chunk 1 one turn later", moved, ok, err)
	}
	if err := st.PutReady(ctx, first); err != nil { // what the plan's second attempt writes
		t.Fatal(err)
	}
	head, ok, err := st.ReadyHead(ctx, "solo-model")
	if err != nil || !ok || head.SK() != moved.SK() || head.Next != 1 {
		t.Fatalf("head after the plan's second put: %+v %v %v, want still %+v", head, ok, err, moved)
	}
	stale := moved
	stale.Next = 0 // as a reader saw it before a claim stepped it
	if err := st.DeleteReady(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if head, ok, _ := st.ReadyHead(ctx, "solo-model"); !ok || head.Next != 1 {
		t.Fatalf("a delete of the entry at chunk 0 removed the one at chunk 1: %+v %v", head, ok)
	}
	if err := st.DeleteReady(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := st.ReadyHead(ctx, "solo-model"); ok {
		t.Fatal("the entry is still there after its delete")
	}
}
