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
	"github.com/relaybatch/relay/internal/apikey"
)

// Keys live at KEY#<sha256>/KEY for lookup, with an index entry under the
// KEYS partition (sk = key id) so they can be listed without a scan.
const keysPK = "KEYS"

// GetKey implements auth.Store. Its errors name the key by its public id,
// never by the hash the table is keyed on, since errors end up in logs.
func (s *Store) GetKey(ctx context.Context, hash string) (apikey.Key, error) {
	var k apikey.Key
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.Table, Key: key(keyPK(hash), "KEY"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return k, fmt.Errorf("get key %s: %w", hash[:min(12, len(hash))], err)
	}
	if out.Item == nil {
		return k, apikey.ErrNoKey
	}
	if err := attributevalue.UnmarshalMap(out.Item, &k); err != nil {
		return k, fmt.Errorf("unmarshal key %s: %w", hash[:min(12, len(hash))], err)
	}
	return k, nil
}

func keyPK(hash string) string { return "KEY#" + hash }

// keyItems are a key's two items: main at KEY#<hash>/KEY, which GetKey
// reads, and idx at KEYS/<key id>, which ListKeys lists.
func keyItems(k apikey.Key) (main, idx item, err error) {
	it, err := attributevalue.MarshalMap(k)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	main, idx = item{}, item{}
	for n, v := range it {
		main[n], idx[n] = v, v
	}
	for n, v := range key(keyPK(k.Hash), "KEY") {
		main[n] = v
	}
	for n, v := range key(keysPK, k.ID) {
		idx[n] = v
	}
	return main, idx, nil
}

// PutKey implements auth.Store.
func (s *Store) PutKey(ctx context.Context, k apikey.Key) error {
	main, idx, err := keyItems(k)
	if err != nil {
		return err
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &s.Table, Item: main}},
		{Put: &types.Put{TableName: &s.Table, Item: idx}},
	}})
	if err != nil {
		return fmt.Errorf("put key %s: %w", k.ID, err)
	}
	return nil
}

// ListKeys implements auth.Store.
func (s *Store) ListKeys(ctx context.Context) ([]apikey.Key, error) {
	var ks []apikey.Key
	_, err := s.page(ctx, keysPK, "", "", true, 1<<30, nil, func(it item) error {
		var k apikey.Key
		if err := attributevalue.UnmarshalMap(it, &k); err != nil {
			return err
		}
		ks = append(ks, k)
		return nil
	})
	return ks, err
}

// KeyByID returns the key whose public id is id, apikey.ErrNoKey when there
// is none: templates check the key that created them at every firing.
func (s *Store) KeyByID(ctx context.Context, id string) (apikey.Key, error) {
	var k apikey.Key
	if id == "" {
		return k, apikey.ErrNoKey
	}
	if _, err := s.get(ctx, keysPK, id, &k); err != nil {
		if errors.Is(err, errMissing) {
			return k, apikey.ErrNoKey
		}
		return k, err
	}
	return k, nil
}

// DisableKey implements auth.Store; id is the key id or the key itself.
func (s *Store) DisableKey(ctx context.Context, id string) error {
	if len(id) > 12 {
		// A key itself: a rotated key's id is not its secret's hash.
		k, err := s.GetKey(ctx, apikey.Hash(id))
		if err != nil {
			return err
		}
		id = k.ID
	}
	return s.setKeyFlag(ctx, id, "disabled", true)
}

// keyFlagTries bounds how often setKeyFlag reads a key again that a
// rotation changed under it.
const keyFlagTries = 5

// setKeyFlag sets the boolean attribute name (disabled, tenant_disabled)
// of key id on both its items, the id's and its current secret's, while
// the id's still names the secret read: a rotation in between makes it read
// the key again. It writes that attribute alone, so a disable, a tenant's
// and a rotation never write back what another changed (docs/design.md
// "Conflicts and ambiguous writes"); a retry of a write that took effect
// sets it again.
func (s *Store) setKeyFlag(ctx context.Context, id, name string, v bool) error {
	for try := 1; ; try++ {
		k, err := s.KeyByID(ctx, id)
		if err != nil {
			return err
		}
		set := func(pk, sk, cond string, values item) types.TransactWriteItem {
			values[":v"] = &types.AttributeValueMemberBOOL{Value: v}
			return types.TransactWriteItem{Update: &types.Update{TableName: &s.Table, Key: key(pk, sk),
				UpdateExpression: aws.String("SET #f = :v"), ConditionExpression: aws.String(cond),
				ExpressionAttributeNames: map[string]string{"#f": name, "#h": "hash"}, ExpressionAttributeValues: values}}
		}
		err = s.transact(ctx, "", []types.TransactWriteItem{
			set(keysPK, id, "#h = :h", item{":h": avS(k.Hash)}),
			set(keyPK(k.Hash), "KEY", "#h = :h", item{":h": avS(k.Hash)}),
		})
		if _, failed := conditionFailed(err); failed && try < keyFlagTries {
			continue // rotated meanwhile
		}
		if err != nil {
			return fmt.Errorf("set %s=%v on key %s: %w", name, v, id, err)
		}
		return nil
	}
}

