package engine

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/relaybatch/relay/internal/queue"
)

// eachMessage runs fn for every delivery and returns the IDs of the ones
// that failed (a partial batch failure), so SQS redelivers only those
// (and, after maxReceiveCount, moves them to the DLQ). A delivery that is
// not a Message is logged and dropped: retrying it cannot help.
func eachMessage(ctx context.Context, log *slog.Logger, ds []queue.Delivery, fn func(context.Context, Message) error) ([]string, error) {
	var failed []string
	for _, d := range ds {
		var m Message
		if err := json.Unmarshal([]byte(d.Body), &m); err != nil {
			log.ErrorContext(ctx, "undecodable message dropped", "message_id", d.ID, "err", err)
			continue
		}
		if err := fn(ctx, m); err != nil {
			log.ErrorContext(ctx, "message failed", "message_id", d.ID, "type", m.Type,
				"batch_id", m.Batch, "chunk", m.Chunk, "receive_count", d.ReceiveCount, "err", err)
			failed = append(failed, d.ID)
		}
	}
	return failed, nil
}
