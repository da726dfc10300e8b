package engine

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
)

// eachMessage runs fn for every record and reports the ones that failed as
// partial batch failures, so SQS redelivers only those (and, after
// maxReceiveCount, moves them to the DLQ). A record that is not a Message
// is logged and dropped: retrying it cannot help.
func eachMessage(ctx context.Context, log *slog.Logger, ev events.SQSEvent, fn func(context.Context, Message) error) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	for _, rec := range ev.Records {
		var m Message
		if err := json.Unmarshal([]byte(rec.Body), &m); err != nil {
			log.ErrorContext(ctx, "undecodable message dropped", "message_id", rec.MessageId, "err", err)
			continue
		}
		if err := fn(ctx, m); err != nil {
			log.ErrorContext(ctx, "message failed", "message_id", rec.MessageId, "type", m.Type,
				"batch_id", m.Batch, "chunk", m.Chunk, "receive_count", rec.Attributes["ApproximateReceiveCount"], "err", err)
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
		}
	}
	return resp, nil
}
