package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
)

// ErrBatchNotFound is returned for a missing batch.
var ErrBatchNotFound = errors.New("store: batch not found")

const activePK = "ACTIVE"

func batchPK(tenant string) string { return tenantPK(tenant) }
func batchSK(id string) string     { return "BATCH#" + id }
func chunksPK(batchID string) string {
	return "B#" + batchID
}
func chunkSK(i int) string { return fmt.Sprintf("CHUNK#%06d", i) }

// batchIndexes keeps the GSI attributes in line with the batch: active
// batches sit in the by-status index oldest first and in the sparse by-due
// index at the time the tick must look at them (dueIndex), and runs of a
// template in the by-template index. It is the one place they are derived:
// a write that changes a batch without reading it (a commit) sets those of
// the batch it leaves (finalizeIndex).
func batchIndexes(b *batch.Batch) item {
	it := dueIndex(b)
	if !b.Status.Terminal() && b.Status != batch.Scheduled {
		it["gsi1pk"] = &types.AttributeValueMemberS{Value: activePK}
		it["gsi1sk"] = &types.AttributeValueMemberS{Value: fmt.Sprintf("%010d#%s#%s", b.CreatedAt, b.ID, b.Tenant)}
	}
	if b.TemplateID != nil {
		it["gsi2pk"] = &types.AttributeValueMemberS{Value: "TPL#" + *b.TemplateID}
		it["gsi2sk"] = &types.AttributeValueMemberS{Value: b.ID}
	}
	return it
}

// dueIndex is a batch's place in the by-due index: when the tick must look
// at it (batch.Batch.Due), none when never.
func dueIndex(b *batch.Batch) item {
	it := item{}
	if at, ok := b.Due(); ok {
		it["gsi4pk"] = avS(duePK)
		it["gsi4sk"] = avS(dueSK(at, b.Tenant, b.ID))
	}
	return it
}

// finalizeIndex is the by-due index of a batch whose last chunk commits
// with its finalize due at due: that of a batch whose chunks are all done
// (batch.Batch.Due), which the commit makes it without reading it.
func finalizeIndex(tenant, id string, due time.Time) item {
	return dueIndex(&batch.Batch{Tenant: tenant, ID: id, Status: batch.InProgress, Started: true,
		ChunksTotal: 1, ChunksDone: 1, FinalizeDue: due.Unix()})
}

// batchItem is a new batch's item: the batch at T#<tenant>/BATCH#<id>, its
// index attributes (batchIndexes) and version 1.
func batchItem(b batch.Batch) (item, error) {
	it, err := attributevalue.MarshalMap(b)
	if err != nil {
		return nil, fmt.Errorf("marshal batch: %w", err)
	}
	for k, v := range key(batchPK(b.Tenant), batchSK(b.ID)) {
		it[k] = v
	}
	for k, v := range batchIndexes(&b) {
		it[k] = v
	}
	it["ver"] = &types.AttributeValueMemberN{Value: "1"}
	return it, nil
}

// IdemKey is an idempotency key as the store keeps it: Key names it within
// its tenant (the caller hashes the route and the header into it), and
// Body is the hash of the request it came with. The zero IdemKey is none.
type IdemKey struct {
	Key  string
	Body string
}

// Idem is what an idempotency key made: the batch, and the hash of the
// body of the request that made it.
type Idem struct {
	BatchID string `dynamodbav:"batch_id"`
	Body    string `dynamodbav:"body_sha256"`
}

// ErrIdemKeyReused is returned when an idempotency key made a batch with
// another body.
var ErrIdemKeyReused = errors.New("idempotency key used with another body")

func idemSK(idemKey string) string { return "IDEM#" + idemKey }

// idemItem records that tenant's idempotency key k made batchID; TTL
// removes it a day after now.
func idemItem(tenant string, k IdemKey, batchID string, now time.Time) item {
	idem := key(tenantPK(tenant), idemSK(k.Key))
	idem["batch_id"] = &types.AttributeValueMemberS{Value: batchID}
	idem["body_sha256"] = &types.AttributeValueMemberS{Value: k.Body}
	idem["ttl"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(24*time.Hour).Unix(), 10)}
	return idem
}

