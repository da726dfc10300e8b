package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/relaybatch/relay/internal/backoff"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
)

// The scheduling items (docs/design.md "Scheduling"):
//
//	item            pk                 sk                           notes
//	chunk           B#<batch>          CHUNK#<n>                    state, run, lease, attempts, slots, shard; gsi3 while claimed
//	ready entry     READY#<model>      <prio>#<seq>#<batch>         a batch with unclaimed chunks of the model: next, total
//	capacity shard  MODEL#<model>      CAP#<k>                      inflight, at most the shard's quota
//
// Finding the next chunk of a model is one Query of its ready entries
// (highest priority first, then the lowest sequence: round robin), whatever
// the number of active batches; the claim is one transaction.

// Errors of the scheduling calls.
var (
	// ErrNoCapacity means the capacity shard has no room.
	ErrNoCapacity = errors.New("store: no capacity")
	// ErrRaced means the ready entry or chunk to claim was taken meanwhile.
	ErrRaced = errors.New("store: claim raced another")
	// ErrChunkDone means the chunk is no longer this run's: committed, or
	// taken over after its lease expired.
	ErrChunkDone = errors.New("store: chunk is not this run's")
	// ErrLast means a commit said it was not its batch's last chunk, and
	// it is: commit again as the last.
	ErrLast = errors.New("store: the batch's last chunk")
	// ErrPlanned means a plan's chunks were not written: the batch's
	// chunks were claimed already, by the claims of another plan.
	ErrPlanned = errors.New("store: the batch's chunks are claimed already")
	// ErrRenumber means a commit that adds a chunk (Commit.Fallback)
	// numbered it from a chunk count the batch no longer has, or put its
	// ready entry at a key another entry holds: read the batch again and
	// number the chunk (and its entry's sequence) anew.
	ErrRenumber = errors.New("store: the new chunk's number or ready entry is taken")
	// ErrCommitUnknown means DynamoDB refused a commit's retry as another
	// request under the same token: whether the first took effect is
	// only known from the chunk (see Engine.commit).
	ErrCommitUnknown = errors.New("store: commit outcome unknown")
)

// leaseShards spreads the sparse lease index over this many partitions.
const leaseShards = 4

func capPK(model string) string { return "MODEL#" + model }

// capShardKey is the key of a model's capacity shard, MODEL#<model>/CAP#<k>.
func capShardKey(model string, shard int) item {
	return key(capPK(model), fmt.Sprintf("CAP#%03d", shard))
}

func readyPK(model string) string { return "READY#" + model }

// ReadyHead returns the entry of model owed the next chunk.
func (s *Store) ReadyHead(ctx context.Context, model string) (sched.Ready, bool, error) {
	rs, _, err := s.ReadyHeads(ctx, model, 1)
	if err != nil || len(rs) == 0 {
		return sched.Ready{}, false, err
	}
	return rs[0], true, nil
}

// ReadyHeads returns the first n entries of model's ready index, in order,
// and whether they are all it holds.
func (s *Store) ReadyHeads(ctx context.Context, model string, n int) ([]sched.Ready, bool, error) {
	out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &s.Table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: item{":pk": avS(readyPK(model))},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(int32(n)),
	})
	if err != nil {
		return nil, false, fmt.Errorf("ready head of %s: %w", model, err)
	}
	var rs []sched.Ready
	if err := attributevalue.UnmarshalListOfMaps(out.Items, &rs); err != nil {
		return nil, false, fmt.Errorf("ready head of %s: %w", model, err)
	}
	return rs, len(out.LastEvaluatedKey) == 0, nil
}

// JoinSeq is the sequence a new entry of priority joins model's ready
// index at: that of the head of its priority (0 when it has none), so it
// neither waits for the batches there nor starves them.
func (s *Store) JoinSeq(ctx context.Context, model string, priority int) (int64, error) {
	head, ok, err := s.priorityHead(ctx, model, priority)
	if err != nil || !ok {
		return 0, err
	}
	return head.Seq, nil
}

// priorityHead is the entry at the head of model's entries of priority.
func (s *Store) priorityHead(ctx context.Context, model string, priority int) (sched.Ready, bool, error) {
	out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
		TableName:              &s.Table,
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: item{
			":pk": avS(readyPK(model)), ":p": avS(sched.ReadyPrefix(priority)),
		},
		ConsistentRead: aws.Bool(true),
		Limit:          aws.Int32(1),
	})
	if err != nil {
		return sched.Ready{}, false, fmt.Errorf("ready index of %s: %w", model, err)
	}
	if len(out.Items) == 0 {
		return sched.Ready{}, false, nil
	}
	var head sched.Ready
	if err := attributevalue.UnmarshalMap(out.Items[0], &head); err != nil {
		return sched.Ready{}, false, fmt.Errorf("ready index of %s: %w", model, err)
	}
	return head, true, nil
}

