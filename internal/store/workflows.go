package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/workflow"
)

// A workflow record (docs/api.md "Workflow records") keeps one item beside its batch's chunks,
// B#<batch> / WF#<row>: its checkpoint, rewritten after every step, and a
// lease naming the one executor that may drive it, so a duplicate delivery
// of its work message never runs a step twice. The item goes once the
// record's chunk commits; a ttl covers records whose batch was deleted.

// workflowTTL is how long a checkpoint outlives its last write.
const workflowTTL = 8 * 24 * time.Hour

// ErrWorkflowLeaseLost means another executor took the record over: this
// one must stop without writing anything else.
var ErrWorkflowLeaseLost = errors.New("store: workflow lease lost")

// WorkflowBusyError means another executor holds the record's lease.
type WorkflowBusyError struct {
	Until time.Time // when the lease runs out unless renewed
}

func (e *WorkflowBusyError) Error() string {
	return fmt.Sprintf("store: workflow record is leased until %s", e.Until.Format(time.RFC3339))
}

// WorkflowCheckpoint is what a record's item holds.
type WorkflowCheckpoint struct {
	State workflow.State
	// ResultsKey, when set, is the S3 object holding State.Results, which
	// were too big for the item (400 KB); State.Results is then empty.
	ResultsKey string
	// Counted says State.Usage is in the tenant's daily usage already
	// (SaveWorkflow): every checkpoint but one written before steps counted
	// their spend.
	Counted bool
}

func workflowSK(row int) string { return fmt.Sprintf("WF#%07d", row) }

var workflowNames = map[string]string{"#cp": "checkpoint", "#step": "step", "#owner": "lease_owner", "#until": "lease_until", "#ttl": "ttl", "#rk": "results_key", "#counted": "counted"}

func namesFor(expr ...string) map[string]string {
	m := map[string]string{}
	for _, n := range expr {
		m[n] = workflowNames[n]
	}
	return m
}

// AcquireWorkflow takes the lease of a record for owner until `until` and
// returns its checkpoint, the zero one for a record not started. A lease
// held by another owner and not run out is a *WorkflowBusyError.
func (s *Store) AcquireWorkflow(ctx context.Context, batchID string, row int, owner string, now, until time.Time) (WorkflowCheckpoint, error) {
	k := key(chunksPK(batchID), workflowSK(row))
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &s.Table,
		Key:                      k,
		UpdateExpression:         aws.String("SET #owner = :me, #until = :until, #ttl = :ttl"),
		ConditionExpression:      aws.String("attribute_not_exists(#until) OR #until < :now OR #owner = :me"),
		ExpressionAttributeNames: namesFor("#owner", "#until", "#ttl"),
		ExpressionAttributeValues: item{":me": avS(owner), ":until": avN64(until.UnixMilli()), ":now": avN64(now.UnixMilli()),
			":ttl": avN64(now.Add(workflowTTL).Unix())},
		ReturnValues: types.ReturnValueAllNew,
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		var held struct {
			Until int64 `dynamodbav:"lease_until"`
		}
		if _, gerr := s.get(ctx, chunksPK(batchID), workflowSK(row), &held); gerr != nil {
			return WorkflowCheckpoint{}, gerr
		}
		return WorkflowCheckpoint{}, &WorkflowBusyError{Until: time.UnixMilli(held.Until)}
	}
	if err != nil {
		return WorkflowCheckpoint{}, fmt.Errorf("lease workflow %d of %s: %w", row, batchID, err)
	}
	var it struct {
		Checkpoint string `dynamodbav:"checkpoint"`
		ResultsKey string `dynamodbav:"results_key"`
		Counted    bool   `dynamodbav:"counted"`
	}
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return WorkflowCheckpoint{}, fmt.Errorf("unmarshal workflow %d of %s: %w", row, batchID, err)
	}
	cp := WorkflowCheckpoint{ResultsKey: it.ResultsKey, Counted: it.Counted}
	if it.Checkpoint != "" {
		if err := json.Unmarshal([]byte(it.Checkpoint), &cp.State); err != nil {
			return WorkflowCheckpoint{}, fmt.Errorf("decode workflow %d of %s: %w", row, batchID, err)
		}
	}
	return cp, nil
}

