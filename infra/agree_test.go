package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/resources"
)

// The local runtime's resources, as the emulator reports them after
// localrun.Bootstrap, are the stack's: the same queues with the same
// timeouts and redrive, the same table keys, indexes and TTL. Names differ
// only by prefix (each test run has its own).
func TestLocalRuntimeAgreesWithStack(t *testing.T) {
	setup(t)
	cfg := emutest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	suffix := make([]byte, 4)
	rand.Read(suffix)
	local := resources.Define("infra-" + hex.EncodeToString(suffix))
	sq, db := sqs.NewFromConfig(cfg), dynamodb.NewFromConfig(cfg)
	t.Cleanup(func() { removeLocal(cfg, local) })
	if err := localrun.Bootstrap(ctx, cfg, local); err != nil {
		t.Fatalf("bootstrap local resources: %v", err)
	}

	// A local name and the stack's name for the same definition.
	stackName := func(localName string) string {
		return props.Prefix + strings.TrimPrefix(localName, local.Prefix)
	}
	for _, q := range local.Queues {
		for _, name := range []string{q.Name, q.DLQName} {
			t.Run(name, func(t *testing.T) {
				got := queueAttributes(ctx, t, sq, name)
				_, want := template.find(t, "AWS::SQS::Queue", "QueueName", stackName(name))
				for _, a := range []string{"VisibilityTimeout", "MessageRetentionPeriod"} {
					if num(got[a]) != num(want.Properties[a]) {
						t.Errorf("%s: local %s, stack %v", a, got[a], want.Properties[a])
					}
				}
				redrive, hasRedrive := want.Properties["RedrivePolicy"].(map[string]any)
				if (got["RedrivePolicy"] != "") != hasRedrive {
					t.Fatalf("local redrive %q, stack %v", got["RedrivePolicy"], want.Properties["RedrivePolicy"])
				}
				if !hasRedrive {
					return
				}
				var localRedrive struct {
					Target          string `json:"deadLetterTargetArn"`
					MaxReceiveCount any    `json:"maxReceiveCount"`
				}
				if err := json.Unmarshal([]byte(got["RedrivePolicy"]), &localRedrive); err != nil {
					t.Fatal(err)
				}
				if num(localRedrive.MaxReceiveCount) != num(redrive["maxReceiveCount"]) {
					t.Errorf("maxReceiveCount: local %v, stack %v", localRedrive.MaxReceiveCount, redrive["maxReceiveCount"])
				}
				localDLQ := localRedrive.Target[strings.LastIndex(localRedrive.Target, ":")+1:]
				stackDLQ := template.Resources[refID(redrive["deadLetterTargetArn"])].Properties["QueueName"]
				if stackName(localDLQ) != stackDLQ {
					t.Errorf("DLQ: local %s, stack %v", localDLQ, stackDLQ)
				}
			})
		}
	}

	t.Run("table", func(t *testing.T) {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &local.Table.Name})
		if err != nil {
			t.Fatal(err)
		}
		_, want := template.find(t, "AWS::DynamoDB::Table", "TableName", stackName(local.Table.Name))
		got := map[string]any{"KeySchema": out.Table.KeySchema, "AttributeDefinitions": out.Table.AttributeDefinitions}
		var gsis []map[string]any
		for _, g := range out.Table.GlobalSecondaryIndexes {
			gsis = append(gsis, map[string]any{"IndexName": g.IndexName, "KeySchema": g.KeySchema, "Projection": g.Projection})
		}
		got["GlobalSecondaryIndexes"] = gsis
		for _, k := range []string{"KeySchema", "AttributeDefinitions", "GlobalSecondaryIndexes"} {
			if g, w := canonical(t, got[k]), canonical(t, want.Properties[k]); g != w {
				t.Errorf("%s:\nlocal %s\nstack %s", k, g, w)
			}
		}
		ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &local.Table.Name})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := aws.ToString(ttl.TimeToLiveDescription.AttributeName), want.Properties["TimeToLiveSpecification"].(map[string]any)["AttributeName"]; got != want {
			t.Errorf("TTL attribute: local %s, stack %v", got, want)
		}
	})
}

func queueAttributes(ctx context.Context, t *testing.T, c *sqs.Client, name string) map[string]string {
	t.Helper()
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
	if err != nil {
		t.Fatalf("local queue %s: %v", name, err)
	}
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: url.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("local queue %s: %v", name, err)
	}
	return out.Attributes
}

// canonical is v as JSON with the SDK's and CloudFormation's spellings
// made the same and list order ignored, for comparing the two.
func canonical(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	var walk func(any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, x := range v {
				if x == nil {
					continue // the SDK's unset optional fields
				}
				out[k] = walk(x)
			}
			return out
		case []any:
			var items []string
			for _, x := range v {
				b, _ := json.Marshal(walk(x))
				items = append(items, string(b))
			}
			slices.Sort(items)
			return items
		}
		return v
	}
	b, _ = json.Marshal(walk(generic))
	return string(b)
}

// removeLocal deletes what Bootstrap created, so a shared emulator keeps
// nothing of this test.
func removeLocal(cfg aws.Config, set resources.Set) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sq := sqs.NewFromConfig(cfg)
	for _, q := range set.Queues {
		for _, name := range []string{q.Name, q.DLQName} {
			if url, err := sq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name}); err == nil {
				sq.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: url.QueueUrl})
			}
		}
	}
	dynamodb.NewFromConfig(cfg).DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &set.Table.Name})
	s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true }).DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &set.Bucket})
	scheduler.NewFromConfig(cfg).DeleteScheduleGroup(ctx, &scheduler.DeleteScheduleGroupInput{Name: &set.ScheduleGroup})
}
