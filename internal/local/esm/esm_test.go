package esm_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/esm"
)

// The poller's tests run against the emulator (emutest), each on queues of
// its own.
func TestMain(m *testing.M) { emutest.Main(m) }

// client is an SQS client on the emulator.
func client(t testing.TB) *sqs.Client { return sqs.NewFromConfig(emutest.Config(t)) }

// queue is a uniquely named queue with its dead-letter queue.
type queue struct {
	url, arn, dlqURL string
}

const maxReceiveCount = 2

// newQueue creates a queue whose redrive policy moves a message to its DLQ
// after maxReceiveCount receives; a short visibility keeps redeliveries fast.
func newQueue(t *testing.T, visibility time.Duration) queue {
	t.Helper()
	ctx := t.Context()
	b := make([]byte, 4)
	rand.Read(b)
	name := regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-")
	name = fmt.Sprintf("esm-%.50s-%x", name, b)

	create := func(name string, attrs map[string]string) (url, arn string) {
		out, err := client(t).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			t.Fatalf("create queue %s: %v", name, err)
		}
		t.Cleanup(func() {
			client(t).DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
		})
		a, err := client(t).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		if err != nil {
			t.Fatalf("queue arn of %s: %v", name, err)
		}
		return *out.QueueUrl, a.Attributes["QueueArn"]
	}
	var q queue
	var dlqARN string
	q.dlqURL, dlqARN = create(name+"-dlq", nil)
	q.url, q.arn = create(name, map[string]string{
		"VisibilityTimeout": fmt.Sprint(int(visibility.Seconds())),
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, dlqARN, maxReceiveCount),
	})
	return q
}

func send(t *testing.T, url string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := client(t).SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}); err != nil {
			t.Fatalf("send %q: %v", b, err)
		}
	}
}

// start runs p until the test ends and checks that Run then returns nil.
func start(t *testing.T, p *esm.Poller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// eventually polls cond until it holds, failing the test after a deadline
// generous enough for a slow emulator.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// empty reports whether url has no message, visible or in flight.
func empty(t *testing.T, url string) func() bool {
	return func() bool {
		out, err := client(t).GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			},
		})
		if err != nil {
			t.Fatalf("queue attributes: %v", err)
		}
		return out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
	}
}

// settle waits until the handler has seen exactly want — each body's
// ApproximateReceiveCounts, in order — and the queue is empty. The handler's
// view comes first because the queue's counts are not read atomically: at
// the moment a message's visibility timeout ends it can look neither
// visible nor in flight.
func settle(t *testing.T, url string, rec *recorder, want map[string][]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for got := rec.deliveries(); !reflect.DeepEqual(got, want); got = rec.deliveries() {
		if time.Now().After(deadline) {
			t.Fatalf("handler saw receive counts %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	eventually(t, "an empty queue", empty(t, url))
	if got := rec.deliveries(); !reflect.DeepEqual(got, want) {
		t.Errorf("handler saw receive counts %v, want %v", got, want)
	}
}

// recorder is a handler's memory of what it was given.
type recorder struct {
	mu      sync.Mutex
	batches [][]events.SQSMessage
}

func (r *recorder) record(ev events.SQSEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, ev.Records)
}

// deliveries returns each body's ApproximateReceiveCounts, in delivery order.
func (r *recorder) deliveries() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := map[string][]string{}
	for _, b := range r.batches {
		for _, m := range b {
			got[m.Body] = append(got[m.Body], m.Attributes["ApproximateReceiveCount"])
		}
	}
	return got
}

func (r *recorder) invocations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches)
}

func firstReceive(ev events.SQSEvent) bool {
	for _, m := range ev.Records {
		if m.Attributes["ApproximateReceiveCount"] == "1" {
			return true
		}
	}
	return false
}