// PutReady adds a batch's entry to its model's ready index, while the
// chunk it points at is pending. It joins the turn of its priority where
// it stands (JoinSeq), so a new batch neither waits for nor starves the
// others.
func (s *Store) PutReady(ctx context.Context, r sched.Ready) error {
	head, ok, err := s.priorityHead(ctx, r.Model, r.Priority)
	if err != nil {
		return err
	}
	if ok && head.Batch != r.Batch {
		r.Seq = head.Seq
	}
	// Only at a pending chunk: a plan that runs again after a claim took
	// the chunk must not point an entry at it (a commit of that chunk would
	// pick its own chunk). Never over an entry of the same key: a plan
	// that runs again must not step back an entry its batch's claims moved
	// on (its chunk would then have no entry left once the stale one is
	// dropped). Either way nothing is written, and that is no error.
	err = s.transact(ctx, "", []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{
			TableName: &s.Table, Key: key(chunksPK(r.Batch), chunkSK(r.Next)),
			ConditionExpression:       aws.String("#st = :pending"),
			ExpressionAttributeNames:  map[string]string{"#st": "state"},
			ExpressionAttributeValues: item{":pending": avS(string(batch.ChunkPending))},
		}},
		{Put: &types.Put{TableName: &s.Table, Item: readyItem(r), ConditionExpression: aws.String("attribute_not_exists(pk)")}},
	})
	if _, ok := conditionFailed(err); err != nil && !ok {
		return fmt.Errorf("put ready entry of %s for %s: %w", r.Batch, r.Model, err)
	}
	return nil
}

// DeleteReady removes an entry (one whose chunks turned out to be claimed).
// It deletes the entry only while it still points at r.Next: one that
// moved on since it was read stays.
func (s *Store) DeleteReady(ctx context.Context, r sched.Ready) error {
	_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.Table, Key: key(readyPK(r.Model), r.SK()),
		ConditionExpression:       aws.String("#next = :next"),
		ExpressionAttributeNames:  map[string]string{"#next": "next"},
		ExpressionAttributeValues: item{":next": avN(r.Next)},
	})
	var cf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &cf) {
		return fmt.Errorf("delete ready entry %s of %s: %w", r.SK(), r.Model, err)
	}
	return nil
}

func readyItem(r sched.Ready) item {
	it, _ := attributevalue.MarshalMap(r) // plain fields: cannot fail
	for k, v := range key(readyPK(r.Model), r.SK()) {
		it[k] = v
	}
	return it
}

func leasePK(shard int) string { return fmt.Sprintf("LEASE#%d", shard) }

// leaseCutoff bounds the lease sort keys (leaseAttrs) of leases that ended
// before now: they sort below it.
func leaseCutoff(now time.Time) string { return fmt.Sprintf("%013d", now.UnixMilli()) }

// leaseAttrs are the lease index's attributes of a claimed chunk: the
// partition is one of leaseShards, by batch, and the sort key starts with
// the lease's end in unix milliseconds.
func leaseAttrs(batchID string, chunk int, lease time.Time) (pk, sk types.AttributeValue) {
	h := sha256.Sum256([]byte(batchID))
	return avS(leasePK(int(h[0]) % leaseShards)),
		avS(fmt.Sprintf("%013d#%s#%06d", lease.UnixMilli(), batchID, chunk))
}

// claimItems are a claim's writes: the chunk, and the ready entry moved on.
func (s *Store) claimItems(c sched.Claim) []types.TransactWriteItem {
	items := []types.TransactWriteItem{s.chunkClaimItem(c), s.takeEntryItem(c.Entry)}
	if next, ok := c.Stepped(); ok {
		items = append(items, s.putEntryItem(next))
	}
	return items
}

