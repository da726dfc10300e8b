// Package queue is the SQS adapter: JSON messages sent to the service's
// queues by name. URLs are resolved once with GetQueueUrl, so functions
// need only the resource prefix, locally and in AWS alike.
package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Sender sends to the queues of one deployment.
type Sender struct {
	SQS    *sqs.Client
	Prefix string

	mu   sync.Mutex
	urls map[string]string
}

// URL returns the URL of queue prefix-name.
func (s *Sender) URL(ctx context.Context, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.urls[name]; ok {
		return u, nil
	}
	full := s.Prefix + "-" + name
	out, err := s.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &full})
	if err != nil {
		return "", fmt.Errorf("queue %s: %w", full, err)
	}
	if s.urls == nil {
		s.urls = map[string]string{}
	}
	s.urls[name] = aws.ToString(out.QueueUrl)
	return s.urls[name], nil
}

// MaxDelay is SQS's longest DelaySeconds.
const MaxDelay = 15 * time.Minute

// Delay is d in whole seconds rounded up (a message must not come back
// before it is due), at most MaxDelay.
func Delay(d time.Duration) time.Duration {
	return min((d + time.Second - 1).Truncate(time.Second), MaxDelay)
}

// Send sends v as JSON to queue name after delay (at most MaxDelay).
func (s *Sender) Send(ctx context.Context, name string, v any, delay time.Duration) error {
	return s.SendBatch(ctx, name, []any{v}, delay)
}

// SendBatch sends each of vs, ten per request.
func (s *Sender) SendBatch(ctx context.Context, name string, vs []any, delay time.Duration) error {
	url, err := s.URL(ctx, name)
	if err != nil {
		return err
	}
	delay = min(delay, MaxDelay)
	for len(vs) > 0 {
		n := min(len(vs), 10)
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i, v := range vs[:n] {
			body, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("encode message for %s: %w", name, err)
			}
			entries[i] = types.SendMessageBatchRequestEntry{
				Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(string(body)), DelaySeconds: int32(delay / time.Second),
			}
		}
		out, err := s.SQS.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries})
		if err != nil {
			return fmt.Errorf("send to %s: %w", name, err)
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("send to %s: %d of %d failed: %s", name, len(out.Failed), n, aws.ToString(out.Failed[0].Message))
		}
		vs = vs[n:]
	}
	return nil
}

// ExtendVisibility keeps a received message hidden for another d.
func (s *Sender) ExtendVisibility(ctx context.Context, name, receipt string, d time.Duration) error {
	url, err := s.URL(ctx, name)
	if err != nil {
		return err
	}
	_, err = s.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &url, ReceiptHandle: &receipt, VisibilityTimeout: int32(d / time.Second),
	})
	if err != nil {
		return fmt.Errorf("extend visibility on %s: %w", name, err)
	}
	return nil
}
