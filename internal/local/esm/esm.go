// Package esm emulates Lambda's SQS event source mapping for the local
// runtime and the integration tests: it polls a real queue (on the emulator)
// and invokes a function's real handler with Lambda's semantics — batch size,
// maximum concurrency, the function timeout as the context deadline, and
// ReportBatchItemFailures. Failed messages are simply not deleted; the
// queue's visibility timeout brings them back and its redrive policy moves
// them to the dead-letter queue, exactly as on AWS, so nothing here
// reimplements retries.
package esm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/relaybatch/relay/internal/backoff"
)

// SQSAPI is the part of the SQS client the poller uses.
type SQSAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

var _ SQSAPI = (*sqs.Client)(nil)

// Handler is an SQS-triggered Lambda handler with partial batch responses.
type Handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// ErrCrash, returned by OnInvoke, stands for a function that died before
// answering: the handler is not called and the batch stays in flight until
// the visibility timeout returns it to the queue.
var ErrCrash = errors.New("esm: simulated crash")

// Lambda's defaults for an SQS mapping and a function.
const (
	defaultBatchSize       = 10
	maxBatchSize           = 10 // one ReceiveMessage; Lambda's larger batches need a batching window
	defaultFunctionTimeout = 3 * time.Second
	defaultWaitTime        = 20 * time.Second // Lambda's pollers long-poll for 20 s
	maxWaitTime            = 20 * time.Second
)

// Poller is one event source mapping: one queue feeding one handler.
type Poller struct {
	Client   SQSAPI
	QueueURL string
	// QueueARN is the records' EventSourceARN and gives their AWSRegion;
	// looked up with GetQueueAttributes when empty.
	QueueARN string
	// FunctionName names the function in the InvokedFunctionArn the handler
	// sees; default "<queue name>-consumer".
	FunctionName string
	// BatchSize is the mapping's BatchSize, 1..10; default 10, like Lambda.
	BatchSize int
	// Concurrency is how many invocations may run at once (the mapping's
	// MaximumConcurrency); default 1.
	Concurrency int
	// FunctionTimeout is the function's timeout: each invocation's context
	// has it as deadline, and a handler still running past it has timed out
	// (its batch fails even if it then returns success). Default 3s, like
	// Lambda. As on AWS, it may not exceed the queue's visibility timeout.
	FunctionTimeout time.Duration
	Handler         Handler
	// WaitTime is the long-poll wait, rounded up to whole seconds (SQS's
	// unit), at most 20s; default 20s, as Lambda's pollers, so an idle
	// queue costs few receives. Run does not wait for a receive in flight
	// when ctx is done: what it brings is made visible again at once.
	WaitTime time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnInvoke, if set, is called before each invocation with its event. A
	// non-nil error skips the handler and leaves the batch for redelivery,
	// as if the function had crashed (ErrCrash) or failed; tests and fault
	// runs use it to inject faults.
	OnInvoke func(ev events.SQSEvent) error
	// AfterInvoke, if set, is called after each invocation with how long
	// the handler ran (benchmarks turn that into GB-seconds).
	AfterInvoke func(elapsed time.Duration)
	// Duplicate, if set and true for a batch, also hands the batch to a
	// second invocation at the same time, as SQS's at-least-once delivery
	// may give one message to two consumers: each has its own request id
	// and deadline and deletes what it finished (chaos runs).
	Duplicate func(ev events.SQSEvent) bool
}

