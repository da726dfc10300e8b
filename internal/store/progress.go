package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/relaybatch/relay/internal/batch"
)

// ReportProgress records that the run of chunk c has done done rows
// (docs/design.md "Progress"): the chunk's reported counts move from
// c.Reported* to done, and the batch's progress by the difference, in one
// transaction conditional on the run still holding the chunk and on the
// chunk's reported counts being what the run last knew. Counts only move
// up: a component below what an earlier run reported stays where it is.
// ErrLeaseLost when the chunk is no longer the run's.
func (s *Store) ReportProgress(ctx context.Context, c batch.Chunk, done batch.Counts) (batch.Counts, error) {
	to := batch.Counts{Completed: max(done.Completed, c.ReportedCompleted), Failed: max(done.Failed, c.ReportedFailed)}
	dc, df := to.Completed-c.ReportedCompleted, to.Failed-c.ReportedFailed
	if dc == 0 && df == 0 {
		return to, nil
	}
	err := s.transact(ctx, "", []types.TransactWriteItem{
		{Update: &types.Update{
			TableName: &s.Table, Key: key(chunksPK(c.Batch), chunkSK(c.Index)),
			UpdateExpression: aws.String("SET reported_completed = :c, reported_failed = :f"),
			ConditionExpression: aws.String("#st = :claimed AND #run = :run AND " +
				"(attribute_not_exists(reported_completed) OR (reported_completed = :pc AND reported_failed = :pf))"),
			ExpressionAttributeNames: map[string]string{"#st": "state", "#run": "run"},
			ExpressionAttributeValues: item{":claimed": avS(string(batch.ChunkClaimed)), ":run": avS(c.Run),
				":c": avN64(to.Completed), ":f": avN64(to.Failed), ":pc": avN64(c.ReportedCompleted), ":pf": avN64(c.ReportedFailed)},
		}},
		{Update: &types.Update{
			TableName: &s.Table, Key: key(batchPK(c.Tenant), batchSK(c.Batch)),
			UpdateExpression:          aws.String("ADD progress_completed :dc, progress_failed :df"),
			ConditionExpression:       aws.String("attribute_exists(pk)"),
			ExpressionAttributeValues: item{":dc": avN64(dc), ":df": avN64(df)},
		}},
	})
	if _, ok := conditionFailed(err); ok {
		return batch.Counts{}, ErrLeaseLost
	}
	if err != nil {
		return batch.Counts{}, fmt.Errorf("report progress of chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	return to, nil
}
