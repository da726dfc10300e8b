package awsfault

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// stubHTTP answers every DynamoDB call with an empty success and counts
// the calls that reached it.
type stubHTTP struct{ calls atomic.Int64 }

func (s *stubHTTP) Do(*http.Request) (*http.Response, error) {
	s.calls.Add(1)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body: io.NopCloser(strings.NewReader("{}"))}, nil
}

func client(in *Injector, h *stubHTTP) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", HTTPClient: h, Credentials: aws.AnonymousCredentials{},
		BaseEndpoint: aws.String("http://127.0.0.1:1"), APIOptions: []func(*middleware.Stack) error{in.APIOption},
		RetryMaxAttempts: 1,
	})
}

func TestKinds(t *testing.T) {
	t.Parallel()
	tx := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{}, {}}}
	tests := []struct {
		kind      Kind
		wantCalls int64
		check     func(error) bool
	}{
		{Before, 0, func(err error) bool { var e *Error; return errors.As(err, &e) && !e.After }},
		{After, 1, func(err error) bool { var e *Error; return errors.As(err, &e) && e.After }},
		{Conflict, 0, func(err error) bool {
			var tc *types.TransactionCanceledException
			return errors.As(err, &tc) && len(tc.CancellationReasons) == 2 && *tc.CancellationReasons[0].Code == "TransactionConflict"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			t.Parallel()
			in, h := New(1), &stubHTTP{}
			in.Add(Rule{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: tt.kind, Times: 1})
			c := client(in, h)
			_, err := c.TransactWriteItems(context.Background(), tx)
			if !tt.check(err) || h.calls.Load() != tt.wantCalls {
				t.Fatalf("err %v, calls sent %d; want an injected %s fault and %d calls", err, h.calls.Load(), tt.kind, tt.wantCalls)
			}
			// Times: 1 — the next call goes through untouched.
			if _, err := c.TransactWriteItems(context.Background(), tx); err != nil {
				t.Fatalf("second call: %v", err)
			}
			if in.Total() != 1 {
				t.Fatalf("injected %d faults, want 1", in.Total())
			}
		})
	}
}

func TestRulesMatchServiceAndOperation(t *testing.T) {
	t.Parallel()
	in, h := New(1), &stubHTTP{}
	in.Add(Rule{Service: "DynamoDB", Operation: "PutItem", Kind: Before})
	c := client(in, h)
	if _, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}}); err != nil {
		t.Fatalf("GetItem failed under a PutItem rule: %v", err)
	}
	if _, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}}); err == nil {
		t.Fatal("PutItem went through its rule")
	}
	// Calls counts what a rule applied to: the PutItem, not the GetItem.
	if got := in.Calls(); len(got) != 1 || got["DynamoDB.PutItem"] != 1 {
		t.Fatalf("Calls() = %v, want one DynamoDB.PutItem", got)
	}
}

func TestThrottleAndDie(t *testing.T) {
	t.Parallel()
	in, h := New(1), &stubHTTP{}
	in.Add(Rule{Service: "DynamoDB", Operation: "GetItem", Kind: Throttle, Times: 1})
	in.Add(Rule{Service: "DynamoDB", Operation: "PutItem", Kind: Die, Times: 1})
	c := client(in, h)
	get := &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}}
	_, err := c.GetItem(context.Background(), get)
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ProvisionedThroughputExceededException" {
		t.Fatalf("throttle: got %v", err)
	}
	// One invocation dies at its PutItem: its later calls fail too; another
	// invocation's go through.
	dying := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "r1"})
	other := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "r2"})
	put := &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}}
	if _, err := c.PutItem(dying, put); err == nil {
		t.Fatal("the dying call went through")
	}
	sent := h.calls.Load()
	if _, err := c.GetItem(dying, get); err == nil || h.calls.Load() != sent {
		t.Fatalf("a call after the death: %v (calls sent %d, was %d)", err, h.calls.Load(), sent)
	}
	if _, err := c.GetItem(other, get); err != nil {
		t.Fatalf("another invocation's call: %v", err)
	}
}

// UpdateExpression narrows a rule to the updates it names: a renewal that
// sets the lease fails, the takeover that also sets the run does not, nor
// does a GetItem.
func TestUpdateExpression(t *testing.T) {
	t.Parallel()
	in, h := New(1), &stubHTTP{}
	in.Add(Rule{Service: "DynamoDB", Kind: Throttle, Match: UpdateExpression(func(expr string) bool {
		return strings.Contains(expr, "lease =") && !strings.Contains(expr, "#run =")
	})})
	c := client(in, h)
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}
	update := func(expr string) error {
		_, err := c.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: key, UpdateExpression: aws.String(expr)})
		return err
	}
	if err := update("SET lease = :lease, gsi3pk = :lpk"); err == nil || !strings.Contains(err.Error(), "ProvisionedThroughputExceeded") {
		t.Errorf("renewal: err %v, want an injected throttle", err)
	}
	if err := update("SET #run = :new, lease = :lease"); err != nil {
		t.Errorf("takeover: %v, want no fault", err)
	}
	if _, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key}); err != nil {
		t.Errorf("GetItem: %v, want no fault", err)
	}
}
