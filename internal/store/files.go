package store

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
