// Package msg is what travels on the dispatch, work and finalize queues
// (docs/design.md "Message types": who sends each type, and what its
// handler does).
package msg

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/relaybatch/relay/internal/batch"
)

// Message is one queue message.
type Message struct {
	Type   string `json:"type"` // one of the types below
	Tenant string `json:"tenant,omitempty"`
	Batch  string `json:"batch_id,omitempty"`
	Chunk  int    `json:"chunk,omitempty"`
	// Run and Attempt name the claim a work message is for: a message of
	// another run than the chunk's is stale and dropped.
	Run     string `json:"run,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Retries counts the times a run went back to the queue after a
	// transient error (the executor's quick retries).
	Retries int `json:"retries,omitempty"`
}

// Message types, by the queue that carries them.
const (
	Plan     = "plan"     // dispatch; sent by internal/batches and the tick
	Drain    = "drain"    // dispatch; sent by internal/batches
	Tick     = "tick"     // dispatch; sent by the tick schedule
	Chunk    = "chunk"    // work
	Dead     = "dead"     // work DLQ
	Finalize = "finalize" // finalize
	// A native batch's steps (internal/native), work; Chunk names the
	// chunk group, Attempt a poll's number.
	NativeSubmit = "native_submit"
	NativePoll   = "native_poll"
)

// IsNative reports whether a message type is a native batch's step.
func IsNative(typ string) bool { return typ == NativeSubmit || typ == NativePoll }

// ForChunk is the work message of claim n.
func ForChunk(n batch.Next) Message {
	return Message{Type: Chunk, Tenant: n.Tenant, Batch: n.Batch, Chunk: n.Chunk, Run: n.Run, Attempt: n.Attempt}
}

// Each runs fn for every delivery and returns the IDs of the ones that
// failed (a partial batch failure), so SQS redelivers only those (and,
// after maxReceiveCount, moves them to the DLQ). A delivery that is not a
// Message is logged and dropped: retrying it cannot help.
func Each(ctx context.Context, log *slog.Logger, ds []Delivery, fn func(context.Context, Message) error) ([]string, error) {
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