// WorkflowSpent reads what the steps a record saved spent (its
// checkpoint's usage) and whether the tenant's usage counts it already
// (WorkflowCheckpoint.Counted); zero for a record without a checkpoint.
func (s *Store) WorkflowSpent(ctx context.Context, batchID string, row int) (workflow.Usage, bool, error) {
	var it struct {
		Checkpoint string `dynamodbav:"checkpoint"`
		Counted    bool   `dynamodbav:"counted"`
	}
	if _, err := s.get(ctx, chunksPK(batchID), workflowSK(row), &it); errors.Is(err, errMissing) || (err == nil && it.Checkpoint == "") {
		return workflow.Usage{}, false, nil
	} else if err != nil {
		return workflow.Usage{}, false, fmt.Errorf("read workflow %d of %s: %w", row, batchID, err)
	}
	var st struct {
		Usage workflow.Usage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(it.Checkpoint), &st); err != nil {
		return workflow.Usage{}, false, fmt.Errorf("decode workflow %d of %s: %w", row, batchID, err)
	}
	return st.Usage, it.Counted, nil
}

// Spend is what a record's step spent upstream: its tokens by the model
// that served them, added to the tenant's daily usage (usagePK) under Day
// in the same write as the step's checkpoint, so a budget sees a record's
// spend before its next step (docs/design.md "Governance").
type Spend struct {
	Tenant, Day string
	KeyID       string // the batch's, for the usage by key and batch
	ByModel     map[string]sched.UsageAgg
}

// SaveWorkflow writes a record's checkpoint, with what its step spent, and
// renews owner's lease until `until`, only while owner holds the lease
// (else ErrWorkflowLeaseLost). The checkpoint is marked counted: its usage
// is in the tenant's daily usage already. A step's spend counts once: the
// write is conditional on the checkpoint being of an earlier step, and a
// write refused after an ambiguous try that took effect is recognized.
func (s *Store) SaveWorkflow(ctx context.Context, batchID string, row int, owner string, cp WorkflowCheckpoint, until time.Time, spend Spend) error {
	st, err := json.Marshal(cp.State)
	if err != nil {
		return fmt.Errorf("encode workflow %d of %s: %w", row, batchID, err)
	}
	set := "SET #cp = :cp, #step = :step, #until = :until, #ttl = :ttl, #counted = :true"
	names := namesFor("#cp", "#step", "#until", "#ttl", "#owner", "#rk", "#counted")
	values := item{":cp": avS(string(st)), ":step": avN(cp.State.Step), ":until": avN64(until.UnixMilli()),
		":ttl": avN64(time.Now().Add(workflowTTL).Unix()), ":me": avS(owner), ":true": &types.AttributeValueMemberBOOL{Value: true}}
	if cp.ResultsKey != "" {
		set += ", #rk = :rk"
		values[":rk"] = avS(cp.ResultsKey)
	} else {
		set += " REMOVE #rk"
	}
	up := &types.Update{
		TableName:                 &s.Table,
		Key:                       key(chunksPK(batchID), workflowSK(row)),
		UpdateExpression:          aws.String(set),
		ConditionExpression:       aws.String("#owner = :me AND (attribute_not_exists(#step) OR #step < :step)"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
	items := append([]types.TransactWriteItem{{Update: up}}, s.usageItems(spend.Tenant, spend.Day, spend.KeyID, batchID, spend.ByModel)...)
	if len(items) == 1 {
		_, err = s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: up.TableName, Key: up.Key,
			UpdateExpression: up.UpdateExpression, ConditionExpression: up.ConditionExpression,
			ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	} else {
		err = s.transact(ctx, tokenOf("wf", batchID, strconv.Itoa(row), strconv.Itoa(cp.State.Step), owner), items)
	}
	var cf *types.ConditionalCheckFailedException
	if _, failed := conditionFailed(err); failed || errors.As(err, &cf) {
		return s.savedAlready(ctx, batchID, row, owner, cp.State.Step)
	}
	if err != nil {
		return fmt.Errorf("save workflow %d of %s at step %d: %w", row, batchID, cp.State.Step, err)
	}
	return nil
}

// savedAlready tells a refused save of step that an earlier, ambiguous try
// of it took effect (nil) from a lease taken over (ErrWorkflowLeaseLost).
func (s *Store) savedAlready(ctx context.Context, batchID string, row int, owner string, step int) error {
	var it struct {
		Owner string `dynamodbav:"lease_owner"`
		Step  int    `dynamodbav:"step"`
	}
	if _, err := s.get(ctx, chunksPK(batchID), workflowSK(row), &it); err != nil && !errors.Is(err, errMissing) {
		return fmt.Errorf("read workflow %d of %s after a refused save: %w", row, batchID, err)
	}
	if it.Owner == owner && it.Step >= step {
		return nil
	}
	return ErrWorkflowLeaseLost
}

// ReleaseWorkflow gives up owner's lease, if owner still holds it, so the
// record's next message need not wait for it to run out.
func (s *Store) ReleaseWorkflow(ctx context.Context, batchID string, row int, owner string) error {
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.Table,
		Key:                       key(chunksPK(batchID), workflowSK(row)),
		UpdateExpression:          aws.String("REMOVE #owner, #until"),
		ConditionExpression:       aws.String("#owner = :me"),
		ExpressionAttributeNames:  namesFor("#owner", "#until"),
		ExpressionAttributeValues: item{":me": avS(owner)},
	})
	var cf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &cf) {
		return fmt.Errorf("release workflow %d of %s: %w", row, batchID, err)
	}
	return nil
}