// Run polls until ctx is done, then waits for in-flight invocations to
// finish and returns nil. Invocations keep ctx's values but not its
// cancellation — disabling a mapping does not stop a running Lambda — so
// their only limit is the FunctionTimeout deadline, and the deletes of what
// they finished still happen. It returns an error, before polling, if the
// Poller is misconfigured or the queue's attributes cannot be read.
func (p *Poller) Run(ctx context.Context) error {
	r, err := p.start(ctx)
	if err != nil {
		return err
	}
	r.log.Info("event source mapping started",
		"batch_size", r.batchSize, "concurrency", cap(r.slots), "function_timeout", r.timeout)

	var wg sync.WaitGroup
	var wait time.Duration // after a failed receive
	for {
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		msgs, stopped, err := r.receiveUnlessDone(ctx)
		if stopped {
			<-r.slots
			break
		}
		if err != nil || len(msgs) == 0 {
			<-r.slots
			if err != nil {
				wait = min(max(2*wait, 100*time.Millisecond), 5*time.Second)
				r.log.Error("receive failed", "err", err, "retry_in", wait)
				_ = backoff.Sleep(ctx, wait)
			}
			continue
		}
		wait = 0
		wg.Go(func() {
			defer func() { <-r.slots }()
			r.invoke(context.WithoutCancel(ctx), msgs)
		})
	}
	wg.Wait()
	r.log.Info("event source mapping stopped")
	return nil
}

// run is a Poller's settings resolved once, so Run does not mutate p.
type run struct {
	*Poller
	log         *slog.Logger
	queueARN    string
	region      string
	functionARN string
	batchSize   int32
	waitSeconds int32
	timeout     time.Duration
	slots       chan struct{}
}

func (p *Poller) start(ctx context.Context) (*run, error) {
	if p.Client == nil || p.QueueURL == "" || p.Handler == nil {
		return nil, errors.New("esm: Poller needs Client, QueueURL and Handler")
	}
	r := &run{
		Poller:    p,
		log:       p.Logger,
		batchSize: int32(p.BatchSize),
		timeout:   p.FunctionTimeout,
	}
	if r.batchSize == 0 {
		r.batchSize = defaultBatchSize
	}
	if r.batchSize < 1 || r.batchSize > maxBatchSize {
		return nil, fmt.Errorf("esm: BatchSize %d for %s: want 1..%d", p.BatchSize, p.QueueURL, maxBatchSize)
	}
	if r.timeout <= 0 {
		r.timeout = defaultFunctionTimeout
	}
	wait := p.WaitTime
	if wait <= 0 {
		wait = defaultWaitTime
	}
	r.waitSeconds = int32((min(wait, maxWaitTime) + time.Second - 1) / time.Second)
	r.slots = make(chan struct{}, max(p.Concurrency, 1))
	if r.log == nil {
		r.log = slog.Default()
	}

	// CreateEventSourceMapping refuses a function whose timeout exceeds the
	// queue's visibility timeout, because messages would come back while
	// still being processed; refuse it here too so local runs catch it.
	attrs, err := p.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(p.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn, types.QueueAttributeNameVisibilityTimeout},
	})
	if err != nil {
		return nil, fmt.Errorf("esm: get attributes of %s: %w", p.QueueURL, err)
	}
	vis, err := strconv.Atoi(attrs.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
	if err != nil {
		return nil, fmt.Errorf("esm: visibility timeout of %s: %w", p.QueueURL, err)
	}
	if visibility := time.Duration(vis) * time.Second; r.timeout > visibility {
		return nil, fmt.Errorf("esm: queue %s visibility timeout %v is less than function timeout %v", p.QueueURL, visibility, r.timeout)
	}
	r.queueARN = p.QueueARN
	if r.queueARN == "" {
		r.queueARN = attrs.Attributes[string(types.QueueAttributeNameQueueArn)]
	}

	// arn:partition:sqs:region:account:name
	arn := strings.SplitN(r.queueARN, ":", 6)
	if len(arn) != 6 || arn[2] != "sqs" {
		return nil, fmt.Errorf("esm: queue ARN %q of %s is not an SQS ARN", r.queueARN, p.QueueURL)
	}
	r.region = arn[3]
	name := p.FunctionName
	if name == "" {
		name = arn[5] + "-consumer"
	}
	r.functionARN = fmt.Sprintf("arn:%s:lambda:%s:%s:function:%s", arn[1], arn[3], arn[4], name)
	r.log = r.log.With("queue", arn[5], "function", name)
	return r, nil
}