// RotateKey implements auth.Store: in one transaction, next's two items
// (its secret's new, the id's replaced, on condition it still names old's
// secret and neither the key nor its tenant was disabled since old was
// read: next copies old's state) and old's secret marked replaced until
// `until`, expiring from the table a day later. A write refused or failed
// after an earlier try took effect is recognized by the id's item naming
// next's secret.
func (s *Store) RotateKey(ctx context.Context, old, next apikey.Key, until time.Time) error {
	main, idx, err := keyItems(next)
	if err != nil {
		return err
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &s.Table, Item: main, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
		{Put: &types.Put{TableName: &s.Table, Item: idx,
			ConditionExpression:      aws.String("#h = :old AND " + flagIs("disabled", old.Disabled) + " AND " + flagIs("tenant_disabled", old.TenantDisabled)),
			ExpressionAttributeNames: map[string]string{"#h": "hash"},
			ExpressionAttributeValues: item{":old": avS(old.Hash),
				":true": &types.AttributeValueMemberBOOL{Value: true}, ":false": &types.AttributeValueMemberBOOL{Value: false}}}},
		{Update: &types.Update{TableName: &s.Table, Key: key(keyPK(old.Hash), "KEY"),
			UpdateExpression:          aws.String("SET replaced_until = :u, #ttl = :ttl"),
			ConditionExpression:       aws.String("attribute_exists(pk)"),
			ExpressionAttributeNames:  map[string]string{"#ttl": "ttl"},
			ExpressionAttributeValues: item{":u": avN64(until.Unix()), ":ttl": avN64(until.Add(24 * time.Hour).Unix())}}},
	}})
	if err == nil {
		return nil
	}
	if now, rerr := s.KeyByID(ctx, old.ID); rerr == nil && now.Hash == next.Hash {
		return nil // an ambiguous try took effect
	}
	if _, failed := conditionFailed(err); failed {
		return fmt.Errorf("key %s was rotated or changed meanwhile: %w", old.ID, errConflict)
	}
	return fmt.Errorf("rotate key %s: %w", old.ID, err)
}

// flagIs is a condition on the boolean attribute name being v, false
// when it is missing (omitempty).
func flagIs(name string, v bool) string {
	if v {
		return name + " = :true"
	}
	return "(attribute_not_exists(" + name + ") OR " + name + " = :false)"
}

type tenantRecord struct {
	WebhookSecret string `dynamodbav:"webhook_secret"`
	Disabled      bool   `dynamodbav:"disabled,omitempty"`
}

// FollowTenant implements auth.Store: key k's two items marked
// tenant_disabled in one transaction with the check that its tenant is
// disabled, so an enable in between (which lists the keys after it writes
// the tenant) never leaves a new key refused.
func (s *Store) FollowTenant(ctx context.Context, k apikey.Key) (bool, error) {
	mark := func(pk, sk string) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{TableName: &s.Table, Key: key(pk, sk),
			UpdateExpression: aws.String("SET tenant_disabled = :true"), ConditionExpression: aws.String("#h = :h"),
			ExpressionAttributeNames:  map[string]string{"#h": "hash"},
			ExpressionAttributeValues: item{":true": &types.AttributeValueMemberBOOL{Value: true}, ":h": avS(k.Hash)}}}
	}
	err := s.transact(ctx, "", []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{TableName: &s.Table, Key: key(tenantPK(k.Tenant), "TENANT"),
			ConditionExpression:       aws.String("disabled = :true"),
			ExpressionAttributeValues: item{":true": &types.AttributeValueMemberBOOL{Value: true}}}},
		mark(keysPK, k.ID),
		mark(keyPK(k.Hash), "KEY"),
	})
	if i, failed := conditionFailed(err); failed && i == 0 {
		return false, nil // the tenant is not disabled
	}
	if err != nil {
		return false, fmt.Errorf("mark key %s with its tenant %s: %w", k.ID, k.Tenant, err)
	}
	return true, nil
}

// SetTenantDisabled disables (or enables) tenant: its record first, then
// every key of it (auth.Create marks a key it wrote on condition of the
// record, so a key made meanwhile is caught by one side). It returns the keys changed.
// A disabled tenant's keys are refused at the API (tenant_disabled), and
// its batches and templates stop as a disabled key's do.
func (s *Store) SetTenantDisabled(ctx context.Context, tenant string, disabled bool) (int, error) {
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(tenantPK(tenant), "TENANT"),
		UpdateExpression:          aws.String("SET disabled = :d"),
		ExpressionAttributeValues: item{":d": &types.AttributeValueMemberBOOL{Value: disabled}},
	})
	if err != nil {
		return 0, fmt.Errorf("set tenant %s disabled=%v: %w", tenant, disabled, err)
	}
	ks, err := s.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range ks {
		if k.Tenant != tenant || k.TenantDisabled == disabled {
			continue
		}
		if err := s.setKeyFlag(ctx, k.ID, "tenant_disabled", disabled); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// WebhookSecret implements auth.Store: the tenant's secret, or fresh set
// by one write that keeps a secret set meanwhile.
func (s *Store) WebhookSecret(ctx context.Context, tenant string, fresh func() string) (string, error) {
	var t tenantRecord
	_, err := s.get(ctx, tenantPK(tenant), "TENANT", &t)
	if err == nil && t.WebhookSecret != "" {
		return t.WebhookSecret, nil
	}
	if err != nil && !errors.Is(err, errMissing) {
		return "", err
	}
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(tenantPK(tenant), "TENANT"),
		UpdateExpression:          aws.String("SET webhook_secret = if_not_exists(webhook_secret, :s)"),
		ExpressionAttributeValues: item{":s": avS(fresh())},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		return "", fmt.Errorf("webhook secret of %s: %w", tenant, err)
	}
	if err := attributevalue.UnmarshalMap(out.Attributes, &t); err != nil {
		return "", fmt.Errorf("unmarshal tenant %s: %w", tenant, err)
	}
	return t.WebhookSecret, nil
}