// chunkClaimItem is the claim of c's chunk, which must be pending.
func (s *Store) chunkClaimItem(c sched.Claim) types.TransactWriteItem {
	lpk, lsk := leaseAttrs(c.Entry.Batch, c.Entry.Next, c.Lease)
	u := &types.Update{
		TableName: &s.Table,
		Key:       key(chunksPK(c.Entry.Batch), chunkSK(c.Entry.Next)),
		UpdateExpression: aws.String("SET #st = :claimed, #run = :run, lease = :lease, slots = :slots, #shard = :shard, " +
			"gsi3pk = :lpk, gsi3sk = :lsk ADD attempts :one"),
		ConditionExpression:      aws.String("#st = :pending"),
		ExpressionAttributeNames: map[string]string{"#st": "state", "#run": "run", "#shard": "shard"},
		ExpressionAttributeValues: item{":claimed": avS(string(batch.ChunkClaimed)), ":pending": avS(string(batch.ChunkPending)),
			":run": avS(c.Run), ":lease": avN64(c.Lease.UnixMilli()), ":slots": avN(c.Slots), ":shard": avN(c.Shard),
			":lpk": lpk, ":lsk": lsk, ":one": avN(1)},
	}
	if c.Exec != "" {
		u.UpdateExpression = aws.String(strings.Replace(*u.UpdateExpression, " ADD ", ", #exec = :exec, exec_until = :lease ADD ", 1))
		u.ExpressionAttributeNames["#exec"], u.ExpressionAttributeValues[":exec"] = "exec", avS(c.Exec)
	}
	return types.TransactWriteItem{Update: u}
}

// takeEntryItem deletes ready entry r, which must be there.
func (s *Store) takeEntryItem(r sched.Ready) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName: &s.Table, Key: key(readyPK(r.Model), r.SK()),
		ConditionExpression: aws.String("attribute_exists(pk)"),
	}}
}

func (s *Store) putEntryItem(r sched.Ready) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: &s.Table, Item: readyItem(r)}}
}

// poolClaimItems are ClaimFromPool's writes for claims cs, all of one
// model and capacity shard: their slots taken from the shard (ErrNoCapacity
// when it has no room for them together), each claim's chunk, then what
// the claims, made one after another, do to the ready index (sched.Moves):
// the entries they take (ErrRaced when a chunk or an entry is taken) and
// those they leave. The same claims always give the same items in the same
// order.
func (s *Store) poolClaimItems(cs []sched.Claim, quota int) txItems {
	var tx txItems
	slots := 0
	for _, c := range cs {
		slots += c.Slots
	}
	if slots > 0 {
		tx.add(ErrNoCapacity, types.TransactWriteItem{Update: &types.Update{
			TableName: &s.Table, Key: capShardKey(cs[0].Entry.Model, cs[0].Shard),
			UpdateExpression:          aws.String("ADD inflight :n"),
			ConditionExpression:       aws.String("attribute_not_exists(inflight) OR inflight <= :room"),
			ExpressionAttributeValues: item{":n": avN(slots), ":room": avN(quota - slots)},
		}})
	}
	for _, c := range cs {
		tx.add(ErrRaced, s.chunkClaimItem(c))
	}
	taken, left := sched.Moves(cs)
	for _, r := range taken {
		tx.add(ErrRaced, s.takeEntryItem(r))
	}
	for _, r := range left {
		tx.add(nil, s.putEntryItem(r))
	}
	return tx
}

// ClaimFromPool makes claims cs, of chunks of one model, with slots taken
// from one capacity shard of quota slots, in one transaction: all or none,
// as if made one after another (a start claims a model's free capacity in
// one round trip, docs/design.md "Scheduling"). ErrNoCapacity when the
// shard has no room for their slots, ErrRaced when a chunk is no longer
// pending or an entry they take moved meanwhile.
func (s *Store) ClaimFromPool(ctx context.Context, quota int, cs ...sched.Claim) error {
	if len(cs) == 0 {
		return nil
	}
	chunks := map[[2]any]bool{}
	for _, c := range cs {
		if c.Entry.Model != cs[0].Entry.Model || c.Shard != cs[0].Shard {
			return fmt.Errorf("claims of models %s and %s or shards %d and %d in one transaction", cs[0].Entry.Model, c.Entry.Model, cs[0].Shard, c.Shard)
		}
		k := [2]any{c.Entry.Batch, c.Entry.Next}
		if chunks[k] {
			// Two entries at one chunk: made one after another, the
			// second finds it taken; one transaction cannot name it twice.
			return ErrRaced
		}
		chunks[k] = true
	}
	tx := s.poolClaimItems(cs, quota)
	err := s.transact(ctx, "", tx.items)
	if failed, ok := tx.failed(err); ok {
		return failed
	}
	if err != nil {
		return fmt.Errorf("claim chunk %d of %s and %d more: %w", cs[0].Entry.Next, cs[0].Entry.Batch, len(cs)-1, err)
	}
	return nil
}

