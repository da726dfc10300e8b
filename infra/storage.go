package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/resources"
)

// Storage is the DynamoDB table and the S3 bucket: the service's state.
type Storage struct {
	Scope  constructs.Construct
	Table  awsdynamodb.Table
	Bucket awss3.Bucket
	def    resources.Set
	// locked says the audit trail's objects are put under Object Lock
	// (RelayProps.AuditObjectLock).
	locked bool
}

// abortUploadsAfter ends multipart uploads (presigned or SDK) that never
// completed, which would otherwise be billed forever and never listed.
const abortUploadsAfter = 1 // day

func NewStorage(scope constructs.Construct, props RelayProps) *Storage {
	c := constructs.NewConstruct(scope, jsii.String("Storage"))
	set := props.Set()

	removal := props.RemovalPolicy()

	attr := func(name string) *awsdynamodb.Attribute {
		return &awsdynamodb.Attribute{Name: jsii.String(name), Type: awsdynamodb.AttributeType_STRING}
	}
	table := awsdynamodb.NewTable(c, jsii.String("Table"), &awsdynamodb.TableProps{
		TableName:           jsii.String(set.Table.Name),
		PartitionKey:        attr(set.Table.PartitionKey),
		SortKey:             attr(set.Table.SortKey),
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String(set.Table.TTLAttribute),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		DeletionProtection: jsii.Bool(props.DeletionProtection),
		RemovalPolicy:      removal,
	})
	for _, ix := range set.Table.Indexes {
		table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:      jsii.String(ix.Name),
			PartitionKey:   attr(ix.PartitionKey),
			SortKey:        attr(ix.SortKey),
			ProjectionType: awsdynamodb.ProjectionType_ALL,
		})
	}
	stableID(table, "Table")

	var lifecycle []*awss3.LifecycleRule
	for _, r := range set.BucketExpiry() {
		rule := &awss3.LifecycleRule{
			Id:         jsii.String(r.ID),
			Expiration: awscdk.Duration_Days(jsii.Number(r.After.Hours() / 24)),
		}
		if r.Prefix != "" {
			rule.Prefix = jsii.String(r.Prefix)
		}
		if r.TagValue != "" {
			rule.TagFilters = &map[string]any{resources.ExpiryTag: r.TagValue}
		}
		lifecycle = append(lifecycle, rule)
	}
	lifecycle = append(lifecycle, &awss3.LifecycleRule{
		Id:                                  jsii.String("abort-incomplete-uploads"),
		AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(abortUploadsAfter)),
	})
	locked := props.AuditObjectLock != ""
	var lockOn *bool // unset, not false: a stack without the option is as before
	if locked {
		lockOn = jsii.Bool(true)
		// Object Lock versions the bucket: an expiry or a delete leaves the
		// object's data as a noncurrent version, gone a day later (a locked
		// audit version only once its retention ends).
		lifecycle = append(lifecycle, &awss3.LifecycleRule{
			Id:                          jsii.String("noncurrent-versions"),
			NoncurrentVersionExpiration: awscdk.Duration_Days(jsii.Number(1)),
		})
	}

	bucket := awss3.NewBucket(c, jsii.String("Bucket"), &awss3.BucketProps{
		// Bucket names are global: the account and region make the local
		// runtime's name unique.
		BucketName:        jsii.String(set.Bucket + "-" + *awscdk.Aws_ACCOUNT_ID() + "-" + *awscdk.Aws_REGION()),
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		LifecycleRules:    &lifecycle,
		// docs/runbook.md "Audit trail": the audit objects' own retention.
		ObjectLockEnabled: lockOn,
		Versioned:         lockOn,
		// The panel uploads big files straight to S3 with a presigned PUT.
		Cors: &[]*awss3.CorsRule{{
			AllowedMethods: &[]awss3.HttpMethods{awss3.HttpMethods_PUT, awss3.HttpMethods_GET},
			AllowedOrigins: jsii.Strings(props.CORSOrigins...),
			AllowedHeaders: jsii.Strings("*"),
			ExposedHeaders: jsii.Strings("ETag"),
			MaxAge:         jsii.Number(3000),
		}},
		RemovalPolicy: removal,
	})
	stableID(bucket, "Bucket")

	return &Storage{Scope: c, Table: table, Bucket: bucket, def: set, locked: locked}
}

// GrantTable lets role read and write items of the table and query its
// indexes, each named: no wildcard over indexes that do not exist.
func (s *Storage) GrantTable(role awsiam.IRole) {
	arns := []*string{s.Table.TableArn()}
	for _, ix := range s.def.Table.Indexes {
		arns = append(arns, jsii.String(*s.Table.TableArn()+"/index/"+ix.Name))
	}
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings(
			"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query",
			"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
			"dynamodb:BatchWriteItem", "dynamodb:ConditionCheckItem", "dynamodb:DescribeTable",
		),
		Resources: &arns,
	}))
}

// GrantBucket lets role read, write, tag and delete objects and list the
// bucket (ListBucket also turns a missing key's 403 into a 404).
func (s *Storage) GrantBucket(role awsiam.IRole) {
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings(
			"s3:GetObject", "s3:PutObject", "s3:DeleteObject",
			"s3:PutObjectTagging", "s3:DeleteObjectTagging", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
		),
		Resources: jsii.Strings(*s.Bucket.ArnForObjects(jsii.String("*"))),
	}))
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("s3:ListBucket"),
		Resources: jsii.Strings(*s.Bucket.BucketArn()),
	}))
	if s.locked {
		// A put with a retention needs it; only audit objects get one.
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings("s3:PutObjectRetention"),
			Resources: jsii.Strings(*s.Bucket.ArnForObjects(jsii.String(audit.Prefix + "*"))),
		}))
	}
}

// stableID pins the CloudFormation logical id of a stateful resource, so
// that moving its construct in the tree never replaces it (and its data).
func stableID(c constructs.IConstruct, id string) {
	c.Node().DefaultChild().(awscdk.CfnResource).OverrideLogicalId(jsii.String(id))
}
