package store

import (
	"context"
	"errors"
	"fmt"

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
		id = apikey.Hash(id)[:12]
	}
	k, err := s.KeyByID(ctx, id)
	if err != nil {
		return err
	}
	k.Disabled = true
	return s.PutKey(ctx, k)
}

type tenantRecord struct {
	WebhookSecret string `dynamodbav:"webhook_secret"`
}

// WebhookSecret implements auth.Store.
func (s *Store) WebhookSecret(ctx context.Context, tenant string, fresh func() string) (string, error) {
	var t tenantRecord
	_, err := s.get(ctx, tenantPK(tenant), "TENANT", &t)
	if err == nil && t.WebhookSecret != "" {
		return t.WebhookSecret, nil
	}
	if err != nil && !errors.Is(err, errMissing) {
		return "", err
	}
	t.WebhookSecret = fresh()
	if err := s.put(ctx, tenantPK(tenant), "TENANT", t, nil, true); errors.Is(err, errConflict) {
		// Someone created it first: theirs wins.
		return s.WebhookSecret(ctx, tenant, fresh)
	} else if err != nil {
		return "", err
	}
	return t.WebhookSecret, nil
}
