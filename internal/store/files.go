package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/file"
)

func notFound(err error, nf error) error {
	if errors.Is(err, errMissing) {
		return nf
	}
	return err
}

// Files and uploads are items of their tenant's partition.
func fileSK(id string) string   { return "FILE#" + id }
func uploadSK(id string) string { return "UPLOAD#" + id }

// PutFile implements files.Store.
func (s *Store) PutFile(ctx context.Context, f file.File) error {
	return s.put(ctx, tenantPK(f.Tenant), fileSK(f.ID), f, nil, true)
}

// GetFile implements files.Store.
func (s *Store) GetFile(ctx context.Context, tenant, id string) (file.File, error) {
	var f file.File
	_, err := s.get(ctx, tenantPK(tenant), fileSK(id), &f)
	return f, notFound(err, file.ErrNotFound)
}

// ListFiles implements files.Store.
func (s *Store) ListFiles(ctx context.Context, tenant string, p file.Page) ([]file.File, bool, error) {
	var filter *queryFilter
	if p.Filter != "" {
		filter = &queryFilter{expr: "purpose = :purpose", values: item{":purpose": &types.AttributeValueMemberS{Value: p.Filter}}}
	}
	after := ""
	if p.After != "" {
		after = fileSK(p.After)
	}
	var fs []file.File
	more, err := s.page(ctx, tenantPK(tenant), "FILE#", after, p.Order == "asc", p.Limit, filter, func(it item) error {
		var f file.File
		if err := attributevalue.UnmarshalMap(it, &f); err != nil {
			return err
		}
		fs = append(fs, f)
		return nil
	})
	return fs, more, err
}

// UpdateFile implements files.Store.
func (s *Store) UpdateFile(ctx context.Context, tenant, id string, fn func(*file.File) error) (file.File, error) {
	f, err := update(ctx, s, tenantPK(tenant), fileSK(id), nil, fn)
	return f, notFound(err, file.ErrNotFound)
}

// DeleteFile implements files.Store.
func (s *Store) DeleteFile(ctx context.Context, tenant, id string) error {
	return s.delete(ctx, tenantPK(tenant), fileSK(id))
}

// PutUpload implements files.Store.
func (s *Store) PutUpload(ctx context.Context, u file.Upload) error {
	return s.put(ctx, tenantPK(u.Tenant), uploadSK(u.ID), u, nil, true)
}

// GetUpload implements files.Store.
func (s *Store) GetUpload(ctx context.Context, tenant, id string) (file.Upload, error) {
	var u file.Upload
	_, err := s.get(ctx, tenantPK(tenant), uploadSK(id), &u)
	return u, notFound(err, file.ErrNotFound)
}

// UpdateUpload implements files.Store.
func (s *Store) UpdateUpload(ctx context.Context, tenant, id string, fn func(*file.Upload) error) (file.Upload, error) {
	u, err := update(ctx, s, tenantPK(tenant), uploadSK(id), nil, fn)
	return u, notFound(err, file.ErrNotFound)
}

// PutFileOverwrite writes a file record whatever is there: output files
// have ids derived from their batch, so a repeated finalize rewrites the
// same record.
func (s *Store) PutFileOverwrite(ctx context.Context, f file.File) error {
	return s.put(ctx, tenantPK(f.Tenant), fileSK(f.ID), f, nil, false)
}

// ErrBatchEnded is PutBatchFile's answer when the batch has ended (or is
// gone): its files are written already, and may have been deleted since.
var ErrBatchEnded = errors.New("store: the batch has ended")

// PutBatchFile writes an output or error file record of batch batchID,
// whatever is there (its id derives from the batch: a repeated finalize
// rewrites the same record), while the batch has not ended. A finalizer
// that read the batch before another ended it cannot bring back a record
// the user deleted since (docs/design.md "Message types", finalize).
func (s *Store) PutBatchFile(ctx context.Context, f file.File, batchID string) error {
	it, err := itemAt(tenantPK(f.Tenant), fileSK(f.ID), f, nil)
	if err != nil {
		return err
	}
	err = s.transact(ctx, "", []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{
			TableName: &s.Table, Key: key(tenantPK(f.Tenant), batchSK(batchID)),
			ConditionExpression:      aws.String("attribute_exists(pk) AND NOT (#st IN (:c, :f, :e, :x))"),
			ExpressionAttributeNames: map[string]string{"#st": "status"},
			ExpressionAttributeValues: item{":c": avS(string(batch.Completed)), ":f": avS(string(batch.Failed)),
				":e": avS(string(batch.Expired)), ":x": avS(string(batch.Cancelled))},
		}},
		{Put: &types.Put{TableName: &s.Table, Item: it}},
	})
	if i, ok := conditionFailed(err); ok && i == 0 {
		return ErrBatchEnded
	}
	if err != nil {
		return fmt.Errorf("put file %s of batch %s: %w", f.ID, batchID, err)
	}
	return nil
}

// AddFileReader implements files.Store: batchID joins the file's readers
// in one atomic write (ADD to a string set), so that many batches created
// from one file at once do not contend on its record; file.ErrNotFound
// when the file is gone, or deleted with no reader left. It moves the
// record's version, so a read-modify-write (UpdateFile) meanwhile retries.
func (s *Store) AddFileReader(ctx context.Context, tenant, id, batchID string) error {
	_, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(tenantPK(tenant), fileSK(id)),
		UpdateExpression:    aws.String("ADD readers :b, ver :one"),
		ConditionExpression: aws.String("attribute_exists(pk) AND (attribute_not_exists(deleted) OR deleted = :f OR attribute_exists(readers))"),
		ExpressionAttributeValues: item{":b": &types.AttributeValueMemberSS{Value: []string{batchID}}, ":one": avN(1),
			":f": &types.AttributeValueMemberBOOL{Value: false}},
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return file.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("add reader %s to file %s: %w", batchID, id, err)
	}
	return nil
}

// RemoveFileReader implements files.Store: batchID leaves the file's
// readers in one atomic write; it returns the record as it now is
// (file.ErrNotFound when it is gone).
func (s *Store) RemoveFileReader(ctx context.Context, tenant, id, batchID string) (file.File, error) {
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.Table, Key: key(tenantPK(tenant), fileSK(id)),
		UpdateExpression:          aws.String("DELETE readers :b ADD ver :one"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: item{":b": &types.AttributeValueMemberSS{Value: []string{batchID}}, ":one": avN(1)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return file.File{}, file.ErrNotFound
	}
	if err != nil {
		return file.File{}, fmt.Errorf("remove reader %s from file %s: %w", batchID, id, err)
	}
	var f file.File
	if err := attributevalue.UnmarshalMap(out.Attributes, &f); err != nil {
		return file.File{}, fmt.Errorf("remove reader %s from file %s: %w", batchID, id, err)
	}
	return f, nil
}
