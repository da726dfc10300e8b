// Package store is the DynamoDB adapter: one table (docs/design.md "Data layout"), items
// keyed by tenant so that no query can reach another tenant's records.
// Records updated through a closure carry a version attribute and are
// written back with a condition on it, so concurrent writers never lose
// each other's changes.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/relaybatch/relay/internal/backoff"
)

// Store is the table.
type Store struct {
	DB    *dynamodb.Client
	Table string
}

// New returns a Store on table.
func New(db *dynamodb.Client, table string) *Store { return &Store{DB: db, Table: table} }

var errMissing = errors.New("store: item not found")

// errConflict means the item changed under a conditional write; update retries.
var errConflict = errors.New("store: item changed concurrently")

type item = map[string]types.AttributeValue

func key(pk, sk string) item {
	return item{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}
}

func tenantPK(tenant string) string { return "T#" + tenant }

// put writes v at (pk, sk) with extra attributes; ifAbsent makes it a create.
func (s *Store) put(ctx context.Context, pk, sk string, v any, extra item, ifAbsent bool) error {
	it, err := itemAt(pk, sk, v, extra)
	if err != nil {
		return err
	}
	in := &dynamodb.PutItemInput{TableName: &s.Table, Item: it}
	if ifAbsent {
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	}
	if _, err := s.DB.PutItem(ctx, in); err != nil {
		var cf *types.ConditionalCheckFailedException
		if errors.As(err, &cf) {
			return errConflict
		}
		return fmt.Errorf("put %s/%s: %w", pk, sk, err)
	}
	return nil
}

// get reads (pk, sk) into v, errMissing if absent; it returns the version.
func (s *Store) get(ctx context.Context, pk, sk string, v any) (int64, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.Table, Key: key(pk, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("get %s/%s: %w", pk, sk, err)
	}
	if out.Item == nil {
		return 0, errMissing
	}
	ver, err := fromItem(out.Item, v)
	if err != nil {
		return 0, fmt.Errorf("unmarshal %s/%s: %w", pk, sk, err)
	}
	return ver, nil
}

// itemAt is v's item at (pk, sk), with extra attributes (which win over
// v's own): what put writes.
func itemAt(pk, sk string, v any, extra item) (item, error) {
	it, err := attributevalue.MarshalMap(v)
	if err != nil {
		return nil, fmt.Errorf("marshal %s/%s: %w", pk, sk, err)
	}
	for k, a := range key(pk, sk) {
		it[k] = a
	}
	for k, a := range extra {
		it[k] = a
	}
	return it, nil
}

// fromItem decodes an item into v and returns its version, 0 when it has
// none: what get reads. Attributes v has no field for (the keys, the GSI
// attributes, ver) are ignored.
func fromItem(it item, v any) (int64, error) {
	if err := attributevalue.UnmarshalMap(it, v); err != nil {
		return 0, err
	}
	var ver int64
	if a, ok := it["ver"]; ok {
		_ = attributevalue.Unmarshal(a, &ver)
	}
	return ver, nil
}

// update reads (pk, sk) into a T, applies fn and writes it back only if no
// one else wrote in between; on a conflict it starts over.
func update[T any](ctx context.Context, s *Store, pk, sk string, extra func(*T) item, fn func(*T) error) (T, error) {
	for attempt := 0; ; attempt++ {
		var v T
		ver, err := s.get(ctx, pk, sk, &v)
		if err != nil {
			return v, err
		}
		if err := fn(&v); err != nil {
			return v, err
		}
		it, err := itemAt(pk, sk, v, nil)
		if err != nil {
			return v, err
		}
		if extra != nil {
			for k, a := range extra(&v) {
				it[k] = a
			}
		}
		it["ver"] = &types.AttributeValueMemberN{Value: fmt.Sprint(ver + 1)}
		cond := "attribute_not_exists(ver) OR ver = :v"
		_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &s.Table, Item: it, ConditionExpression: &cond,
			ExpressionAttributeValues: item{":v": &types.AttributeValueMemberN{Value: fmt.Sprint(ver)}},
		})
		var cf *types.ConditionalCheckFailedException
		if errors.As(err, &cf) && attempt < 20 {
			continue
		}
		var tc *types.TransactionConflictException
		if errors.As(err, &tc) && attempt < 20 {
			// The item is in an ongoing transaction (a commit's counts, a
			// finalize's file check), which rejected the write: read it
			// again once that is over (docs/design.md "Conflicts and
			// ambiguous writes").
			if err := backoff.Sleep(ctx, backoff.Full(backoff.Exponential(attempt+1, 20*time.Millisecond, 20*time.Millisecond<<5))); err != nil {
				return v, err
			}
			continue
		}
		if err != nil {
			return v, fmt.Errorf("update %s/%s: %w", pk, sk, err)
		}
		return v, nil
	}
}

// page queries pk for sort keys beginning with prefix, newest (highest sk)
// first unless asc, starting after the sort key `after`, returning up to
// limit items and whether more exist.
func (s *Store) page(ctx context.Context, pk, prefix, after string, asc bool, limit int, filter *queryFilter, each func(item) error) (bool, error) {
	in := &dynamodb.QueryInput{
		TableName:              &s.Table,
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: item{
			":pk": &types.AttributeValueMemberS{Value: pk},
			":p":  &types.AttributeValueMemberS{Value: prefix},
		},
		ScanIndexForward: aws.Bool(asc),
		ConsistentRead:   aws.Bool(true),
	}
	if prefix == "" {
		// DynamoDB refuses an empty string in a key condition.
		in.KeyConditionExpression = aws.String("pk = :pk")
		delete(in.ExpressionAttributeValues, ":p")
	}
	if filter != nil {
		in.FilterExpression = &filter.expr
		in.ExpressionAttributeNames = filter.names
		for k, v := range filter.values {
			in.ExpressionAttributeValues[k] = v
		}
	}
	if after != "" {
		in.ExclusiveStartKey = key(pk, after)
	}
	n := 0
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return false, fmt.Errorf("query %s %s: %w", pk, prefix, err)
		}
		for _, it := range out.Items {
			if n == limit {
				return true, nil
			}
			if err := each(it); err != nil {
				return false, err
			}
			n++
		}
		if out.LastEvaluatedKey == nil {
			return false, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

type queryFilter struct {
	expr   string
	names  map[string]string
	values item
}

func (s *Store) delete(ctx context.Context, pk, sk string) error {
	_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.Table, Key: key(pk, sk)})
	if err != nil {
		return fmt.Errorf("delete %s/%s: %w", pk, sk, err)
	}
	return nil
}
