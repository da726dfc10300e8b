package emulator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/relaybatch/relay/internal/resources"
)

// CreateTable creates table t as internal/resources defines it (keys,
// indexes, TTL) on the emulator, and waits until it exists; a table that
// is already there is left as it is. The local runtime's bootstrap and the
// store's emulator tests use it.
func CreateTable(ctx context.Context, db *dynamodb.Client, t resources.Table) error {
	attrs := map[string]bool{t.PartitionKey: true, t.SortKey: true}
	in := &dynamodb.CreateTableInput{
		TableName:   &t.Name,
		BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: &t.PartitionKey, KeyType: types.KeyTypeHash},
			{AttributeName: &t.SortKey, KeyType: types.KeyTypeRange},
		},
	}
	for _, ix := range t.Indexes {
		attrs[ix.PartitionKey], attrs[ix.SortKey] = true, true
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName: aws.String(ix.Name),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(ix.PartitionKey), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(ix.SortKey), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		})
	}
	for a := range attrs {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(a), AttributeType: types.ScalarAttributeTypeS,
		})
	}
	_, err := db.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if errors.As(err, &inUse) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &t.Name}, 30*time.Second); err != nil {
		return fmt.Errorf("wait for table %s: %w", t.Name, err)
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &t.Name,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: &t.TTLAttribute, Enabled: aws.Bool(true)},
	})
	if err != nil {
		return fmt.Errorf("enable TTL on %s: %w", t.Name, err)
	}
	return nil
}