// DeleteWorkflow removes a record's item once its chunk has committed.
func (s *Store) DeleteWorkflow(ctx context.Context, batchID string, row int) error {
	return s.delete(ctx, chunksPK(batchID), workflowSK(row))
}

// SetChunkSlots changes how much of its model's capacity a claimed chunk
// holds, in one transaction with its capacity shard (of quota slots): a
// waiting workflow record gives its slots back (to = 0) and takes them
// again when it resumes. The shard is c.Shard, recorded on the chunk: a
// chunk holding none may take slots from any shard (Engine.TakeSlots). It
// fails with ErrNoCapacity when the shard has no room, and ErrChunkDone
// when the chunk is no longer the run's with c.Slots.
func (s *Store) SetChunkSlots(ctx context.Context, c batch.Chunk, to, quota int) error {
	delta := to - c.Slots
	if delta == 0 {
		return nil
	}
	capUpdate := &types.Update{
		TableName:                 &s.Table,
		Key:                       capShardKey(c.Model, c.Shard),
		UpdateExpression:          aws.String("ADD inflight :n"),
		ExpressionAttributeValues: item{":n": avN(delta)},
	}
	if delta > 0 {
		capUpdate.ConditionExpression = aws.String("attribute_not_exists(inflight) OR inflight <= :room")
		capUpdate.ExpressionAttributeValues[":room"] = avN(quota - delta)
	}
	err := s.transact(ctx, "", []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                &s.Table,
			Key:                      key(chunksPK(c.Batch), chunkSK(c.Index)),
			UpdateExpression:         aws.String("SET slots = :to, #shard = :shard"),
			ConditionExpression:      aws.String("#st = :claimed AND slots = :from AND #run = :run"),
			ExpressionAttributeNames: map[string]string{"#st": "state", "#run": "run", "#shard": "shard"},
			ExpressionAttributeValues: item{":to": avN(to), ":from": avN(c.Slots), ":run": avS(c.Run), ":shard": avN(c.Shard),
				":claimed": avS(string(batch.ChunkClaimed))},
		}},
		{Update: capUpdate},
	})
	if failed, ok := conditionFailed(err); ok {
		if failed == 1 {
			return ErrNoCapacity
		}
		return ErrChunkDone
	}
	if err != nil {
		return fmt.Errorf("set slots of chunk %d of %s to %d: %w", c.Index, c.Batch, to, err)
	}
	return nil
}