// CreateBatch writes a new batch. With an idempotency key, the first batch
// created with it is returned instead of creating another, or
// ErrIdemKeyReused when it was created with another body.
func (s *Store) CreateBatch(ctx context.Context, b batch.Batch, k IdemKey) (batch.Batch, bool, error) {
	it, err := batchItem(b)
	if err != nil {
		return b, false, err
	}
	tx := []types.TransactWriteItem{{Put: &types.Put{TableName: &s.Table, Item: it, ConditionExpression: aws.String("attribute_not_exists(pk)")}}}
	if k.Key != "" {
		idem := idemItem(b.Tenant, k, b.ID, time.Now())
		tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.Table, Item: idem, ConditionExpression: aws.String("attribute_not_exists(pk)")}})
	}
	_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) && k.Key != "" {
		if first, gerr := s.IdempotentBatch(ctx, b.Tenant, k.Key); gerr == nil && first.BatchID != "" {
			if first.Body != k.Body {
				return batch.Batch{}, false, ErrIdemKeyReused
			}
			fb, err := s.GetBatch(ctx, b.Tenant, first.BatchID)
			return fb, false, err
		}
	}
	if err != nil {
		return b, false, fmt.Errorf("create batch %s: %w", b.ID, err)
	}
	return b, true, nil
}

// GetBatch reads a batch.
func (s *Store) GetBatch(ctx context.Context, tenant, id string) (batch.Batch, error) {
	var b batch.Batch
	_, err := s.get(ctx, batchPK(tenant), batchSK(id), &b)
	return b, notFound(err, ErrBatchNotFound)
}

// UpdateBatch changes a batch through fn, conditional on no concurrent write.
func (s *Store) UpdateBatch(ctx context.Context, tenant, id string, fn func(*batch.Batch) error) (batch.Batch, error) {
	b, err := update(ctx, s, batchPK(tenant), batchSK(id), batchIndexes, fn)
	return b, notFound(err, ErrBatchNotFound)
}

// ListBatches lists a tenant's batches newest first, or a template's runs.
func (s *Store) ListBatches(ctx context.Context, tenant, after string, limit int, templateID string) ([]batch.Batch, bool, error) {
	var bs []batch.Batch
	each := func(it item) error {
		var b batch.Batch
		if err := attributevalue.UnmarshalMap(it, &b); err != nil {
			return err
		}
		bs = append(bs, b)
		return nil
	}
	if templateID == "" {
		start := ""
		if after != "" {
			start = batchSK(after)
		}
		more, err := s.page(ctx, batchPK(tenant), "BATCH#", start, false, limit, nil, each)
		return bs, more, err
	}
	in := &dynamodb.QueryInput{
		TableName:              &s.Table,
		IndexName:              aws.String(resources.ByTemplate),
		KeyConditionExpression: aws.String("gsi2pk = :t"),
		FilterExpression:       aws.String("tenant = :tenant"),
		ExpressionAttributeValues: item{
			":t":      &types.AttributeValueMemberS{Value: "TPL#" + templateID},
			":tenant": &types.AttributeValueMemberS{Value: tenant},
		},
		ScanIndexForward: aws.Bool(false),
	}
	if after != "" {
		in.KeyConditionExpression = aws.String("gsi2pk = :t AND gsi2sk < :after")
		in.ExpressionAttributeValues[":after"] = &types.AttributeValueMemberS{Value: after}
	}
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, false, fmt.Errorf("list runs of %s: %w", templateID, err)
		}
		for _, it := range out.Items {
			if len(bs) == limit {
				return bs, true, nil
			}
			if err := each(it); err != nil {
				return nil, false, err
			}
		}
		if out.LastEvaluatedKey == nil {
			return bs, false, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// OldestActive returns the oldest batch that has not ended, if any.
func (s *Store) OldestActive(ctx context.Context) (batch.Batch, bool, error) {
	out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &s.Table,
		IndexName:                 aws.String(resources.ByStatus),
		KeyConditionExpression:    aws.String("gsi1pk = :a"),
		ExpressionAttributeValues: item{":a": &types.AttributeValueMemberS{Value: activePK}},
		Limit:                     aws.Int32(1),
	})
	if err != nil {
		return batch.Batch{}, false, fmt.Errorf("oldest active batch: %w", err)
	}
	if len(out.Items) == 0 {
		return batch.Batch{}, false, nil
	}
	var b batch.Batch
	if err := attributevalue.UnmarshalMap(out.Items[0], &b); err != nil {
		return b, false, err
	}
	return b, true, nil
}

