package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/sched"
)

// The execution fence (docs/design.md "Scheduling", fence): a claimed
// chunk's item carries `exec`, the id of the one execution of its run that
// may send rows, and `exec_until`, when that execution's claim ends unless
// renewed. It is renewed with the run's lease (RenewExec), so exec_until is
// the lease, and a takeover (which needs the lease ended) never waits for it.

// ErrFenced means the run is not this execution's to run: another live
// execution of the run holds the fence, or the chunk is no longer the
// run's (done, or taken over).
var ErrFenced = errors.New("store: another execution holds the run")

// TakeFence makes exec the one execution of run on a claimed chunk, if no
// other live execution holds it (none did, its claim ended before now, or
// it is exec's own), and moves the run's lease to until with it. It
// returns the chunk as it now is; ErrFenced otherwise.
func (s *Store) TakeFence(ctx context.Context, batchID string, chunk int, run, exec string, now, until time.Time) (batch.Chunk, error) {
	lpk, lsk := leaseAttrs(batchID, chunk, until)
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(chunksPK(batchID), chunkSK(chunk)),
		UpdateExpression: aws.String("SET #exec = :me, exec_until = :until, lease = :until, gsi3pk = :lpk, gsi3sk = :lsk"),
		ConditionExpression: aws.String("#st = :claimed AND #run = :run AND " +
			"(attribute_not_exists(#exec) OR exec_until < :now OR #exec = :me)"),
		ExpressionAttributeNames: map[string]string{"#st": "state", "#run": "run", "#exec": "exec"},
		ExpressionAttributeValues: item{":claimed": avS(string(batch.ChunkClaimed)), ":run": avS(run), ":me": avS(exec),
			":now": avN64(now.UnixMilli()), ":until": avN64(until.UnixMilli()), ":lpk": lpk, ":lsk": lsk},
		ReturnValues: types.ReturnValueAllNew,
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return batch.Chunk{}, ErrFenced
	}
	if err != nil {
		return batch.Chunk{}, fmt.Errorf("take the fence of chunk %d of %s: %w", chunk, batchID, err)
	}
	var c batch.Chunk
	if err := attributevalue.UnmarshalMap(out.Attributes, &c); err != nil {
		return batch.Chunk{}, fmt.Errorf("take the fence of chunk %d of %s: %w", chunk, batchID, err)
	}
	return c, nil
}

// RenewExec moves a claimed chunk's lease and its fence to until, if run
// still holds the chunk and exec the fence; ErrLeaseLost otherwise.
func (s *Store) RenewExec(ctx context.Context, batchID string, chunk int, run, exec string, until time.Time) error {
	return s.moveLease(ctx, batchID, chunk, run, until, leaseMove{what: "renew lease", exec: exec,
		set: ", exec_until = :lease", cond: " AND #exec = :me"})
}

// HandOver ends execution exec of run without a commit, so the run's next
// delivery can take the fence: it removes the fence if exec holds it and
// moves the run's lease to until (past the delay of a message sent again).
// ErrLeaseLost when the chunk is no longer the run's; a fence held by
// another execution is left as it is.
func (s *Store) HandOver(ctx context.Context, batchID string, chunk int, run, exec string, until time.Time) error {
	return s.moveLease(ctx, batchID, chunk, run, until, leaseMove{what: "hand over", exec: exec,
		set: " REMOVE #exec, exec_until", cond: " AND (attribute_not_exists(#exec) OR #exec = :me)"})
}

// ReleaseFence removes exec's fence from a chunk, if it holds it, and
// leaves the lease as it is: the execution ended without a commit and
// without sending its run again (it failed; SQS delivers the message
// again).
func (s *Store) ReleaseFence(ctx context.Context, batchID string, chunk int, exec string) error {
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(chunksPK(batchID), chunkSK(chunk)),
		UpdateExpression:          aws.String("REMOVE #exec, exec_until"),
		ConditionExpression:       aws.String("#exec = :me"),
		ExpressionAttributeNames:  map[string]string{"#exec": "exec"},
		ExpressionAttributeValues: item{":me": avS(exec)},
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release the fence of chunk %d of %s: %w", chunk, batchID, err)
	}
	return nil
}

// CommitSplit commits the rows a run answered before it stopped for want
// of time or lease, and records the rest as a new chunk that holds the
// slots next (docs/design.md "Scheduling", split), in one transaction: c's
// chunk done with its (fewer) rows and range, the batch's counts and one
// chunk more (conditional on rest.Index being its chunk count), the usage,
// and rest put claimed by run restRun until lease for c's slots and shard.
// Errors as CommitChunk's: ErrChunkDone (not this run's), ErrRaced (the
// batch has another chunk count: read it again and number rest anew).
func (s *Store) CommitSplit(ctx context.Context, tenant string, c sched.Commit, rest batch.Chunk, restRun string, lease time.Time) error {
	ch := c.Chunk
	// CommitChunk's items, for a commit that is never the last and whose
	// slots stay with rest: given back by no item.
	c.Next, c.Last, c.Fallback, c.Chunk.Slots = nil, false, nil, 0
	tx := s.commitItems(tenant, c)
	// The done chunk's rows as plan.Split cut them.
	cutRows(tx.items[0].Update, ch)
	addChunk(tx.items[1].Update, rest.Index)
	if c.ReleaseCost {
		// The done rows' hold goes on with the rest, its rows among them.
		holdFor(tx.items[1].Update, rest)
	}
	tx.fails[1] = ErrRaced

	rest.State, rest.Run, rest.Lease, rest.Attempts = batch.ChunkClaimed, restRun, lease.UnixMilli(), 1
	rest.Slots, rest.Shard = ch.Slots, ch.Shard
	it, err := chunkItem(rest)
	if err != nil {
		return fmt.Errorf("split chunk %d of %s: %w", ch.Index, ch.Batch, err)
	}
	it["gsi3pk"], it["gsi3sk"] = leaseAttrs(rest.Batch, rest.Index, lease)
	tx.add(ErrRaced, types.TransactWriteItem{Put: &types.Put{TableName: &s.Table, Item: it,
		ConditionExpression: aws.String("attribute_not_exists(pk)")}})

	token := tokenOf("split", ch.Batch, strconv.Itoa(ch.Index), ch.Run, ch.Attempt, strconv.Itoa(rest.Index), restRun)
	err = s.transact(ctx, token, tx.items)
	if failed, ok := tx.failed(err); ok {
		return failed
	}
	if err != nil {
		return fmt.Errorf("split chunk %d of %s: %w", ch.Index, ch.Batch, err)
	}
	return nil
}

// holdFor makes a commit's batch update bu hold rest's most under its
// index (batch.Batch.CostHolds).
func holdFor(bu *types.Update, rest batch.Chunk) {
	bu.UpdateExpression = aws.String(strings.Replace(*bu.UpdateExpression, "SET ", "SET cost_holds.#rest = :rest, ", 1))
	bu.ExpressionAttributeNames["#rest"] = strconv.Itoa(rest.Index)
	bu.ExpressionAttributeValues[":rest"] = avUSD(rest.MostCost)
}
