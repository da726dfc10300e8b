package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/relaybatch/relay/internal/ratelimit"
)

// Limits live in the table, not in a function's memory: the API runs as
// many Lambda instances at once, each with its own memory, so a counter in
// one of them would see a fraction of a key's requests (and start from zero
// on every cold start). One conditional or ADD update per decision keeps the
// count exact across all of them.
//
//	item                      pk                 sk                  notes
//	requests of a key         RL#<key id>        <unix second>       hits (ADD), ttl a minute later
//	batches in flight         T#<tenant>         INFLIGHT            inflight (ADD, conditional on < max)
//	one counted batch         T#<tenant>         INFLIGHT#<batch>    created_at; deleted with the decrement

// rateTTL is how long a request counter outlives its second, so TTL
// removes it without ever removing the current one.
const rateTTL = time.Minute

func rateKey(keyID string) string { return "RL#" + keyID }

// CountRequest adds one to the requests of the API key keyID in the second
// starting at unix time second, and returns the count so far: a fixed
// window of one second, one UpdateItem per request.
func (s *Store) CountRequest(ctx context.Context, keyID string, second int64) (int64, error) {
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.Table,
		Key:                       key(rateKey(keyID), strconv.FormatInt(second, 10)),
		UpdateExpression:          aws.String("ADD hits :one SET #ttl = :ttl"),
		ExpressionAttributeNames:  map[string]string{"#ttl": "ttl"},
		ExpressionAttributeValues: item{":one": avN(1), ":ttl": avN64(second + int64(rateTTL/time.Second))},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		return 0, fmt.Errorf("count request of key %s: %w", keyID, err)
	}
	var v struct {
		Hits int64 `dynamodbav:"hits"`
	}
	if err := attributevalue.UnmarshalMap(out.Attributes, &v); err != nil {
		return 0, fmt.Errorf("count request of key %s: %w", keyID, err)
	}
	return v.Hits, nil
}

// ErrInflightLimit means a tenant already has the most batches in flight.
var ErrInflightLimit = errors.New("store: too many batches in flight")

const (
	inflightSK     = "INFLIGHT"
	inflightPrefix = "INFLIGHT#"
)

// InflightMarker records that a batch holds one of its tenant's in-flight
// slots. The counter and the markers change together, in one transaction,
// so a slot is given back exactly once: by whoever deletes the marker.
type InflightMarker struct {
	Batch     string `dynamodbav:"batch_id"`
	CreatedAt int64  `dynamodbav:"created_at"`
}

// inflightMarkerItem is the marker of batchID's slot, taken at now.
func inflightMarkerItem(tenant, batchID string, now time.Time) item {
	return inflightPool.markerItem(tenant, batchID, now)
}

// slotPool is a per-tenant count of holders with a limit: a counter item
// and one marker item per holder (InflightMarker), changed together.
type slotPool struct {
	counterSK, markerPrefix, attr string
	full                          error // what a reserve past the limit returns
	what                          string
}

var (
	inflightPool = slotPool{inflightSK, inflightPrefix, "inflight", ErrInflightLimit, "in-flight slot"}
	templatePool = slotPool{templatesSK, templatePrefix, "templates", ErrTemplateLimit, "template slot"}
	webhookPool  = slotPool{webhooksSK, webhookPrefix, "webhooks", ErrWebhookLimit, "pending webhook slot"}
)

// markerItem is the marker of id's slot, taken at now.
func (p slotPool) markerItem(tenant, id string, now time.Time) item {
	marker := key(tenantPK(tenant), p.markerPrefix+id)
	marker["batch_id"] = avS(id)
	marker["created_at"] = avN64(now.Unix())
	return marker
}

// reserve takes one of tenant's slots for id, unless max are taken (p.full).
func (s *Store) reserve(ctx context.Context, p slotPool, tenant, id string, max int, now time.Time) error {
	_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                 &s.Table,
			Key:                       key(tenantPK(tenant), p.counterSK),
			UpdateExpression:          aws.String("ADD #n :one"),
			ConditionExpression:       aws.String("attribute_not_exists(#n) OR #n < :max"),
			ExpressionAttributeNames:  map[string]string{"#n": p.attr},
			ExpressionAttributeValues: item{":one": avN(1), ":max": avN(max)},
		}},
		{Put: &types.Put{TableName: &s.Table, Item: p.markerItem(tenant, id, now), ConditionExpression: aws.String("attribute_not_exists(pk)")}},
	}})
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		failed := func(i int) bool {
			return len(tc.CancellationReasons) > i && aws.ToString(tc.CancellationReasons[i].Code) == "ConditionalCheckFailed"
		}
		switch {
		case failed(1):
			return errHeld
		case failed(0):
			return p.full
		}
	}
	if err != nil {
		return fmt.Errorf("reserve %s of %s for %s: %w", p.what, tenant, id, err)
	}
	return nil
}