// ClaimAlone claims a pending chunk without capacity, for a cancelled or
// expired batch whose rows only get error lines. Its ready entry, if any,
// is dropped by the next claimer that finds the chunk taken.
func (s *Store) ClaimAlone(ctx context.Context, c batch.Chunk, run string, lease time.Time) error {
	lpk, lsk := leaseAttrs(c.Batch, c.Index, lease)
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(chunksPK(c.Batch), chunkSK(c.Index)),
		UpdateExpression:         aws.String("SET #st = :claimed, #run = :run, lease = :lease, slots = :zero, gsi3pk = :lpk, gsi3sk = :lsk ADD attempts :one"),
		ConditionExpression:      aws.String("#st = :pending"),
		ExpressionAttributeNames: map[string]string{"#st": "state", "#run": "run"},
		ExpressionAttributeValues: item{":claimed": avS(string(batch.ChunkClaimed)), ":pending": avS(string(batch.ChunkPending)),
			":run": avS(run), ":lease": avN64(lease.UnixMilli()), ":zero": avN(0), ":lpk": lpk, ":lsk": lsk, ":one": avN(1)},
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return ErrRaced
	}
	if err != nil {
		return fmt.Errorf("claim chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	return nil
}

// txItems are a transaction's items, each with the error its condition
// failing means (nil: it has none), so a cancellation maps to an error by
// the item, never by a position counted elsewhere.
type txItems struct {
	items []types.TransactWriteItem
	fails []error
}

func (t *txItems) add(fail error, items ...types.TransactWriteItem) {
	for _, it := range items {
		t.items = append(t.items, it)
		t.fails = append(t.fails, fail)
	}
}

// failed is the error of the first item whose condition failed, when err
// is a cancellation for that reason.
func (t txItems) failed(err error) (error, bool) {
	i, ok := conditionFailed(err)
	if !ok || i >= len(t.fails) || t.fails[i] == nil {
		return nil, false
	}
	return t.fails[i], true
}

// commitItems are CommitChunk's writes: the chunk (its condition failing
// is ErrChunkDone), the batch (ErrLast; ErrRenumber when the commit adds
// a chunk), each model's daily usage (by model name), the claim of Next
// (ErrRaced) or the slots given back, then the fallback chunk and its
// ready entry (ErrRenumber). The same commit always gives the same items
// in the same order.
func (s *Store) commitItems(tenant string, c sched.Commit) txItems {
	ch := c.Chunk
	var next types.AttributeValue = &types.AttributeValueMemberNULL{Value: true}
	if c.Next != nil {
		next, _ = attributevalue.Marshal(c.Next.Next())
	}
	var tx txItems
	cu := &types.Update{
		TableName: &s.Table,
		Key:       key(chunksPK(ch.Batch), chunkSK(ch.Index)),
		UpdateExpression: aws.String("SET #st = :done, pattern = :p, out_bytes = :o, err_bytes = :e, attempt = :a, #next = :next, dead = :dead " +
			"REMOVE gsi3pk, gsi3sk"),
		ConditionExpression:      aws.String("#st = :claimed AND #run = :run"),
		ExpressionAttributeNames: map[string]string{"#st": "state", "#run": "run", "#next": "next"},
		ExpressionAttributeValues: item{":done": avS(string(batch.ChunkDone)), ":claimed": avS(string(batch.ChunkClaimed)),
			":run": avS(ch.Run), ":p": avS(ch.Pattern), ":a": avS(ch.Attempt), ":next": next, ":dead": &types.AttributeValueMemberBOOL{Value: ch.Dead},
			":o": avN64(ch.OutBytes), ":e": avN64(ch.ErrBytes)},
	}
	if c.Fallback != nil {
		cutRows(cu, ch)
	}
	tx.add(ErrChunkDone, types.TransactWriteItem{Update: cu})
	bu := &types.Update{
		TableName: &s.Table,
		Key:       key(batchPK(tenant), batchSK(ch.Batch)),
		UpdateExpression: aws.String("SET counts.completed = counts.completed + :c, counts.failed = counts.failed + :f, " +
			"#u.input_tokens = #u.input_tokens + :ui, #u.output_tokens = #u.output_tokens + :uo, #u.total_tokens = #u.total_tokens + :ut, " +
			"#u.cached_tokens = if_not_exists(#u.cached_tokens, :zero) + :uc, #u.reasoning_tokens = if_not_exists(#u.reasoning_tokens, :zero) + :ur " +
			"ADD chunks_done :one, ver :one, expired_rows :x, cancelled_rows :cx, dead_letter_count :dl, progress_completed :pc, progress_failed :pf"),
		ExpressionAttributeNames: map[string]string{"#u": "usage"},
		ExpressionAttributeValues: item{":c": avN64(c.Completed), ":f": avN64(c.Failed), ":x": avN64(c.Expired), ":cx": avN64(c.Cancelled), ":dl": avN64(c.DeadLetters),
			":ui": avN64(c.Usage.InputTokens), ":uo": avN64(c.Usage.OutputTokens), ":ut": avN64(c.Usage.TotalTokens), ":one": avN(1),
			":uc": avN64(c.Usage.CachedTokens), ":ur": avN64(c.Usage.ReasoningTokens), ":zero": avN(0),
			// The chunk's rows now count in counts: out of progress.
			":pc": avN64(-ch.ReportedCompleted), ":pf": avN64(-ch.ReportedFailed)},
	}
	if c.ReleaseCost {
		bu.UpdateExpression = aws.String(*bu.UpdateExpression + " REMOVE cost_holds.#hold")
		bu.ExpressionAttributeNames["#hold"] = strconv.Itoa(ch.Index)
	}
	batchFails := ErrLast
	switch {
	case c.Fallback != nil:
		// One chunk done, one more to do: never the last.
		addChunk(bu, c.Fallback.Chunk.Index)
		batchFails = ErrRenumber
	case c.Last:
		// The tick finalizes the batch if the finalize message is lost:
		// the batch moves in the by-due index to its finalize.
		set := finalizeIndex(tenant, ch.Batch, c.FinalizeDue)
		set["finalize_due"] = avN64(c.FinalizeDue.Unix())
		setFirst(bu, set)
	default:
		bu.ConditionExpression = aws.String("chunks_done < :lastbutone")
		bu.ExpressionAttributeValues[":lastbutone"] = avN(c.ChunksTotal - 1)
	}
	tx.add(batchFails, types.TransactWriteItem{Update: bu})
	tx.add(nil, s.usageItems(tenant, c.Day, c.KeyID, ch.Batch, c.UsageByModel)...)
	switch {
	case c.Next != nil:
		tx.add(ErrRaced, s.claimItems(*c.Next)...)
	case ch.Slots > 0:
		tx.add(nil, types.TransactWriteItem{Update: &types.Update{
			TableName: &s.Table, Key: capShardKey(ch.Model, ch.Shard),
			UpdateExpression:          aws.String("ADD inflight :n"),
			ExpressionAttributeValues: item{":n": avN(-ch.Slots)},
		}})
	}
	if fb := c.Fallback; fb != nil {
		it, _ := chunkItem(fb.Chunk) // plain fields and spans: cannot fail
		tx.add(ErrRenumber,
			types.TransactWriteItem{Put: &types.Put{TableName: &s.Table, Item: it, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
			types.TransactWriteItem{Put: &types.Put{TableName: &s.Table, Item: readyItem(fb.Ready), ConditionExpression: aws.String("attribute_not_exists(pk)")}})
	}
	return tx
}

// cutRows makes a chunk's commit update cu record the rows ch holds now,
// fewer than planned: its spans, first row and range, not only its count
// (they need not be a prefix; plan.Split cut them).
func cutRows(cu *types.Update, ch batch.Chunk) {
	set, remove := ", #rows = :rows, #start = :start, #end = :end, first_row = :fr", " REMOVE spans, "
	cu.ExpressionAttributeValues[":rows"], cu.ExpressionAttributeValues[":end"] = avN(ch.Rows), avN64(ch.End)
	cu.ExpressionAttributeValues[":start"], cu.ExpressionAttributeValues[":fr"] = avN64(ch.Start), avN(ch.FirstRow)
	if len(ch.Spans) > 0 {
		spans, _ := attributevalue.Marshal(ch.Spans) // a string: cannot fail
		set, remove = set+", spans = :spans", " REMOVE "
		cu.ExpressionAttributeValues[":spans"] = spans
	}
	cu.UpdateExpression = aws.String(strings.Replace(*cu.UpdateExpression, " REMOVE ", set+remove, 1))
	cu.ExpressionAttributeNames["#rows"], cu.ExpressionAttributeNames["#start"], cu.ExpressionAttributeNames["#end"] = "rows", "start", "end"
}

// setFirst makes update u set the attributes of set too, in front of its
// own and in the order of their names (one commit, one request).
func setFirst(u *types.Update, set item) {
	var sets []string
	for _, name := range slices.Sorted(maps.Keys(set)) {
		sets = append(sets, name+" = :"+name)
		u.ExpressionAttributeValues[":"+name] = set[name]
	}
	u.UpdateExpression = aws.String("SET " + strings.Join(sets, ", ") + ", " + strings.TrimPrefix(*u.UpdateExpression, "SET "))
}

// addChunk makes a commit's batch update bu count one chunk more, on
// condition that the batch has total, the new chunk's index.
func addChunk(bu *types.Update, total int) {
	bu.UpdateExpression = aws.String(strings.Replace(*bu.UpdateExpression, "ADD ", "ADD chunks_total :one, ", 1))
	bu.ConditionExpression = aws.String("chunks_total = :total")
	delete(bu.ExpressionAttributeValues, ":lastbutone")
	bu.ExpressionAttributeValues[":total"] = avN(total)
}

// CommitChunk marks a chunk done and adds its counts to the batch, adds its
// usage to the daily aggregates, and hands its slots on to Next or back to
// the pool, all in one transaction conditional on the chunk being claimed
// by this run. Errors: ErrChunkDone (not this run's: a duplicate, or taken
// over), ErrLast (it is the batch's last chunk: commit again with Last),
// ErrRaced (Next was taken meanwhile: pick again), ErrRenumber (the
// fallback chunk's number or entry is taken), ErrCommitUnknown (the
// token was used by a request that differs: read the chunk). A conflict
// with another transaction is retried, never reported; a retry of a commit
// that took effect although its call failed is recognised by the caller
// from the chunk's run (see Engine.commit).
func (s *Store) CommitChunk(ctx context.Context, tenant string, c sched.Commit) error {
	ch := c.Chunk
	if fb := c.Fallback; fb != nil && c.Next != nil && c.Next.Entry.Batch == ch.Batch && c.Next.Entry.Next == fb.Chunk.Index {
		// The chunk numbered so exists (a transaction may not name an
		// item twice): the count it was numbered from is stale.
		return ErrRenumber
	}
	tx := s.commitItems(tenant, c)
	// The token makes a retry of a commit that took effect a no-op on
	// DynamoDB; it names the run and everything the commit decided (a
	// fallback chunk numbered anew after ErrRenumber is another request).
	token := tokenOf("commit", ch.Batch, strconv.Itoa(ch.Index), ch.Run, ch.Attempt, strconv.FormatBool(c.Last), fmt.Sprint(c.Next), fallbackKey(c.Fallback))
	err := s.transact(ctx, token, tx.items)
	var mismatch *types.IdempotentParameterMismatchException
	if errors.As(err, &mismatch) {
		return fmt.Errorf("commit chunk %d of %s: %w: %w", ch.Index, ch.Batch, ErrCommitUnknown, err)
	}
	if failed, ok := tx.failed(err); ok {
		return failed
	}
	if err != nil {
		return fmt.Errorf("commit chunk %d of %s: %w", ch.Index, ch.Batch, err)
	}
	return nil
}

// fallbackKey names a commit's fallback chunk for its token: its number and
// its entry's.
func fallbackKey(fb *sched.FallbackChunk) string {
	if fb == nil {
		return ""
	}
	return fmt.Sprintf("%d:%s:%s", fb.Chunk.Index, fb.Ready.Model, fb.Ready.SK())
}

// tokenOf is a ClientRequestToken (at most 36 characters) for the parts.
func tokenOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:36]
}

// transact runs a transaction, retrying it with jittered backoff while
// DynamoDB cancels it for a conflict with another transaction on one of
// its items (TransactionConflict): a conflict says nothing about the
// conditions, so it is never reported as their failure.
func (s *Store) transact(ctx context.Context, token string, items []types.TransactWriteItem) error {
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items}
	if token != "" {
		in.ClientRequestToken = &token
	}
	for attempt := 0; ; attempt++ {
		_, err := s.DB.TransactWriteItems(ctx, in)
		if !isConflict(err) || attempt == 9 {
			return err
		}
		if err := backoff.Sleep(ctx, backoff.Full(backoff.Exponential(attempt+1, 20*time.Millisecond, 20*time.Millisecond<<5))); err != nil {
			return err
		}
	}
}

