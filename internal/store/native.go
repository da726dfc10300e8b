package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/relaybatch/relay/internal/batch"
)

// A native batch's chunk groups (batch.Group) are items beside its chunks,
// B#<batch> / NATIVE#<index:4> (docs/design.md "Native batches").

func groupSK(i int) string { return fmt.Sprintf("NATIVE#%04d", i) }

// PutGroups records groups not recorded yet; a group already there keeps
// its state.
func (s *Store) PutGroups(ctx context.Context, gs []batch.Group) error {
	for _, g := range gs {
		if err := s.put(ctx, chunksPK(g.Batch), groupSK(g.Index), g, nil, true); err != nil && err != errConflict {
			return err
		}
	}
	return nil
}

// Group reads group i of a batch.
func (s *Store) Group(ctx context.Context, batchID string, i int) (batch.Group, error) {
	var g batch.Group
	_, err := s.get(ctx, chunksPK(batchID), groupSK(i), &g)
	return g, notFound(err, ErrBatchNotFound)
}

// UpdateGroup changes group i of a batch through fn, conditional on what
// fn read.
func (s *Store) UpdateGroup(ctx context.Context, batchID string, i int, fn func(*batch.Group) error) (batch.Group, error) {
	g, err := update(ctx, s, chunksPK(batchID), groupSK(i), nil, fn)
	return g, notFound(err, ErrBatchNotFound)
}

// Groups lists a batch's groups in order.
func (s *Store) Groups(ctx context.Context, batchID string) ([]batch.Group, error) {
	var gs []batch.Group
	_, err := s.page(ctx, chunksPK(batchID), "NATIVE#", "", true, 1<<30, nil, func(it item) error {
		var g batch.Group
		if err := attributevalue.UnmarshalMap(it, &g); err != nil {
			return err
		}
		gs = append(gs, g)
		return nil
	})
	return gs, err
}