// ActiveRef names a batch found through an index.
type ActiveRef struct {
	Tenant   string `dynamodbav:"tenant"`
	ID       string `dynamodbav:"id"`
	Priority int    `dynamodbav:"priority"`
}

func activeRefs(items []item) ([]ActiveRef, error) {
	refs := make([]ActiveRef, 0, len(items))
	for _, it := range items {
		var r ActiveRef
		if err := attributevalue.UnmarshalMap(it, &r); err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	return refs, nil
}

// chunkItem is a chunk's item, at B#<batch>/CHUNK#<index>.
func chunkItem(c batch.Chunk) (item, error) {
	it, err := attributevalue.MarshalMap(c)
	if err != nil {
		return nil, err
	}
	for k, v := range key(chunksPK(c.Batch), chunkSK(c.Index)) {
		it[k] = v
	}
	return it, nil
}

// planTxItems bounds one transaction of PutChunks (DynamoDB's limit).
const planTxItems = 100

// PutChunks writes planned chunks, each only where it is absent or still
// pending: a late plan (docs/design.md "Scheduling", plans are fenced)
// never resets a chunk that was claimed or is done. It writes them in
// transactions of up to 100; a group in which some chunk is taken (an
// earlier attempt of the same plan wrote it, and a claim or a cancel's
// drain took it since) is written again item by item, skipping the taken
// ones, so the chunks the earlier attempt did not write are written all
// the same.
func (s *Store) PutChunks(ctx context.Context, cs []batch.Chunk) error {
	for len(cs) > 0 {
		n := min(len(cs), planTxItems)
		tx := make([]types.TransactWriteItem, n)
		for i, c := range cs[:n] {
			put, err := s.chunkPut(c)
			if err != nil {
				return err
			}
			tx[i] = types.TransactWriteItem{Put: put}
		}
		err := s.transact(ctx, "", tx)
		if _, ok := conditionFailed(err); ok {
			err = s.putChunksAlone(ctx, tx)
		}
		if err != nil {
			return fmt.Errorf("write chunks of %s: %w", cs[0].Batch, err)
		}
		cs = cs[n:]
	}
	return nil
}

// chunkPut is the put of a planned chunk c, where it is absent or pending.
func (s *Store) chunkPut(c batch.Chunk) (*types.Put, error) {
	it, err := chunkItem(c)
	if err != nil {
		return nil, err
	}
	return &types.Put{TableName: &s.Table, Item: it,
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR #st = :pending"),
		ExpressionAttributeNames:  map[string]string{"#st": "state"},
		ExpressionAttributeValues: item{":pending": avS(string(batch.ChunkPending))},
	}, nil
}

// putChunksAlone writes a group's puts one by one, skipping those whose
// chunk is taken.
func (s *Store) putChunksAlone(ctx context.Context, tx []types.TransactWriteItem) error {
	for _, w := range tx {
		p := w.Put
		_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: p.TableName, Item: p.Item,
			ConditionExpression: p.ConditionExpression, ExpressionAttributeNames: p.ExpressionAttributeNames,
			ExpressionAttributeValues: p.ExpressionAttributeValues})
		var cf *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &cf) {
			return err
		}
	}
	return nil
}

// GetChunk reads one chunk.
func (s *Store) GetChunk(ctx context.Context, batchID string, i int) (batch.Chunk, error) {
	var c batch.Chunk
	_, err := s.get(ctx, chunksPK(batchID), chunkSK(i), &c)
	return c, notFound(err, ErrBatchNotFound)
}