func isConflict(err error) bool {
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) {
		var tcf *types.TransactionConflictException
		return errors.As(err, &tcf)
	}
	conflict := false
	for _, r := range tc.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "ConditionalCheckFailed":
			return false
		case "TransactionConflict":
			conflict = true
		}
	}
	return conflict
}

// conditionFailed returns the index of the first item whose condition
// failed, when err is a cancellation for that reason.
func conditionFailed(err error) (int, bool) {
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) {
		return 0, false
	}
	for i, r := range tc.CancellationReasons {
		if aws.ToString(r.Code) == "ConditionalCheckFailed" {
			return i, true
		}
	}
	return 0, false
}

// ErrLeaseLost means the chunk is no longer the run's.
var ErrLeaseLost = errors.New("store: lease lost")

// RenewLease moves a claimed chunk's lease to until, if run still holds it.
func (s *Store) RenewLease(ctx context.Context, batchID string, chunk int, run string, until time.Time) error {
	return s.moveLease(ctx, batchID, chunk, run, until, leaseMove{what: "renew lease"})
}

// leaseMove is what a lease move adds to the plain one (RenewLease): the
// fence's part of the update and of the condition, for execution exec.
type leaseMove struct {
	what      string // the operation, for errors
	exec      string // "": the fence is not involved
	set, cond string // appended to the update and to the condition
}

