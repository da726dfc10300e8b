package localstack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/awsfault"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/store"
)

// writesBatch matches the transaction that records a new batch.
func writesBatch(_ context.Context, in any) bool {
	tx, ok := in.(*dynamodb.TransactWriteItemsInput)
	if !ok || len(tx.TransactItems) == 0 || tx.TransactItems[0].Put == nil {
		return false
	}
	sk, ok := tx.TransactItems[0].Put.Item["sk"].(*types.AttributeValueMemberS)
	return ok && strings.HasPrefix(sk.Value, "BATCH#")
}

// A create whose batch write took effect although its call failed (a
// timeout) answers with the batch, which keeps its tenant's in-flight slot
// while it runs and gives it back once it ends.
func TestCreateAmbiguousWriteKeepsInflightSlot(t *testing.T) {
	t.Parallel()
	in := awsfault.New(9)
	rt := runtime(t, withAPIOption(in.APIOption), func(o *localrun.Options) { o.Env.MaxInflight = 1 })
	ctx := context.Background()
	c, _ := client(t, rt, "acme")
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(3, "[[mock:sleep=2s]] ambiguous")))
	in.Add(awsfault.Rule{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.After, Times: 1, Match: writesBatch})
	b := createBatch(t, c, f.ID, option.WithMaxRetries(0))
	if in.Total() != 1 {
		t.Fatalf("faults injected: %d, want 1", in.Total())
	}
	if n, err := rt.App.Store.Inflight(ctx, "acme"); err != nil || n != 1 {
		t.Fatalf("in flight while the batch runs: %d (%v), want 1", n, err)
	}
	if b = waitBatch(t, c, b.ID); b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	// The slot goes back just after the terminal state is written.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n, err := rt.App.Store.Inflight(ctx, "acme")
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight after the batch ended: %d (%v), want 0", n, err)
		}
	}
}

// A create whose plan message was sent but answered an error (the batch
// recorded; the tick would have planned it anyway) keeps the batch's budget
// reservation: the batch runs, and what it holds must still count against
// its tenant's next creates (docs/design.md "Governance").
func TestCreateAmbiguousKeepsReservation(t *testing.T) {
	t.Parallel()
	in := awsfault.New(9)
	rt := runtime(t, withAPIOption(in.APIOption))
	ctx := context.Background()
	c, _ := client(t, rt, "acme")
	if err := rt.App.Store.PutBudget(ctx, "acme", store.Budget{MonthlyTokens: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(3, "[[mock:sleep=2s]] ambiguous")))
	in.Add(awsfault.Rule{Service: "SQS", Operation: "SendMessageBatch", Kind: awsfault.After, Times: 1, Match: func(_ context.Context, in any) bool {
		m, ok := in.(*sqs.SendMessageBatchInput)
		return ok && len(m.Entries) == 1 && strings.Contains(aws.ToString(m.Entries[0].MessageBody), `"type":"plan"`)
	}})
	if _, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, option.WithMaxRetries(0)); err == nil || in.Total() != 1 {
		t.Fatalf("create: %v after %d faults, want the failed send's error", err, in.Total())
	}
	page, err := c.Batches.List(ctx, openai.BatchListParams{})
	if err != nil || len(page.Data) != 1 {
		t.Fatalf("batches: %d (%v), want the one recorded", len(page.Data), err)
	}
	id := page.Data[0].ID
	var held store.Reservations
	if err := rt.App.Store.UpdateReservations(ctx, "acme", func(rs *store.Reservations) error {
		held = *rs
		return store.ErrUnchanged
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := held.Batches[id]; !ok {
		t.Fatalf("reservations %+v: the recorded batch %s holds none", held.Batches, id)
	}
	waitBatch(t, c, id)
}
