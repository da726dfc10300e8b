package files

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/ids"
)

// PendingPartTag is the expiry class of an Upload's parts until it
// completes (UploadTTL, rounded up to a day).
const PendingPartTag = "1d"

// Upload statuses.
const (
	UploadPending   = "pending"
	UploadCompleted = "completed"
	UploadCancelled = "cancelled"
	UploadExpired   = "expired"
)

// CreateUpload starts an Upload (OpenAI Uploads API).
func (s *Service) CreateUpload(ctx context.Context, tenant, filename, purpose, mimeType string, size, expiresAfter int64) (file.Upload, error) {
	filename, err := CleanFilename(filename)
	if err != nil {
		return file.Upload{}, errs.Invalidf("filename", "%s", err.Error())
	}
	if err := checkPurpose(purpose); err != nil {
		return file.Upload{}, err
	}
	if err := checkInputName(filename); err != nil {
		return file.Upload{}, errs.Invalidf("filename", "%s", err.Error())
	}
	if size <= 0 || size > MaxBatchInput {
		return file.Upload{}, errs.Invalidf("bytes", "bytes must be between 1 and %d for a batch input file", MaxBatchInput)
	}
	if mimeType == "" {
		return file.Upload{}, errs.Missingf("mime_type", "mime_type is required (e.g. application/jsonl or text/csv)")
	}
	now := s.Now()
	if _, err := expiry(now, expiresAfter); err != nil {
		return file.Upload{}, err
	}
	u := file.Upload{
		ID: ids.New("upload_"), Bytes: size, CreatedAt: now.Unix(), Filename: filename,
		Purpose: purpose, MimeType: mimeType, Status: UploadPending,
		ExpiresAt: now.Add(UploadTTL).Unix(), FileExpiresAfter: expiresAfter, Tenant: tenant,
	}
	if err := s.Store.PutUpload(ctx, u); err != nil {
		return file.Upload{}, fmt.Errorf("record upload %s: %w", u.ID, err)
	}
	return uploadOut(u), nil
}

// addPart counts a part of size bytes in u, within the caps on parts and bytes
// per upload (docs/api.md "Limits").
func addPart(u *file.Upload, size int64) error {
	switch {
	case u.Status != UploadPending:
		return errs.E(errs.Invalid, "upload_not_pending", "", "upload %s is %s", u.ID, u.Status)
	case u.Parts >= MaxUploadParts:
		return errs.E(errs.Invalid, "too_many_parts", "data", "upload %s already has %d parts, the most one upload may have", u.ID, u.Parts)
	case u.PartBytes+size > MaxUploadBytes*u.Bytes:
		return errs.E(errs.Invalid, "upload_too_large", "data",
			"upload %s was created for %d bytes and its parts already carry %d: at most %d may be sent", u.ID, u.Bytes, u.PartBytes, MaxUploadBytes*u.Bytes)
	}
	u.Parts++
	u.PartBytes += size
	return nil
}

func (s *Service) pendingUpload(ctx context.Context, tenant, id string) (file.Upload, error) {
	if !ids.Valid("upload_", id) {
		return file.Upload{}, errs.NotFoundf("no such upload: %s", id)
	}
	u, err := s.Store.GetUpload(ctx, tenant, id)
	if errors.Is(err, file.ErrNotFound) {
		return file.Upload{}, errs.NotFoundf("no such upload: %s", id)
	}
	if err != nil {
		return file.Upload{}, err
	}
	if u.Status == UploadPending && s.Now().Unix() > u.ExpiresAt {
		u.Status = UploadExpired
	}
	if u.Status != UploadPending {
		return file.Upload{}, errs.E(errs.Invalid, "upload_not_pending", "", "upload %s is %s", id, u.Status)
	}
	return u, nil
}

// AddPart stores one part of an Upload. Parts are their own objects: a
// file is read as the concatenation of its objects, so nothing is joined.
func (s *Service) AddPart(ctx context.Context, tenant, uploadID string, size int64, body io.Reader) (Part, error) {
	u, err := s.pendingUpload(ctx, tenant, uploadID)
	if err != nil {
		return Part{}, err
	}
	if size > PartLimit {
		return Part{}, errs.E(errs.TooLarge, "part_too_large", "data",
			"a part may carry at most %d bytes (4 MiB), this one has %d: split the file into smaller parts", PartLimit, size)
	}
	if size == 0 {
		return Part{}, errs.Invalidf("data", "the part is empty")
	}
	// Counted before the part is stored, so parallel parts cannot pass
	// the caps together; a part that then fails to store still counts.
	if _, err := s.Store.UpdateUpload(ctx, tenant, u.ID, func(cur *file.Upload) error { return addPart(cur, size) }); err != nil {
		return Part{}, err
	}
	p := Part{ID: ids.New("part_"), Object: "upload.part", CreatedAt: s.Now().Unix(), UploadID: u.ID}
	// A part lives a day unless Complete gives it its file's class: the
	// parts of an abandoned upload are deleted within two days.
	if err := s.Blobs.PutTagged(ctx, uploadPartKey(tenant, u.ID, p.ID), body, size, PendingPartTag); err != nil {
		return Part{}, fmt.Errorf("store part of %s: %w", u.ID, err)
	}
	return p, nil
}

