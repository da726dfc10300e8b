// Package lambdasqs is the one adapter between Lambda's SQS events
// (aws-lambda-go/events) and the queue handlers of the engine and the
// webhook service, which take []msg.Delivery and return the IDs of those
// that failed. The functions' main packages and the local runtime wrap
// their handlers with Handler; nothing else needs the events package.
package lambdasqs

import (
	"context"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/msg"
)

// receiveCountAttr is the record attribute that counts receives.
const receiveCountAttr = "ApproximateReceiveCount"

// Handler adapts h to an SQS-triggered Lambda handler with
// ReportBatchItemFailures: the IDs h returns become the response's batch
// item failures, and h's error fails the whole batch.
func Handler(h msg.Handler) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		failed, err := h(ctx, Deliveries(ev))
		if err != nil {
			return events.SQSEventResponse{}, err
		}
		return Response(failed), nil
	}
}

// Deliveries are the records of ev, in order.
func Deliveries(ev events.SQSEvent) []msg.Delivery {
	ds := make([]msg.Delivery, len(ev.Records))
	for i, r := range ev.Records {
		ds[i] = msg.Delivery{
			ID:            r.MessageId,
			Body:          r.Body,
			ReceiptHandle: r.ReceiptHandle,
			ReceiveCount:  ReceiveCount(r),
		}
	}
	return ds
}

// ReceiveCount is a record's ApproximateReceiveCount, 1 when it is absent
// or not a positive number: every record was received at least once.
func ReceiveCount(r events.SQSMessage) int {
	n, err := strconv.Atoi(r.Attributes[receiveCountAttr])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Response reports the failed message IDs as batch item failures, in
// order; no failure is an empty response (every record succeeded).
func Response(failed []string) events.SQSEventResponse {
	var resp events.SQSEventResponse
	for _, id := range failed {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
	}
	return resp
}