func TestEventRecords(t *testing.T) {
	t.Parallel()
	q := newQueue(t, time.Second)
	_, err := client(t).SendMessage(t.Context(), &sqs.SendMessageInput{
		QueueUrl:    aws.String(q.url),
		MessageBody: aws.String(`{"chunk":1}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"tenant": {DataType: aws.String("String"), StringValue: aws.String("t1")},
			"blob":   {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan events.SQSMessage, 1)
	start(t, &esm.Poller{Client: client(t), QueueURL: q.url, Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		got <- ev.Records[0]
		return events.SQSEventResponse{}, nil
	}, FunctionTimeout: time.Second})

	var m events.SQSMessage
	select {
	case m = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no invocation")
	}
	checks := []struct {
		field, got, want string
	}{
		{"Body", m.Body, `{"chunk":1}`},
		{"EventSource", m.EventSource, "aws:sqs"},
		{"EventSourceARN", m.EventSourceARN, q.arn},
		{"AWSRegion", m.AWSRegion, "us-east-1"},
		{"ApproximateReceiveCount", m.Attributes["ApproximateReceiveCount"], "1"},
		{"tenant", aws.ToString(m.MessageAttributes["tenant"].StringValue), "t1"},
		{"tenant DataType", m.MessageAttributes["tenant"].DataType, "String"},
		{"blob", fmt.Sprint(m.MessageAttributes["blob"].BinaryValue), "[1 2]"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.field, c.got, c.want)
		}
	}
	for field, v := range map[string]string{
		"MessageId":                        m.MessageId,
		"ReceiptHandle":                    m.ReceiptHandle,
		"Md5OfBody":                        m.Md5OfBody,
		"SentTimestamp":                    m.Attributes["SentTimestamp"],
		"ApproximateFirstReceiveTimestamp": m.Attributes["ApproximateFirstReceiveTimestamp"],
	} {
		if v == "" {
			t.Errorf("%s is empty", field)
		}
	}
	eventually(t, "the message to be deleted", empty(t, q.url))
}

func TestInvocationContext(t *testing.T) {
	t.Parallel()
	const timeout = 4 * time.Second
	q := newQueue(t, 5*time.Second)
	send(t, q.url, "a", "b")

	type invocation struct {
		left time.Duration
		lc   *lambdacontext.LambdaContext
	}
	got := make(chan invocation, 10) // room for a redelivery, which must not block Run's shutdown
	start(t, &esm.Poller{
		Client: client(t), QueueURL: q.url, BatchSize: 1, FunctionName: "executor", FunctionTimeout: timeout,
		Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			deadline, ok := ctx.Deadline()
			if !ok {
				t.Error("ctx has no deadline")
			}
			lc, _ := lambdacontext.FromContext(ctx)
			got <- invocation{time.Until(deadline), lc}
			return events.SQSEventResponse{}, nil
		},
	})

	ids := map[string]bool{}
	for range 2 {
		var inv invocation
		select {
		case inv = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("no invocation")
		}
		if inv.left <= timeout/2 || inv.left > timeout {
			t.Errorf("deadline in %v, want just under %v", inv.left, timeout)
		}
		if inv.lc == nil {
			t.Fatal("no lambdacontext.LambdaContext in ctx")
		}
		if want := "arn:aws:lambda:us-east-1:000000000000:function:executor"; inv.lc.InvokedFunctionArn != want {
			t.Errorf("InvokedFunctionArn = %q, want %q", inv.lc.InvokedFunctionArn, want)
		}
		if inv.lc.AwsRequestID == "" || ids[inv.lc.AwsRequestID] {
			t.Errorf("AwsRequestID %q is empty or reused", inv.lc.AwsRequestID)
		}
		ids[inv.lc.AwsRequestID] = true
	}
}

func TestAllSucceed(t *testing.T) {
	t.Parallel()
	q := newQueue(t, time.Second)
	bodies := []string{"1", "2", "3", "4", "5"}
	send(t, q.url, bodies...)
	var rec recorder
	start(t, &esm.Poller{Client: client(t), QueueURL: q.url, FunctionTimeout: time.Second,
		Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			rec.record(ev)
			return events.SQSEventResponse{}, nil
		}})

	want := map[string][]string{}
	for _, b := range bodies {
		want[b] = []string{"1"}
	}
	settle(t, q.url, &rec, want)
}

func TestPartialBatchFailure(t *testing.T) {
	t.Parallel()
	q := newQueue(t, time.Second)
	send(t, q.url, "a", "fail", "b")
	var rec recorder
	start(t, &esm.Poller{Client: client(t), QueueURL: q.url, BatchSize: 3, FunctionTimeout: time.Second,
		Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			rec.record(ev)
			var resp events.SQSEventResponse
			for _, m := range ev.Records {
				if m.Body == "fail" && m.Attributes["ApproximateReceiveCount"] == "1" {
					resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
				}
			}
			return resp, nil
		}})

	settle(t, q.url, &rec, map[string][]string{"a": {"1"}, "b": {"1"}, "fail": {"1", "2"}})
	if n := len(rec.batches[0]); n != 3 {
		t.Errorf("first batch has %d messages, want 3", n)
	}
}

// TestWholeBatchFails covers every way an invocation fails as a whole: the
// batch comes back, and the poller carries on to process it again.
func TestWholeBatchFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fail func(ev events.SQSEvent) (events.SQSEventResponse, error)
	}{
		{"error", func(events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{}, errors.New("boom")
		}},
		{"panic", func(events.SQSEvent) (events.SQSEventResponse, error) {
			panic("boom")
		}},
		{"unknown item identifier", func(events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: "not-in-batch"}}}, nil
		}},
		{"empty item identifier", func(events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{}}}, nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, time.Second)
			send(t, q.url, "a", "b", "c")
			var rec recorder
			start(t, &esm.Poller{Client: client(t), QueueURL: q.url, BatchSize: 3, FunctionTimeout: time.Second,
				Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
					rec.record(ev)
					if firstReceive(ev) {
						return tt.fail(ev)
					}
					return events.SQSEventResponse{}, nil
				}})

			settle(t, q.url, &rec, map[string][]string{"a": {"1", "2"}, "b": {"1", "2"}, "c": {"1", "2"}})
		})
	}
}

func TestTimedOutInvocationFails(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 2*time.Second)
	send(t, q.url, "slow")
	var rec recorder
	start(t, &esm.Poller{Client: client(t), QueueURL: q.url, FunctionTimeout: time.Second,
		Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			rec.record(ev)
			if firstReceive(ev) {
				<-ctx.Done() // ignores the deadline and "succeeds" too late
			}
			return events.SQSEventResponse{}, nil
		}})

	settle(t, q.url, &rec, map[string][]string{"slow": {"1", "2"}})
}

func TestSimulatedCrash(t *testing.T) {
	t.Parallel()
	q := newQueue(t, time.Second)
	send(t, q.url, "a")
	var rec recorder
	var (
		mu      sync.Mutex
		crashes int
	)
	start(t, &esm.Poller{Client: client(t), QueueURL: q.url, FunctionTimeout: time.Second,
		OnInvoke: func(ev events.SQSEvent) error {
			mu.Lock()
			defer mu.Unlock()
			if crashes == 0 {
				crashes++
				return esm.ErrCrash
			}
			return nil
		},
		Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			rec.record(ev)
			return events.SQSEventResponse{}, nil
		}})

	// The first delivery crashed before reaching the handler.
	settle(t, q.url, &rec, map[string][]string{"a": {"2"}})
}

func TestPoisonMessageGoesToDLQ(t *testing.T) {
	t.Parallel()
	q := newQueue(t, time.Second)
	send(t, q.url, "poison")
	var rec recorder
	start(t, &esm.Poller{Client: client(t), QueueURL: q.url, FunctionTimeout: time.Second,
		Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			rec.record(ev)
			return events.SQSEventResponse{}, errors.New("always fails")
		}})

	var dead []types.Message
	eventually(t, "the message in the DLQ", func() bool {
		out, err := client(t).ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.dlqURL), WaitTimeSeconds: 1})
		if err != nil {
			t.Fatalf("receive from DLQ: %v", err)
		}
		dead = out.Messages
		return len(dead) > 0
	})
	if got := aws.ToString(dead[0].Body); got != "poison" {
		t.Errorf("DLQ message body = %q, want %q", got, "poison")
	}
	want := []string{"1", "2"}[:maxReceiveCount]
	if got := rec.deliveries()["poison"]; !reflect.DeepEqual(got, want) {
		t.Errorf("handler saw receive counts %v, want %v", got, want)
	}
}

func TestConcurrency(t *testing.T) {
	t.Parallel()
	for _, concurrency := range []int{1, 3} {
		t.Run(fmt.Sprint(concurrency), func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, 30*time.Second)
			var bodies []string
			for i := range 2 * concurrency {
				bodies = append(bodies, fmt.Sprint(i))
			}
			send(t, q.url, bodies...)

			var (
				mu            sync.Mutex
				cond          = sync.NewCond(&mu)
				running, peak int
				done          int
			)
			start(t, &esm.Poller{Client: client(t), QueueURL: q.url, BatchSize: 1, Concurrency: concurrency, FunctionTimeout: 10 * time.Second,
				Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
					mu.Lock()
					running++
					peak = max(peak, running)
					cond.Broadcast()
					// Hold each invocation until `concurrency` run at once
					// (the first round) so overlap is certain, not lucky.
					for running < concurrency && done == 0 && ctx.Err() == nil {
						cond.Wait()
					}
					mu.Unlock()
					time.Sleep(100 * time.Millisecond) // room for an over-limit invocation to show
					mu.Lock()
					running--
					done++
					cond.Broadcast()
					mu.Unlock()
					return events.SQSEventResponse{}, nil
				}})

			eventually(t, "every message", func() bool { mu.Lock(); defer mu.Unlock(); return done == len(bodies) })
			mu.Lock()
			defer mu.Unlock()
			if peak != concurrency {
				t.Errorf("at most %d invocations ran at once, want %d", peak, concurrency)
			}
		})
	}
}

func TestShutdownWaitsForInvocations(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 30*time.Second)
	send(t, q.url, "a")
	started, release := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan error, 1)
	go func() {
		returned <- (&esm.Poller{Client: client(t), QueueURL: q.url, FunctionTimeout: 10 * time.Second,
			Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				close(started)
				<-release
				return events.SQSEventResponse{}, ctx.Err()
			}}).Run(ctx)
	}()

	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no invocation")
	}
	cancel()
	select {
	case err := <-returned:
		t.Fatalf("Run returned %v with an invocation in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-returned; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The invocation outlived Run's ctx and still had its message deleted.
	if !empty(t, q.url)() {
		t.Error("message not deleted after shutdown")
	}
}

func TestRefusesMisconfiguration(t *testing.T) {
	t.Parallel()
	q := newQueue(t, time.Second)
	noop := func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
		return events.SQSEventResponse{}, nil
	}
	tests := []struct {
		name string
		p    esm.Poller
		want string
	}{
		{"function timeout over visibility", esm.Poller{Client: client(t), QueueURL: q.url, Handler: noop, FunctionTimeout: 2 * time.Second}, "visibility timeout"},
		{"batch too large", esm.Poller{Client: client(t), QueueURL: q.url, Handler: noop, BatchSize: 11}, "BatchSize"},
		{"no handler", esm.Poller{Client: client(t), QueueURL: q.url}, "Handler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Run(t.Context())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run = %v, want an error about %s", err, tt.want)
			}
		})
	}
}

// Duplicate hands one batch to two invocations at once: both run (each
// waits until the other has started), with their own request ids, and
// the message is deleted.
func TestDuplicateDelivery(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 5*time.Second)
	send(t, q.url, "twice")
	var (
		both    = make(chan string, 2)
		seen    sync.WaitGroup
		started = make(chan struct{})
	)
	seen.Add(2)
	go func() { seen.Wait(); close(started) }()
	start(t, &esm.Poller{Client: client(t), QueueURL: q.url, FunctionTimeout: 5 * time.Second,
		Duplicate: func(ev events.SQSEvent) bool { return ev.Records[0].Body == "twice" },
		Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			lc, _ := lambdacontext.FromContext(ctx)
			both <- lc.AwsRequestID
			seen.Done()
			select { // returns only once the other invocation is running too
			case <-started:
				return events.SQSEventResponse{}, nil
			case <-ctx.Done():
				return events.SQSEventResponse{}, ctx.Err()
			}
		}})
	ids := map[string]bool{}
	for range 2 {
		select {
		case id := <-both:
			ids[id] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d invocation(s) of the duplicated batch started, want 2 at once", len(ids))
		}
	}
	if len(ids) != 2 {
		t.Errorf("the two invocations shared a request id: %v", ids)
	}
	eventually(t, "the message deleted", func() bool {
		out, err := client(t).GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.url),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		return err == nil && out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
	})
}