// receiveUnlessDone is receive that gives up waiting when ctx is done; the
// receive then finishes in the background and gives back what it got.
func (r *run) receiveUnlessDone(ctx context.Context) ([]types.Message, bool, error) {
	type result struct {
		msgs []types.Message
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		msgs, err := r.receive(ctx)
		ch <- result{msgs, err}
	}()
	select {
	case res := <-ch:
		return res.msgs, false, res.err
	case <-ctx.Done():
		go func() {
			if res := <-ch; len(res.msgs) > 0 {
				r.giveBack(context.WithoutCancel(ctx), res.msgs)
			}
		}()
		return nil, true, nil
	}
}

// giveBack makes received messages visible again at once.
func (r *run) giveBack(ctx context.Context, msgs []types.Message) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	ctx, cancel := context.WithTimeout(r.attributed(ctx), 30*time.Second)
	defer cancel()
	if _, err := r.Client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(r.QueueURL), Entries: entries}); err != nil {
		r.log.Warn("give back messages received while stopping", "err", err)
	}
}

// receive long-polls for one batch. The call is not cancelled with ctx:
// messages received by a call cut short would stay invisible for a whole
// visibility timeout, and the wait is short anyway.
func (r *run) receive(ctx context.Context) ([]types.Message, error) {
	ctx, cancel := context.WithTimeout(r.attributed(context.WithoutCancel(ctx)), time.Duration(r.waitSeconds)*time.Second+30*time.Second)
	defer cancel()
	out, err := r.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(r.QueueURL),
		MaxNumberOfMessages:         r.batchSize,
		WaitTimeSeconds:             r.waitSeconds,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", r.QueueURL, err)
	}
	return out.Messages, nil
}

// attributed marks the poller's own AWS calls with the function's ARN, as
// its invocations are, so request counts can be told apart per function.
func (r *run) attributed(ctx context.Context) context.Context {
	return lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{InvokedFunctionArn: r.functionARN})
}

// invoke runs one invocation for one batch and deletes what succeeded.
func (r *run) invoke(ctx context.Context, msgs []types.Message) {
	ev := r.event(msgs)
	requestID := NewRequestID()
	log := r.log.With("request_id", requestID, "messages", len(msgs))

	if r.OnInvoke != nil {
		if err := r.OnInvoke(ev); err != nil {
			log.Warn("invocation skipped by OnInvoke; batch left for redelivery", "err", err)
			return
		}
	}
	var dup sync.WaitGroup
	if r.Duplicate != nil && r.Duplicate(ev) {
		dup.Go(func() { r.finish(ctx, NewRequestID(), ev, msgs) })
	}
	r.finish(ctx, requestID, ev, msgs)
	dup.Wait()
}

// finish is an invocation once OnInvoke let it run: call the handler, then
// delete what succeeded.
func (r *run) finish(ctx context.Context, requestID string, ev events.SQSEvent, msgs []types.Message) {
	log := r.log.With("request_id", requestID, "messages", len(msgs))
	began := time.Now()
	resp, err := r.call(ctx, requestID, ev)
	if r.AfterInvoke != nil {
		r.AfterInvoke(time.Since(began))
	}
	done, err := succeeded(ev, resp, err)
	if err != nil {
		attrs := []any{"err", err}
		if p, ok := errors.AsType[*panicError](err); ok {
			attrs = append(attrs, "stack", string(p.stack))
		}
		log.Error("invocation failed; batch left for redelivery", attrs...)
		return
	}
	if failed := len(msgs) - len(done); failed > 0 {
		log.Info("partial batch failure", "failed", failed)
	}
	r.delete(ctx, log, done)
}

