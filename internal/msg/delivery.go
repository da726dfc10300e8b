package msg

import "context"

// Delivery is one message as a queue-fed handler receives it, whatever
// carried it there: Lambda's SQS event (internal/lambdasqs converts it),
// the local event-source mapping, or a test.
type Delivery struct {
	// ID is the message id; a handler reports a failed delivery by it.
	ID   string
	Body string
	// ReceiptHandle is this receipt's handle, which extends the message's
	// visibility while it is handled; empty when the message was not
	// received from a queue (a test calling a handler directly).
	ReceiptHandle string
	// ReceiveCount is SQS's ApproximateReceiveCount: 1 on the first
	// delivery, more on a redelivery.
	ReceiveCount int
}

// Handler is a queue-fed function's handler. It returns the IDs of the
// deliveries that failed (a partial batch failure): those come back after
// the queue's visibility timeout, the others are deleted. A non-nil error
// fails every delivery of the batch.
type Handler func(ctx context.Context, ds []Delivery) (failed []string, err error)