// Complete turns an Upload's parts, in the given order, into a File. A
// non-empty md5 (hex) must be the MD5 of the parts' bytes in that order.
func (s *Service) Complete(ctx context.Context, tenant, uploadID string, partIDs []string, md5sum string) (file.Upload, error) {
	u, err := s.Store.GetUpload(ctx, tenant, uploadID)
	if err == nil && u.Status == UploadCompleted {
		// A retried complete returns the same result.
		return s.withFile(ctx, u)
	}
	u, err = s.pendingUpload(ctx, tenant, uploadID)
	if err != nil {
		return file.Upload{}, err
	}
	if len(partIDs) == 0 {
		return file.Upload{}, errs.Invalidf("part_ids", "part_ids must list the parts in order")
	}
	prefix := uploadPartKey(tenant, u.ID, "")
	keys := make([]string, len(partIDs))
	seen := make(map[string]bool, len(partIDs))
	var total int64
	for i, pid := range partIDs {
		if !ids.Valid("part_", pid) || seen[pid] {
			return file.Upload{}, errs.Invalidf(fmt.Sprintf("part_ids[%d]", i), "part %q is not a part of this upload or is listed twice", pid)
		}
		seen[pid] = true
		keys[i] = prefix + pid
		n, err := s.Blobs.Size(ctx, keys[i])
		if err != nil {
			return file.Upload{}, errs.Invalidf(fmt.Sprintf("part_ids[%d]", i), "part %q is not a part of this upload", pid)
		}
		total += n
	}
	if total != u.Bytes {
		return file.Upload{}, errs.Invalidf("part_ids", "the parts add up to %d bytes, the upload was created for %d", total, u.Bytes)
	}
	if md5sum != "" {
		if err := s.checkMD5(ctx, keys, md5sum); err != nil {
			return file.Upload{}, err
		}
	}
	now := s.Now()
	exp, _ := expiry(now, u.FileExpiresAfter)
	f := file.File{
		ID: ids.New("file-"), Bytes: total, CreatedAt: u.CreatedAt, Filename: u.Filename,
		Purpose: u.Purpose, Status: StatusProcessed, ExpiresAt: exp, Tenant: tenant, Objects: keys,
	}
	// Its parts take the file's class before the file exists, so none is
	// deleted as an abandoned upload's.
	if err := s.Blobs.SetExpiry(ctx, ExpiryTag(f), keys...); err != nil {
		return file.Upload{}, err
	}
	f.CreatedAt = now.Unix()
	if err := s.Store.PutFile(ctx, f); err != nil {
		return file.Upload{}, fmt.Errorf("record file of %s: %w", u.ID, err)
	}
	u, err = s.Store.UpdateUpload(ctx, tenant, u.ID, func(cur *file.Upload) error {
		if cur.Status != UploadPending {
			return errs.E(errs.Invalid, "upload_not_pending", "", "upload %s is %s", cur.ID, cur.Status)
		}
		cur.Status, cur.FileID = UploadCompleted, f.ID
		return nil
	})
	if err != nil {
		// Lost a race with cancel or another complete: drop our file record.
		_ = s.Store.DeleteFile(ctx, tenant, f.ID)
		return file.Upload{}, err
	}
	// Parts not named in part_ids are left behind; remove them.
	if all, err := s.Blobs.List(ctx, prefix); err == nil {
		var stray []string
		for _, k := range all {
			if !seen[strings.TrimPrefix(k, prefix)] {
				stray = append(stray, k)
			}
		}
		_ = s.Blobs.Delete(ctx, stray...)
	}
	return s.withFile(ctx, u)
}

// checkMD5 reads the parts at keys in order and compares their MD5 with
// want, the hex checksum the client sent.
func (s *Service) checkMD5(ctx context.Context, keys []string, want string) error {
	if len(want) != 2*md5.Size || !isHex(want) {
		return errs.Invalidf("md5", "md5 %q is not an MD5 checksum: send the 32 hex digits of the file's MD5", want)
	}
	rc := s.Blobs.Concat(ctx, keys)
	defer rc.Close()
	h := md5.New()
	if _, err := io.Copy(h, rc); err != nil {
		return fmt.Errorf("read parts for md5: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, want) {
		return errs.Invalidf("md5", "md5 %s does not match the parts' bytes (MD5 %s): a part was corrupted or part_ids are out of order; upload the parts again", want, got)
	}
	return nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

func (s *Service) withFile(ctx context.Context, u file.Upload) (file.Upload, error) {
	out := uploadOut(u)
	if u.FileID != "" {
		f, err := s.Get(ctx, u.Tenant, u.FileID)
		if err != nil {
			return file.Upload{}, err
		}
		out.File = &f
	}
	return out, nil
}

// CancelUpload cancels a pending Upload and drops its parts.
func (s *Service) CancelUpload(ctx context.Context, tenant, uploadID string) (file.Upload, error) {
	if _, err := s.pendingUpload(ctx, tenant, uploadID); err != nil {
		return file.Upload{}, err
	}
	u, err := s.Store.UpdateUpload(ctx, tenant, uploadID, func(cur *file.Upload) error {
		if cur.Status != UploadPending {
			return errs.E(errs.Invalid, "upload_not_pending", "", "upload %s is %s", cur.ID, cur.Status)
		}
		cur.Status = UploadCancelled
		return nil
	})
	if err != nil {
		return file.Upload{}, err
	}
	if keys, err := s.Blobs.List(ctx, uploadPartKey(tenant, uploadID, "")); err == nil {
		_ = s.Blobs.Delete(ctx, keys...)
	}
	return uploadOut(u), nil
}