// call invokes the handler as Lambda would: deadline, Lambda context, and a
// panic turned into a failed invocation rather than a dead poller.
func (r *run) call(ctx context.Context, requestID string, ev events.SQSEvent) (resp events.SQSEventResponse, err error) {
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{
		AwsRequestID:       requestID,
		InvokedFunctionArn: r.functionARN,
	})
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	resp, err = r.Handler(ctx, ev)
	if ctx.Err() != nil {
		// Lambda would have killed it at the deadline: whatever it returned
		// afterwards never reached the event source mapping.
		return events.SQSEventResponse{}, fmt.Errorf("task timed out after %v", r.timeout)
	}
	return resp, err
}

// panicError is a handler's panic: on AWS the runtime would have crashed
// and the invocation failed, so here it fails the batch and nothing else.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("handler panicked (a crashed Lambda): %v", e.value)
}

// succeeded applies ReportBatchItemFailures: after an error nothing
// succeeded; otherwise everything not listed did, unless the response names
// a message that is not in the batch, which Lambda treats as a failure of
// the whole batch.
func succeeded(ev events.SQSEvent, resp events.SQSEventResponse, err error) ([]events.SQSMessage, error) {
	if err != nil {
		return nil, err
	}
	inBatch := make(map[string]bool, len(ev.Records))
	for _, m := range ev.Records {
		inBatch[m.MessageId] = true
	}
	failed := make(map[string]bool, len(resp.BatchItemFailures))
	for _, f := range resp.BatchItemFailures {
		if !inBatch[f.ItemIdentifier] {
			return nil, fmt.Errorf("batch item failure %q is not a message of the batch", f.ItemIdentifier)
		}
		failed[f.ItemIdentifier] = true
	}
	var done []events.SQSMessage
	for _, m := range ev.Records {
		if !failed[m.MessageId] {
			done = append(done, m)
		}
	}
	return done, nil
}

// delete removes the succeeded messages. Its failure only means they are
// delivered again, which handlers must tolerate anyway (at-least-once).
func (r *run) delete(ctx context.Context, log *slog.Logger, msgs []events.SQSMessage) {
	if len(msgs) == 0 {
		return
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.ReceiptHandle)}
	}
	ctx, cancel := context.WithTimeout(r.attributed(ctx), 30*time.Second)
	defer cancel()
	out, err := r.Client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(r.QueueURL), Entries: entries})
	if err != nil {
		log.Error("delete failed; messages will be delivered again", "err", err)
		return
	}
	for _, f := range out.Failed {
		log.Error("delete failed; message will be delivered again",
			"entry", aws.ToString(f.Id), "code", aws.ToString(f.Code), "err", aws.ToString(f.Message))
	}
}

// event builds the event Lambda would send for msgs.
func (r *run) event(msgs []types.Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		ev.Records[i] = events.SQSMessage{
			MessageId:              aws.ToString(m.MessageId),
			ReceiptHandle:          aws.ToString(m.ReceiptHandle),
			Body:                   aws.ToString(m.Body),
			Md5OfBody:              aws.ToString(m.MD5OfBody),
			Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
			Attributes:             m.Attributes,
			MessageAttributes:      messageAttributes(m.MessageAttributes),
			EventSourceARN:         r.queueARN,
			EventSource:            "aws:sqs",
			AWSRegion:              r.region,
		}
	}
	return ev
}

func messageAttributes(in map[string]types.MessageAttributeValue) map[string]events.SQSMessageAttribute {
	out := make(map[string]events.SQSMessageAttribute, len(in))
	for k, v := range in {
		out[k] = events.SQSMessageAttribute{
			DataType:    aws.ToString(v.DataType),
			StringValue: v.StringValue,
			BinaryValue: v.BinaryValue,
			// Lambda sends empty lists, not null, for these.
			StringListValues: append([]string{}, v.StringListValues...),
			BinaryListValues: append([][]byte{}, v.BinaryListValues...),
		}
	}
	return out
}

// NewRequestID returns a random UUID, the form of Lambda's request ids.
func NewRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