// errHeld means the id holds a slot of the pool already.
var errHeld = errors.New("store: slot already held")

// release gives back id's slot and reports whether this call did: an id
// that holds none (never counted, or given back already) changes nothing,
// so any number of calls decrement at most once.
func (s *Store) release(ctx context.Context, p slotPool, tenant, id string) (bool, error) {
	_, err := s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Delete: &types.Delete{
			TableName:           &s.Table,
			Key:                 key(tenantPK(tenant), p.markerPrefix+id),
			ConditionExpression: aws.String("attribute_exists(pk)"),
		}},
		{Update: &types.Update{
			TableName:                 &s.Table,
			Key:                       key(tenantPK(tenant), p.counterSK),
			UpdateExpression:          aws.String("ADD #n :minus"),
			ExpressionAttributeNames:  map[string]string{"#n": p.attr},
			ExpressionAttributeValues: item{":minus": avN(-1)},
		}},
	}})
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) && len(tc.CancellationReasons) > 0 && aws.ToString(tc.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("release %s of %s for %s: %w", p.what, tenant, id, err)
	}
	return true, nil
}

// markers lists the holders of tenant's slots.
func (s *Store) markers(ctx context.Context, p slotPool, tenant string) ([]InflightMarker, error) {
	var ms []InflightMarker
	_, err := s.page(ctx, tenantPK(tenant), p.markerPrefix, "", true, 1<<30, nil, func(it item) error {
		var m InflightMarker
		if err := attributevalue.UnmarshalMap(it, &m); err != nil {
			return err
		}
		ms = append(ms, m)
		return nil
	})
	return ms, err
}

// held returns how many of tenant's slots are taken.
func (s *Store) held(ctx context.Context, p slotPool, tenant string) (int, error) {
	var v map[string]any // the keys are strings, the count a number
	_, err := s.get(ctx, tenantPK(tenant), p.counterSK, &v)
	if errors.Is(err, errMissing) {
		return 0, nil
	}
	n, _ := v[p.attr].(float64)
	return int(n), err
}

// ReserveInflight takes one of tenant's in-flight slots for batchID, unless
// max are taken (ErrInflightLimit).
func (s *Store) ReserveInflight(ctx context.Context, tenant, batchID string, max int, now time.Time) error {
	return s.reserve(ctx, inflightPool, tenant, batchID, max, now)
}

// ReleaseInflight gives back batchID's slot and reports whether this call
// did: a batch that holds none (never counted, or given back already)
// changes nothing, so any number of calls decrement at most once.
func (s *Store) ReleaseInflight(ctx context.Context, tenant, batchID string) (bool, error) {
	return s.release(ctx, inflightPool, tenant, batchID)
}

// IdempotentBatch returns what tenant's idempotency key (IdemKey.Key) made,
// a zero Idem when it made nothing.
func (s *Store) IdempotentBatch(ctx context.Context, tenant, idemKey string) (Idem, error) {
	var idem Idem
	_, err := s.get(ctx, tenantPK(tenant), idemSK(idemKey), &idem)
	if errors.Is(err, errMissing) {
		return Idem{}, nil
	}
	return idem, err
}

// InflightMarkers lists the batches holding tenant's in-flight slots.
func (s *Store) InflightMarkers(ctx context.Context, tenant string) ([]InflightMarker, error) {
	return s.markers(ctx, inflightPool, tenant)
}

// Inflight returns how many in-flight slots tenant holds.
func (s *Store) Inflight(ctx context.Context, tenant string) (int, error) {
	return s.held(ctx, inflightPool, tenant)
}

// Templates per tenant (docs/api.md "Limits") are counted as batches in
// flight are, in a pool of their own:
//
//	templates                 T#<tenant>         TEMPLATES           templates (ADD, conditional on < max)
//	one counted template      T#<tenant>         TEMPLATE#<batch>    created_at; deleted with the decrement
const (
	templatesSK    = "TEMPLATES"
	templatePrefix = "TEMPLATE#"
)

// ErrTemplateLimit means a tenant already has the most templates.
var ErrTemplateLimit = errors.New("store: too many templates")

// ReserveTemplate takes one of tenant's template slots for templateID,
// unless max are taken (ErrTemplateLimit).
func (s *Store) ReserveTemplate(ctx context.Context, tenant, templateID string, max int, now time.Time) error {
	return s.reserve(ctx, templatePool, tenant, templateID, max, now)
}

