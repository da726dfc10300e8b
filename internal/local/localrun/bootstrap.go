package localrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	schtypes "github.com/aws/aws-sdk-go-v2/service/scheduler/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/resources"
)

// Check says which resource of env and set is missing on the endpoint in
// cfg, creating nothing: the table and bucket env names, set's queues and
// schedule group.
func Check(ctx context.Context, cfg aws.Config, env config.Env, set resources.Set) error {
	if _, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &env.Table}); err != nil {
		return fmt.Errorf("table %s: %w", env.Table, err)
	}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = env.S3PathStyle })
	if _, err := s3c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &env.Bucket}); err != nil {
		return fmt.Errorf("bucket %s: %w", env.Bucket, err)
	}
	sq := sqs.NewFromConfig(cfg)
	for _, q := range set.Queues {
		for _, name := range []string{q.Name, q.DLQName} {
			if _, err := sq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name}); err != nil {
				return fmt.Errorf("queue %s: %w", name, err)
			}
		}
	}
	if _, err := scheduler.NewFromConfig(cfg).GetScheduleGroup(ctx, &scheduler.GetScheduleGroupInput{Name: &set.ScheduleGroup}); err != nil {
		return fmt.Errorf("schedule group %s: %w", set.ScheduleGroup, err)
	}
	return nil
}

// Bootstrap creates the resources of set on the endpoint in cfg, from the
// same definitions the CDK stack uses. It is idempotent: what exists is kept.
func Bootstrap(ctx context.Context, cfg aws.Config, set resources.Set) error {
	if err := emulator.CreateTable(ctx, dynamodb.NewFromConfig(cfg), set.Table); err != nil {
		return err
	}
	if err := createBucket(ctx, s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true }), set.Bucket); err != nil {
		return err
	}
	sq := sqs.NewFromConfig(cfg)
	for _, q := range set.Queues {
		if err := createQueue(ctx, sq, q); err != nil {
			return err
		}
	}
	return createScheduleGroup(ctx, scheduler.NewFromConfig(cfg), set.ScheduleGroup)
}

// createScheduleGroup creates the group unless it exists. It looks first:
// the emulator answers CreateScheduleGroup of an existing group by
// replacing it, empty, where AWS answers ConflictException, so a restart
// on the same emulator would lose every template's schedule.
func createScheduleGroup(ctx context.Context, sch *scheduler.Client, name string) error {
	_, err := sch.GetScheduleGroup(ctx, &scheduler.GetScheduleGroupInput{Name: &name})
	var notFound *schtypes.ResourceNotFoundException
	if err == nil || !errors.As(err, &notFound) {
		if err != nil {
			return fmt.Errorf("get schedule group %s: %w", name, err)
		}
		return nil
	}
	_, err = sch.CreateScheduleGroup(ctx, &scheduler.CreateScheduleGroupInput{Name: &name})
	var conflict *schtypes.ConflictException
	if err != nil && !errors.As(err, &conflict) {
		return fmt.Errorf("create schedule group %s: %w", name, err)
	}
	return nil
}

func createBucket(ctx context.Context, c *s3.Client, name string) error {
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name})
	var owned *s3types.BucketAlreadyOwnedByYou
	var exists *s3types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	// The panel PUTs big files to presigned URLs from the API's origin.
	_, err = c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: &name, CORSConfiguration: &s3types.CORSConfiguration{
		CORSRules: []s3types.CORSRule{{
			AllowedMethods: []string{"PUT", "GET", "HEAD"}, AllowedOrigins: []string{"*"},
			AllowedHeaders: []string{"*"}, MaxAgeSeconds: aws.Int32(600),
		}},
	}})
	if err != nil {
		return fmt.Errorf("set CORS on bucket %s: %w", name, err)
	}
	return nil
}

func createQueue(ctx context.Context, c *sqs.Client, q resources.Queue) error {
	d := q.DLQ()
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: &d.Name,
		Attributes: map[string]string{
			string(sqstypes.QueueAttributeNameVisibilityTimeout):      seconds(d.VisibilityTimeout),
			string(sqstypes.QueueAttributeNameMessageRetentionPeriod): seconds(d.Retention),
		},
	})
	if err != nil {
		return fmt.Errorf("create queue %s: %w", q.DLQName, err)
	}
	arn, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: dlq.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return fmt.Errorf("describe queue %s: %w", q.DLQName, err)
	}
	redrive, _ := json.Marshal(map[string]any{
		"deadLetterTargetArn": arn.Attributes[string(sqstypes.QueueAttributeNameQueueArn)],
		"maxReceiveCount":     q.MaxReceiveCount,
	})
	attrs := map[string]string{
		string(sqstypes.QueueAttributeNameVisibilityTimeout):      seconds(q.VisibilityTimeout),
		string(sqstypes.QueueAttributeNameMessageRetentionPeriod): seconds(q.Retention),
		string(sqstypes.QueueAttributeNameRedrivePolicy):          string(redrive),
	}
	if _, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &q.Name, Attributes: attrs}); err != nil {
		// An existing queue with other attributes: bring it in line.
		url, gerr := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &q.Name})
		if gerr != nil {
			return fmt.Errorf("create queue %s: %w", q.Name, err)
		}
		if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: url.QueueUrl, Attributes: attrs}); err != nil {
			return fmt.Errorf("configure queue %s: %w", q.Name, err)
		}
	}
	return nil
}

func seconds(d time.Duration) string { return strconv.Itoa(int(d.Seconds())) }