// Chunks lists a batch's chunks in input order: by first row, so the rest
// of a split chunk (numbered after the batch's chunks, docs/design.md
// "Scheduling", split) comes where its rows are.
func (s *Store) Chunks(ctx context.Context, batchID string) ([]batch.Chunk, error) {
	var cs []batch.Chunk
	_, err := s.page(ctx, chunksPK(batchID), "CHUNK#", "", true, 1<<30, nil, func(it item) error {
		var c batch.Chunk
		if err := attributevalue.UnmarshalMap(it, &c); err != nil {
			return err
		}
		cs = append(cs, c)
		return nil
	})
	slices.SortStableFunc(cs, func(a, b batch.Chunk) int { return cmp.Compare(a.FirstRow, b.FirstRow) })
	return cs, err
}

// UsageRow is one day's usage of one model by a tenant.
type UsageRow struct {
	Day          string `json:"date" dynamodbav:"day"`
	Model        string `json:"model" dynamodbav:"model"`
	Requests     int64  `json:"requests" dynamodbav:"requests"`
	InputTokens  int64  `json:"input_tokens" dynamodbav:"input_tokens"`
	OutputTokens int64  `json:"output_tokens" dynamodbav:"output_tokens"`
	TotalTokens  int64  `json:"total_tokens" dynamodbav:"total_tokens"`
	// The shares of the above a provider's batch API answered and the
	// model answered as another's fallback (sched.UsageAgg).
	NativeRequests       int64 `json:"-" dynamodbav:"native_requests"`
	NativeInputTokens    int64 `json:"-" dynamodbav:"native_input_tokens"`
	NativeOutputTokens   int64 `json:"-" dynamodbav:"native_output_tokens"`
	FallbackRequests     int64 `json:"-" dynamodbav:"fallback_requests"`
	FallbackInputTokens  int64 `json:"-" dynamodbav:"fallback_input_tokens"`
	FallbackOutputTokens int64 `json:"-" dynamodbav:"fallback_output_tokens"`
}

// USD is what r's tokens cost at price p: those a provider's batch API
// answered at its discount, the others at p.
func (r UsageRow) USD(p config.Price) float64 {
	return p.USD(r.InputTokens-r.NativeInputTokens, r.OutputTokens-r.NativeOutputTokens) +
		p.NativeUSD(r.NativeInputTokens, r.NativeOutputTokens)
}

// A tenant's daily usage of a model is at USAGE#<tenant>/<day>#<model>
// (CommitChunk adds to it); days are YYYY-MM-DD, so the days from first to
// last are the sort keys from usageFrom(first) to usageTo(last).
func usagePK(tenant string) string     { return "USAGE#" + tenant }
func usageSK(day, model string) string { return day + "#" + model }
func usageFrom(day string) string      { return day }
func usageTo(day string) string        { return day + "#\uffff" }

// Usage returns a tenant's daily usage aggregates for days in [from, to],
// read consistently: the governor asks before a workflow record's next
// event, just after its step counted its spend (docs/design.md
// "Governance").
func (s *Store) Usage(ctx context.Context, tenant, from, to string) ([]UsageRow, error) {
	rows, err := between[UsageRow](ctx, s, usagePK(tenant), usageFrom(from), usageTo(to), 0)
	if err != nil {
		return nil, fmt.Errorf("query usage of %s: %w", tenant, err)
	}
	return rows, nil
}

// UsageDetail is one day's usage of one model by one batch, attributed to
// the key that submitted it.
type UsageDetail struct {
	UsageRow
	KeyID   string `dynamodbav:"key_id"`
	BatchID string `dynamodbav:"batch_id"`
}

// Beside each daily aggregate, the same usage by key and batch is at
// USAGEBY#<tenant>/<day>#<key>#<batch>#<model>: GET /v1/usage's group_by
// reads it, while budgets keep reading the few aggregates of USAGE#.
func usageByPK(tenant string) string { return "USAGEBY#" + tenant }
func usageBySK(day, keyID, batchID, model string) string {
	return day + "#" + keyID + "#" + batchID + "#" + model
}

