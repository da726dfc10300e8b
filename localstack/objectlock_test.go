package localstack

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
)

// An audit object put under Object Lock (blob.Store.PutLocked, what the
// functions do with -c auditObjectLock=…, docs/runbook.md "Audit trail")
// carries its retention, and its version cannot be deleted before it ends.
func TestAuditObjectLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := s3.NewFromConfig(emutest.Config(t), func(o *s3.Options) { o.UsePathStyle = true })
	bucket := fmt.Sprintf("relay-lock-%d", time.Now().UnixNano())
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket, ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(30 * 24 * time.Hour).UTC().Truncate(time.Second)
	key := "audit/20261202-x/000000000001.jsonl"
	if err := blob.New(client, bucket).PutLocked(ctx, key, []byte(`{"chain":"x"}`+"\n"), "COMPLIANCE", until); err != nil {
		t.Fatal(err)
	}
	head, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	if string(head.ObjectLockMode) != "COMPLIANCE" || !aws.ToTime(head.ObjectLockRetainUntilDate).Equal(until) {
		t.Fatalf("object lock %q until %v, want COMPLIANCE until %s", head.ObjectLockMode, head.ObjectLockRetainUntilDate, until)
	}
	if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key, VersionId: head.VersionId}); err == nil {
		t.Fatalf("version %s of a locked audit object deleted", aws.ToString(head.VersionId))
	}
}