// ReleaseTemplate gives back templateID's slot and reports whether this
// call did (once, however often it is called).
func (s *Store) ReleaseTemplate(ctx context.Context, tenant, templateID string) (bool, error) {
	return s.release(ctx, templatePool, tenant, templateID)
}

// TemplateMarkers lists the templates holding tenant's template slots.
func (s *Store) TemplateMarkers(ctx context.Context, tenant string) ([]InflightMarker, error) {
	return s.markers(ctx, templatePool, tenant)
}

// Templates returns how many template slots tenant holds.
func (s *Store) Templates(ctx context.Context, tenant string) (int, error) {
	return s.held(ctx, templatePool, tenant)
}

// Pending webhooks per tenant (docs/api.md "Limits") are counted in a pool
// of their own too: a batch's completion webhook holds a slot from its
// enqueue until it is delivered or given up.
//
//	pending webhooks          T#<tenant>         WEBHOOKS            webhooks (ADD, conditional on < max)
//	one pending webhook       T#<tenant>         WEBHOOK#<batch>     created_at; deleted with the decrement
const (
	webhooksSK    = "WEBHOOKS"
	webhookPrefix = "WEBHOOK#"
)

// ErrWebhookLimit means a tenant already has the most pending webhooks.
var ErrWebhookLimit = errors.New("store: too many pending webhooks")

// ReserveWebhook takes one of tenant's pending webhook slots for batchID's
// webhook, unless max are taken (ErrWebhookLimit); one it holds already
// (its terminal state reported again) is kept, not counted twice.
func (s *Store) ReserveWebhook(ctx context.Context, tenant, batchID string, max int, now time.Time) error {
	err := s.reserve(ctx, webhookPool, tenant, batchID, max, now)
	if errors.Is(err, errHeld) {
		return nil
	}
	return err
}

// ReleaseWebhook gives back batchID's pending webhook slot and reports
// whether this call did (once, however often it is called).
func (s *Store) ReleaseWebhook(ctx context.Context, tenant, batchID string) (bool, error) {
	return s.release(ctx, webhookPool, tenant, batchID)
}

// WebhookMarkers lists the batches whose webhooks hold tenant's slots.
func (s *Store) WebhookMarkers(ctx context.Context, tenant string) ([]InflightMarker, error) {
	return s.markers(ctx, webhookPool, tenant)
}

// Rate budgets shared by the executors (docs/design.md "Rate budgets"):
//
//	item                      pk                 sk                  notes
//	a bucket's second         RB#<bucket>        <unix second>       used (ADD, conditional on staying within capacity), ttl a minute later
//
// An executor leases a block of units at a time (ratelimit.Blocks), so a
// bucket's item takes a bounded number of writes a second whatever the
// rate (docs/design.md "Hot items").

// Lease adds n to what bucket used in the second starting at unix time
// second if that stays within capacity, and reports whether it did.
func (s *Store) Lease(ctx context.Context, bucket string, second, n, capacity int64) (bool, error) {
	if n > capacity {
		return false, nil
	}
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.Table,
		Key:                       key("RB#"+bucket, strconv.FormatInt(second, 10)),
		UpdateExpression:          aws.String("ADD used :n SET #ttl = :ttl"),
		ConditionExpression:       aws.String("attribute_not_exists(used) OR used <= :room"),
		ExpressionAttributeNames:  map[string]string{"#ttl": "ttl"},
		ExpressionAttributeValues: item{":n": avN64(n), ":room": avN64(capacity - n), ":ttl": avN64(second + int64(rateTTL/time.Second))},
	})
	var cf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &cf):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("lease %d of rate budget %s: %w", n, bucket, err)
	}
	return true, nil
}

// Key pools (docs/design.md "Rate budgets"): a key an executor dropped is
// recorded for `relay admin models`.
//
//	item                      pk                 sk                  notes
//	a dropped key             KS#<model>         <key env>           status, dropped_at

// DropKey records that the key env of model answered status at at.
func (s *Store) DropKey(ctx context.Context, model, env string, status int, at time.Time) error {
	_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.Table, Item: item{
		"pk": &types.AttributeValueMemberS{Value: "KS#" + model}, "sk": &types.AttributeValueMemberS{Value: env},
		"status": avN(status), "dropped_at": avN64(at.Unix()),
	}})
	if err != nil {
		return fmt.Errorf("record dropped key %s of %s: %w", env, model, err)
	}
	return nil
}