// ErrTooMany is a read that found more items than its cap.
var ErrTooMany = errors.New("store: more items than the cap")

// UsageDetails returns a tenant's usage by day, key, batch and model for
// days in [from, to]: ErrTooMany past max records (the answer is one list).
func (s *Store) UsageDetails(ctx context.Context, tenant, from, to string, max int) ([]UsageDetail, error) {
	rows, err := between[UsageDetail](ctx, s, usageByPK(tenant), usageFrom(from), usageTo(to), max)
	if err != nil {
		return nil, fmt.Errorf("query usage details of %s: %w", tenant, err)
	}
	return rows, nil
}

// BatchUsage returns the usage of one batch, submitted by keyID, on each
// of days: a query per day of the prefix <day>#<key>#<batch>#.
func (s *Store) BatchUsage(ctx context.Context, tenant, keyID, batchID string, days []string) ([]UsageDetail, error) {
	var rows []UsageDetail
	for _, day := range days {
		prefix := usageBySK(day, keyID, batchID, "")
		page, err := between[UsageDetail](ctx, s, usageByPK(tenant), prefix, prefix+"\uffff", 0)
		if err != nil {
			return nil, fmt.Errorf("query usage of batch %s: %w", batchID, err)
		}
		rows = append(rows, page...)
	}
	return rows, nil
}

// between reads, page after page, the items of partition pk with a sort
// key in [from, to], ErrTooMany past max of them (0: no cap), consistently: the governor asks before a workflow
// record's next event, just after its step counted its spend
// (docs/design.md "Governance").
func between[T any](ctx context.Context, s *Store, pk, from, to string, max int) ([]T, error) {
	in := &dynamodb.QueryInput{
		TableName:                 &s.Table,
		KeyConditionExpression:    aws.String("pk = :pk AND sk BETWEEN :from AND :to"),
		ExpressionAttributeValues: item{":pk": avS(pk), ":from": avS(from), ":to": avS(to)},
		ConsistentRead:            aws.Bool(true),
	}
	var rows []T
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		page := make([]T, 0, len(out.Items))
		if err := attributevalue.UnmarshalListOfMaps(out.Items, &page); err != nil {
			return nil, err
		}
		rows = append(rows, page...)
		if max > 0 && len(rows) > max {
			return nil, ErrTooMany
		}
		if len(out.LastEvaluatedKey) == 0 {
			return rows, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// usageAdds are what a usage item's update adds (usageItems' values).
const usageAdds = "requests :r, input_tokens :i, output_tokens :o, total_tokens :t, " +
	"native_requests :nr, native_input_tokens :ni, native_output_tokens :no, " +
	"fallback_requests :fr, fallback_input_tokens :fi, fallback_output_tokens :fo"

// usageItems add usage by model to a tenant's daily aggregates and to its
// usage by key and batch: a commit's and a workflow step's writes.
func (s *Store) usageItems(tenant, day, keyID, batchID string, byModel map[string]sched.UsageAgg) []types.TransactWriteItem {
	var items []types.TransactWriteItem
	// Sorted: a retry under the same token must be the same request.
	for _, model := range slices.Sorted(maps.Keys(byModel)) {
		u := byModel[model]
		values := item{":day": avS(day), ":m": avS(model), ":r": avN64(u.Requests),
			":i": avN64(u.Input), ":o": avN64(u.Output), ":t": avN64(u.Total),
			":nr": avN64(u.Native.Requests), ":ni": avN64(u.Native.Input), ":no": avN64(u.Native.Output),
			":fr": avN64(u.Fallback.Requests), ":fi": avN64(u.Fallback.Input), ":fo": avN64(u.Fallback.Output)}
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName: &s.Table, Key: key(usagePK(tenant), usageSK(day, model)),
			UpdateExpression:          aws.String("SET #d = :day, model = :m ADD " + usageAdds),
			ExpressionAttributeNames:  map[string]string{"#d": "day"},
			ExpressionAttributeValues: values,
		}})
		by := maps.Clone(values)
		by[":k"], by[":b"] = avS(keyID), avS(batchID)
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName: &s.Table, Key: key(usageByPK(tenant), usageBySK(day, keyID, batchID, model)),
			UpdateExpression:          aws.String("SET #d = :day, model = :m, key_id = :k, batch_id = :b ADD " + usageAdds),
			ExpressionAttributeNames:  map[string]string{"#d": "day"},
			ExpressionAttributeValues: by,
		}})
	}
	return items
}

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avN(n int) types.AttributeValue    { return &types.AttributeValueMemberN{Value: strconv.Itoa(n)} }
func avN64(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// ErrBatchActive means a batch that has not ended was asked to be deleted.
var ErrBatchActive = errors.New("store: batch has not ended")

// DeleteBatch removes an ended batch's record with its chunks (not the
// objects they point at), and the DL# dead-letter items of a batch from
// before its dead-letter list was read from its rows' generations. The record goes last, so a
// delete cut short leaves a batch that can be deleted again.
func (s *Store) DeleteBatch(ctx context.Context, tenant, id string) error {
	b, err := s.GetBatch(ctx, tenant, id)
	if err != nil {
		return err
	}
	if !b.Status.Terminal() {
		return fmt.Errorf("delete batch %s (%s): %w", id, b.Status, ErrBatchActive)
	}
	var keys []item
	for _, prefix := range []string{"CHUNK#", "DL#"} {
		_, err := s.page(ctx, chunksPK(id), prefix, "", true, 1<<30, nil, func(it item) error {
			keys = append(keys, item{"pk": it["pk"], "sk": it["sk"]})
			return nil
		})
		if err != nil {
			return fmt.Errorf("delete batch %s: %w", id, err)
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), 25)
		reqs := make([]types.WriteRequest, n)
		for i, k := range keys[:n] {
			reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: k}}
		}
		pending := map[string][]types.WriteRequest{s.Table: reqs}
		for attempt := 0; len(pending[s.Table]) > 0; attempt++ {
			if attempt > 0 {
				time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
			}
			out, err := s.DB.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return fmt.Errorf("delete chunks of %s: %w", id, err)
			}
			pending = out.UnprocessedItems
		}
		keys = keys[n:]
	}
	return s.delete(ctx, batchPK(tenant), batchSK(id))
}