// moveLease moves the lease of chunk, claimed by run, to until, with m's
// additions; ErrLeaseLost when the condition fails.
func (s *Store) moveLease(ctx context.Context, batchID string, chunk int, run string, until time.Time, m leaseMove) error {
	lpk, lsk := leaseAttrs(batchID, chunk, until)
	names := map[string]string{"#st": "state", "#run": "run"}
	vals := item{":claimed": avS(string(batch.ChunkClaimed)), ":run": avS(run), ":lease": avN64(until.UnixMilli()), ":lpk": lpk, ":lsk": lsk}
	if m.exec != "" {
		names["#exec"], vals[":me"] = "exec", avS(m.exec)
	}
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(chunksPK(batchID), chunkSK(chunk)),
		UpdateExpression:          aws.String("SET lease = :lease, gsi3pk = :lpk, gsi3sk = :lsk" + m.set),
		ConditionExpression:       aws.String("#st = :claimed AND #run = :run" + m.cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("%s of chunk %d of %s: %w", m.what, chunk, batchID, err)
	}
	return nil
}

// Takeover gives a claimed chunk whose lease ended before now to a new
// run, counting an attempt, and returns the chunk as it now is. The lease
// is checked on the chunk itself: the by-lease index that listed it is
// eventually consistent, and a renewal since makes the takeover ErrRaced.
func (s *Store) Takeover(ctx context.Context, c batch.Chunk, run string, now, lease time.Time) (batch.Chunk, error) {
	lpk, lsk := leaseAttrs(c.Batch, c.Index, lease)
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(chunksPK(c.Batch), chunkSK(c.Index)),
		// The old run's fence goes: it is no claim on the new run, whose
		// executor's clock may not see it ended yet.
		UpdateExpression:         aws.String("SET #run = :new, lease = :lease, gsi3pk = :lpk, gsi3sk = :lsk ADD attempts :one REMOVE #exec, exec_until"),
		ConditionExpression:      aws.String("#st = :claimed AND #run = :old AND lease < :now"),
		ExpressionAttributeNames: map[string]string{"#st": "state", "#run": "run", "#exec": "exec"},
		ExpressionAttributeValues: item{":claimed": avS(string(batch.ChunkClaimed)), ":old": avS(c.Run), ":new": avS(run),
			":now": avN64(now.UnixMilli()), ":lease": avN64(lease.UnixMilli()), ":lpk": lpk, ":lsk": lsk, ":one": avN(1)},
		ReturnValues: types.ReturnValueAllNew,
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return c, ErrRaced
	}
	if err != nil {
		return c, fmt.Errorf("take over chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	var nc batch.Chunk
	if err := attributevalue.UnmarshalMap(out.Attributes, &nc); err != nil {
		return c, fmt.Errorf("take over chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	return nc, nil
}

// ExpiredLeases lists up to limit claimed chunks whose lease ended before
// now, from the sparse lease index: only claimed chunks are in it.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]batch.Chunk, error) {
	var cs []batch.Chunk
	for shard := range leaseShards {
		out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:              &s.Table,
			IndexName:              aws.String(resources.ByLease),
			KeyConditionExpression: aws.String("gsi3pk = :pk AND gsi3sk < :now"),
			ExpressionAttributeValues: item{":pk": avS(leasePK(shard)),
				":now": avS(leaseCutoff(now))},
			Limit: aws.Int32(int32(limit)),
		})
		if err != nil {
			return nil, fmt.Errorf("expired leases: %w", err)
		}
		for _, it := range out.Items {
			var c batch.Chunk
			if err := attributevalue.UnmarshalMap(it, &c); err != nil {
				return nil, fmt.Errorf("expired leases: %w", err)
			}
			cs = append(cs, c)
		}
	}
	return cs, nil
}