// DroppedKeys are the keys of model executors dropped, by key env.
func (s *Store) DroppedKeys(ctx context.Context, model string) (map[string]ratelimit.DroppedKey, error) {
	out := map[string]ratelimit.DroppedKey{}
	_, err := s.page(ctx, "KS#"+model, "", "", true, 1<<30, nil, func(it item) error {
		var k ratelimit.DroppedKey
		if err := attributevalue.UnmarshalMap(it, &k); err != nil {
			return err
		}
		out[k.Env] = k
		return nil
	})
	return out, err
}

// BudgetUsed is what bucket leased in the seconds from from to to (unix
// times, both included): a rate budget's use over that time.
func (s *Store) BudgetUsed(ctx context.Context, bucket string, from, to int64) (int64, error) {
	var sum int64
	var start map[string]types.AttributeValue
	for {
		out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:              &s.Table,
			KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :from AND :to"),
			ExpressionAttributeValues: item{":pk": &types.AttributeValueMemberS{Value: "RB#" + bucket},
				":from": &types.AttributeValueMemberS{Value: strconv.FormatInt(from, 10)},
				":to":   &types.AttributeValueMemberS{Value: strconv.FormatInt(to, 10)}},
			ExclusiveStartKey: start,
		})
		if err != nil {
			return 0, fmt.Errorf("read rate budget %s: %w", bucket, err)
		}
		for _, it := range out.Items {
			var v struct {
				Used int64 `dynamodbav:"used"`
			}
			if err := attributevalue.UnmarshalMap(it, &v); err != nil {
				return 0, err
			}
			sum += v.Used
		}
		if start = out.LastEvaluatedKey; start == nil {
			return sum, nil
		}
	}
}

// Limiter states (docs/design.md "Rate budgets"): each executor publishes
// its pool's state of a model's keys every few seconds while it sends rows
// (ratelimit.Registry.Publish), for relay admin models and the panel.
//
//	item                      pk                 sk                        notes
//	an executor's key state   LS#<model>         <key env>#<executor>      state, circuit, concurrency, 429s in the last minute, pace, at; ttl an hour on

// limiterTTL is how long an executor's published state outlives its
// publication: the readers ignore it after a minute (ops.PublishedWithin).
const limiterTTL = time.Hour

// PublishLimiter writes executor's states of model's keys at at, one item
// per key.
func (s *Store) PublishLimiter(ctx context.Context, model, executor string, at time.Time, states []ratelimit.KeyState) error {
	for _, k := range states {
		_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.Table, Item: item{
			"pk": &types.AttributeValueMemberS{Value: "LS#" + model}, "sk": &types.AttributeValueMemberS{Value: k.Env + "#" + executor},
			"env": &types.AttributeValueMemberS{Value: k.Env}, "executor": &types.AttributeValueMemberS{Value: executor},
			"state": &types.AttributeValueMemberS{Value: k.State}, "circuit": &types.AttributeValueMemberS{Value: string(k.Circuit)},
			"concurrency": avN(k.Concurrency), "limited": avN64(k.LimitedPerMinute),
			"rpm": avF(k.RPM), "tpm": avF(k.TPM),
			"at": avN64(at.UnixMilli()), "ttl": avN64(at.Add(limiterTTL).Unix()),
		}})
		if err != nil {
			return fmt.Errorf("publish the state of key %s of %s: %w", k.Env, model, err)
		}
	}
	return nil
}

// LimiterStates are the states every executor published of model's keys.
func (s *Store) LimiterStates(ctx context.Context, model string) ([]ratelimit.Published, error) {
	var out []ratelimit.Published
	_, err := s.page(ctx, "LS#"+model, "", "", true, 1<<30, nil, func(it item) error {
		var v struct {
			Env         string  `dynamodbav:"env"`
			Executor    string  `dynamodbav:"executor"`
			State       string  `dynamodbav:"state"`
			Circuit     string  `dynamodbav:"circuit"`
			Concurrency int     `dynamodbav:"concurrency"`
			Limited     int64   `dynamodbav:"limited"`
			RPM         float64 `dynamodbav:"rpm"`
			TPM         float64 `dynamodbav:"tpm"`
			At          int64   `dynamodbav:"at"`
		}
		if err := attributevalue.UnmarshalMap(it, &v); err != nil {
			return err
		}
		out = append(out, ratelimit.Published{Executor: v.Executor, At: time.UnixMilli(v.At), KeyState: ratelimit.KeyState{
			Env: v.Env, State: v.State, Circuit: ratelimit.CircuitState(v.Circuit), Concurrency: v.Concurrency,
			LimitedPerMinute: v.Limited, RPM: v.RPM, TPM: v.TPM}})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the limiter states of %s: %w", model, err)
	}
	return out, nil
}

func avF(f float64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatFloat(f, 'f', -1, 64)}
}