// HoldCost records holds (batch.Batch.CostHolds: chunk index → USD) on
// batch id once fits, given the batch as read, says they fit: the write is
// conditional on the batch's version, so a commit that takes a hold out
// (commitItems) or another chunk's hold in between makes it read and ask
// again. ok false: fits said no, nothing written.
func (s *Store) HoldCost(ctx context.Context, tenant, id string, holds map[string]float64, fits func(batch.Batch) (bool, error)) (ok bool, err error) {
	for attempt := 0; ; attempt++ {
		var b batch.Batch
		ver, err := s.get(ctx, batchPK(tenant), batchSK(id), &b)
		if err != nil {
			return false, notFound(err, ErrBatchNotFound)
		}
		if ok, err := fits(b); !ok || err != nil {
			return false, err
		}
		var sets []string
		names, values := map[string]string{"#h": "cost_holds"}, item{":v": avN64(ver), ":one": avN(1)}
		for i, k := range slices.Sorted(maps.Keys(holds)) {
			sets = append(sets, fmt.Sprintf("#h.#k%d = :h%d", i, i))
			names[fmt.Sprintf("#k%d", i)] = k
			values[fmt.Sprintf(":h%d", i)] = avUSD(holds[k])
		}
		_, err = s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.Table, Key: key(batchPK(tenant), batchSK(id)),
			UpdateExpression:          aws.String("SET " + strings.Join(sets, ", ") + " ADD ver :one"),
			ConditionExpression:       aws.String("ver = :v"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
		})
		var cf *types.ConditionalCheckFailedException
		if errors.As(err, &cf) && attempt < 20 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("hold the cost of %s: %w", id, err)
		}
		return true, nil
	}
}

// avUSD is an amount of USD as a number attribute.
func avUSD(usd float64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatFloat(usd, 'f', -1, 64)}
}