const duePK = "DUE"

func dueSK(at int64, tenant, id string) string { return fmt.Sprintf("%010d#%s#%s", at, id, tenant) }

// dueCutoff bounds the due sort keys (dueSK) of batches due at or before
// now: they sort below it.
func dueCutoff(now time.Time) string { return fmt.Sprintf("%010d", now.Unix()+1) }

// DueBatches lists up to limit active batches the tick must look at now,
// from the sparse due index (see batch.Batch.Due).
func (s *Store) DueBatches(ctx context.Context, now time.Time, limit int) ([]ActiveRef, error) {
	out, err := s.DB.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &s.Table,
		IndexName:                 aws.String(resources.ByDue),
		KeyConditionExpression:    aws.String("gsi4pk = :pk AND gsi4sk < :now"),
		ExpressionAttributeValues: item{":pk": avS(duePK), ":now": avS(dueCutoff(now))},
		ProjectionExpression:      aws.String("tenant, id, priority"),
		Limit:                     aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("due batches: %w", err)
	}
	return activeRefs(out.Items)
}

// InFlight returns the capacity slots a model has out, over its shards.
func (s *Store) InFlight(ctx context.Context, model string) (int, error) {
	shards, err := s.capShards(ctx, model)
	n := 0
	for _, v := range shards {
		n += v
	}
	return n, err
}

