package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Reservation is what a batch reserved of its tenant's budget at create
// (docs/api.md "Budgets, revocation and allow-lists", reservations): its
// quote's tokens and USD, over Rows rows.
type Reservation struct {
	Tokens    int64   `dynamodbav:"tokens"`
	USD       float64 `dynamodbav:"usd"`
	Rows      int     `dynamodbav:"rows"`
	CreatedAt int64   `dynamodbav:"created_at"`
}

// Reservations are a tenant's batches' reservations by batch id: the item
// T#<tenant>/RESERVATIONS, written under its version so that two creates
// cannot both take the room that fits one.
type Reservations struct {
	Batches map[string]Reservation `dynamodbav:"batches"`
}

// ErrUnchanged ends an UpdateReservations whose fn has nothing to write.
var ErrUnchanged = errors.New("store: reservations unchanged")

// UpdateReservations reads tenant's reservations (none yet: empty), applies
// fn and writes them back only if no one wrote in between, else starts
// over. fn returning ErrUnchanged writes nothing and is no error.
func (s *Store) UpdateReservations(ctx context.Context, tenant string, fn func(*Reservations) error) error {
	pk, sk := tenantPK(tenant), "RESERVATIONS"
	for attempt := 0; ; attempt++ {
		var rs Reservations
		ver, err := s.get(ctx, pk, sk, &rs)
		missing := errors.Is(err, errMissing)
		if err != nil && !missing {
			return err
		}
		if rs.Batches == nil {
			rs.Batches = map[string]Reservation{}
		}
		if err := fn(&rs); err != nil {
			if errors.Is(err, ErrUnchanged) {
				return nil
			}
			return err
		}
		it, err := itemAt(pk, sk, rs, nil)
		if err != nil {
			return err
		}
		it["ver"] = &types.AttributeValueMemberN{Value: fmt.Sprint(ver + 1)}
		in := &dynamodb.PutItemInput{TableName: &s.Table, Item: it}
		if missing {
			in.ConditionExpression = aws.String("attribute_not_exists(pk)")
		} else {
			in.ConditionExpression = aws.String("ver = :v")
			in.ExpressionAttributeValues = item{":v": &types.AttributeValueMemberN{Value: fmt.Sprint(ver)}}
		}
		_, err = s.DB.PutItem(ctx, in)
		var cf *types.ConditionalCheckFailedException
		if errors.As(err, &cf) && attempt < 20 {
			continue
		}
		if err != nil {
			return fmt.Errorf("update reservations of %s: %w", tenant, err)
		}
		return nil
	}
}