// CapShards returns the slots in flight in each of model's capacity
// shards that has an item (relay admin models).
func (s *Store) CapShards(ctx context.Context, model string) (map[int]int, error) {
	return s.capShards(ctx, model)
}

// ReadyEntries returns model's ready entries in the order claims take them
// (relay admin models and batch inspect).
func (s *Store) ReadyEntries(ctx context.Context, model string) ([]sched.Ready, error) {
	var rs []sched.Ready
	_, err := s.page(ctx, readyPK(model), "", "", true, 1<<30, nil, func(it item) error {
		var r sched.Ready
		if err := attributevalue.UnmarshalMap(it, &r); err != nil {
			return err
		}
		rs = append(rs, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ready entries of %s: %w", model, err)
	}
	return rs, nil
}

// FreeSlots returns the room left in each of a model's capacity shards.
func (s *Store) FreeSlots(ctx context.Context, model string, quotas []int) ([]int, error) {
	shards, err := s.capShards(ctx, model)
	free := append([]int(nil), quotas...)
	for k, n := range shards {
		if k < len(free) {
			free[k] -= n
		}
	}
	return free, err
}

// capShards reads a model's capacity shards: slots in flight by shard.
func (s *Store) capShards(ctx context.Context, model string) (map[int]int, error) {
	shards := map[int]int{}
	_, err := s.page(ctx, capPK(model), "CAP#", "", true, 1<<30, nil, func(it item) error {
		k, n, ok, err := capShardOf(it)
		if err != nil {
			return err
		}
		if ok {
			shards[k] = n
		}
		return nil
	})
	return shards, err
}

// capShardOf reads a capacity shard's item: its shard number and the slots
// it has in flight; ok is false for an item whose sort key names no shard.
func capShardOf(it item) (shard, inflight int, ok bool, err error) {
	var v struct {
		SK       string `dynamodbav:"sk"`
		InFlight int    `dynamodbav:"inflight"`
	}
	if err := attributevalue.UnmarshalMap(it, &v); err != nil {
		return 0, 0, false, err
	}
	if _, err := fmt.Sscanf(v.SK, "CAP#%d", &shard); err != nil {
		return 0, 0, false, nil
	}
	return shard, v.InFlight, true, nil
}
