// Package files owns File and Upload objects (docs/api.md "Files"): multipart uploads,
// the Uploads API for files larger than one request, presigned uploads, and
// reading a file as the ordered concatenation of its S3 objects.
package files

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/resources"
)

// Limits (docs/api.md "Limits").
const (
	// PartLimit is the most file data one request may carry: Lambda's 6 MB
	// payload holds 4 MiB once base64-encoded.
	PartLimit = 4 << 20
	// MaxBatchInput is the largest batch input file.
	MaxBatchInput = 200 * 1000 * 1000
	// PresignTTL is how long a presigned upload URL stays valid.
	PresignTTL = 15 * time.Minute
	// UploadTTL is how long an Upload may stay pending (OpenAI: one hour).
	UploadTTL = time.Hour
	// MaxUploadParts bounds the parts added to one Upload: twice what a
	// plan takes of a file (internal/plan), room to send parts again.
	MaxUploadParts = 2000
	// MaxUploadBytes bounds the bytes of the parts added to one Upload, as
	// a multiple of the bytes it announced (again room to re-send parts).
	MaxUploadBytes = 2
	// DefaultTTL is how long a batch input file lives when its upload gave
	// no expires_after (OpenAI: 30 days).
	DefaultTTL = 30 * 24 * time.Hour
)

// Statuses of a File.
const (
	StatusUploaded  = "uploaded" // presigned upload pending
	StatusProcessed = "processed"
	StatusError     = "error"
)

// Purposes.
const (
	PurposeBatch       = "batch"
	PurposeBatchOutput = "batch_output"
)

// Part is an OpenAI Upload Part object.
type Part struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	CreatedAt int64  `json:"created_at"`
	UploadID  string `json:"upload_id"`
}

// Store persists File and Upload records, always scoped by tenant.
type Store interface {
	PutFile(ctx context.Context, f file.File) error
	GetFile(ctx context.Context, tenant, id string) (file.File, error)
	ListFiles(ctx context.Context, tenant string, p file.Page) ([]file.File, bool, error)
	// UpdateFile applies fn and writes the result only if the record is
	// unchanged since it was read.
	UpdateFile(ctx context.Context, tenant, id string, fn func(*file.File) error) (file.File, error)
	DeleteFile(ctx context.Context, tenant, id string) error
	// AddFileReader and RemoveFileReader change a file's readers in one
	// atomic write each (Hold, Release): many batches of one file at once
	// must not contend on its record. Add refuses a file gone, or deleted
	// with no reader left (ErrNotFound); Remove returns the record after.
	AddFileReader(ctx context.Context, tenant, id, batchID string) error
	RemoveFileReader(ctx context.Context, tenant, id, batchID string) (file.File, error)
	PutUpload(ctx context.Context, u file.Upload) error
	GetUpload(ctx context.Context, tenant, id string) (file.Upload, error)
	UpdateUpload(ctx context.Context, tenant, id string, fn func(*file.Upload) error) (file.Upload, error)
}

// Blobs is the object storage the service needs.
type Blobs interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	PutTagged(ctx context.Context, key string, r io.Reader, size int64, tag string) error
	SetExpiry(ctx context.Context, tag string, keys ...string) error
	Size(ctx context.Context, key string) (int64, error)
	Head(ctx context.Context, key string) (size int64, etag string, err error)
	Concat(ctx context.Context, keys []string) io.ReadCloser
	Delete(ctx context.Context, keys ...string) error
	List(ctx context.Context, prefix string) ([]string, error)
	PresignPut(ctx context.Context, key string, size int64, ttl time.Duration) (string, error)
}

// Service implements the Files and Uploads APIs.
type Service struct {
	Store Store
	Blobs Blobs
	// Now is the clock (required; app.New gives every service the same).
	Now func() time.Time
}

// objectKey is where part n of a file lives: under the tenant, so every
// object is scoped by tenant in its key.
func objectKey(tenant, fileID string, n int) string {
	return fmt.Sprintf("files/%s/%s/%06d", tenant, fileID, n)
}

func uploadPartKey(tenant, uploadID, partID string) string {
	return fmt.Sprintf("uploads/%s/%s/%s", tenant, uploadID, partID)
}

// CleanFilename accepts a plain file name and refuses anything else with
// a 400: a directory part ("../../x.jsonl", "a/b.jsonl", "a\\b.jsonl"),
// control characters (NUL, CR, LF) and quotes. A filename is only ever a
// label (object keys are made of ids), but one that looks like a path or
// can split a header line is a mistake or an attack, and is named as such.
func CleanFilename(name string) (string, error) {
	if len(name) > 255 || !utf8.ValidString(name) {
		return "", errs.Invalidf("file", "filename must be valid UTF-8 of at most 255 bytes")
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || c == '"' {
			return "", errs.Invalidf("file", "filename %q contains a control character or quote", name)
		}
	}
	if strings.ContainsAny(name, `/\`) {
		return "", errs.Invalidf("file", "filename %q must be a plain file name, without a directory: no '/' or '\\'", name)
	}
	if name == "" || name == "." || name == ".." {
		return "", errs.Invalidf("file", "filename %q has no name", name)
	}
	return name, nil
}

func checkInputName(filename string) error {
	ext := strings.ToLower(path.Ext(filename))
	if ext != ".jsonl" && ext != ".csv" {
		return errs.Invalidf("file", "filename %q: a batch input file must end in .jsonl or .csv", filename)
	}
	return nil
}

func checkPurpose(p string) error {
	if p != PurposeBatch {
		if p == "" {
			return errs.Missingf("purpose", "purpose is required and must be \"batch\"")
		}
		return errs.Invalidf("purpose", "purpose %q is not supported: use \"batch\"", p)
	}
	return nil
}

// expiry is when a file uploaded now with expires_after seconds expires;
// 0 seconds (no expires_after) takes DefaultTTL.
// InputKept is how long a batch may read its input file after the file
// expired: a batch created just before has its window (at most 24 hours)
// and the finalize's grace.
const InputKept = 25 * time.Hour

// ExpiryTag is the expiry class of f's objects (resources.ExpiryTag): the
// bucket's lifecycle deletes them at least InputKept after f expires, and
// within a day more plus S3's own delay (docs/design.md "Expiry"). A file
// that does not expire (a scheduled template's input), or lives longer
// than every class, has none.
func ExpiryTag(f file.File) string {
	if f.ExpiresAt == nil {
		return ""
	}
	tag, _ := resources.ExpiryTagFor(time.Duration(*f.ExpiresAt-f.CreatedAt)*time.Second + InputKept)
	return tag
}

func expiry(now time.Time, seconds int64) (*int64, error) {
	if seconds == 0 {
		at := now.Add(DefaultTTL).Unix()
		return &at, nil
	}
	// OpenAI: between 1 hour and 30 days.
	if seconds < 3600 || seconds > 30*24*3600 {
		return nil, errs.Invalidf("expires_after.seconds", "expires_after.seconds must be between 3600 and 2592000")
	}
	at := now.Unix() + seconds
	return &at, nil
}

// newFile checks what a client names a new batch input file and makes its
// record: one object under the tenant's prefix.
func (s *Service) newFile(tenant, filename, purpose string, size, expiresAfter int64, status string) (file.File, error) {
	filename, err := CleanFilename(filename)
	if err != nil {
		return file.File{}, err
	}
	if err := checkPurpose(purpose); err != nil {
		return file.File{}, err
	}
	if err := checkInputName(filename); err != nil {
		return file.File{}, err
	}
	now := s.Now()
	exp, err := expiry(now, expiresAfter)
	if err != nil {
		return file.File{}, err
	}
	f := file.File{
		ID: ids.New("file-"), Bytes: size, CreatedAt: now.Unix(), Filename: filename,
		Purpose: purpose, Status: status, ExpiresAt: exp, Tenant: tenant,
	}
	f.Objects = []string{objectKey(tenant, f.ID, 0)}
	return f, nil
}

// Create stores a file sent in one request (multipart upload).
func (s *Service) Create(ctx context.Context, tenant, filename, purpose string, size int64, expiresAfter int64, body io.Reader) (file.File, error) {
	f, err := s.newFile(tenant, filename, purpose, size, expiresAfter, StatusProcessed)
	if err != nil {
		return file.File{}, err
	}
	if size > PartLimit {
		return file.File{}, tooLarge(size)
	}
	if size == 0 {
		return file.File{}, errs.Invalidf("file", "the file is empty")
	}
	if err := s.Blobs.PutTagged(ctx, f.Objects[0], body, size, ExpiryTag(f)); err != nil {
		return file.File{}, fmt.Errorf("store file %s: %w", f.ID, err)
	}
	if err := s.Store.PutFile(ctx, f); err != nil {
		return file.File{}, fmt.Errorf("record file %s: %w", f.ID, err)
	}
	return fileOut(f), nil
}

func tooLarge(size int64) error {
	return errs.E(errs.TooLarge, "request_too_large", "file",
		"%d bytes is more than one request may carry (%d bytes, 4 MiB): use the Uploads API (POST /v1/uploads) with parts of at most 4 MiB, or a presigned upload (POST /v1/files with a JSON body)", size, PartLimit)
}

// Presign records a file whose bytes the client PUTs to S3 itself (the
// extension for big files, docs/api.md "Files").
func (s *Service) Presign(ctx context.Context, tenant, filename, purpose string, size, expiresAfter int64) (file.File, error) {
	f, err := s.newFile(tenant, filename, purpose, size, expiresAfter, StatusUploaded)
	if err != nil {
		return file.File{}, err
	}
	if size <= 0 || size > MaxBatchInput {
		return file.File{}, errs.Invalidf("bytes", "bytes must be between 1 and %d", MaxBatchInput)
	}
	url, err := s.Blobs.PresignPut(ctx, f.Objects[0], size, PresignTTL)
	if err != nil {
		return file.File{}, err
	}
	if err := s.Store.PutFile(ctx, f); err != nil {
		return file.File{}, fmt.Errorf("record file %s: %w", f.ID, err)
	}
	out := fileOut(f)
	out.UploadURL = url
	return out, nil
}

// Get returns a file, settling a pending presigned upload whose object has
// landed (a lazy check instead of an S3 event: it works the same locally).
func (s *Service) Get(ctx context.Context, tenant, id string) (file.File, error) {
	if !ids.Valid("file-", id) {
		return file.File{}, errs.NotFoundf("no such file: %s", id)
	}
	f, err := s.Store.GetFile(ctx, tenant, id)
	if errors.Is(err, file.ErrNotFound) {
		return file.File{}, errs.NotFoundf("no such file: %s", id)
	}
	if err != nil {
		return file.File{}, err
	}
	if expired(f, s.Now()) {
		// Expired files are gone, as at OpenAI; the bucket's lifecycle
		// removes the bytes.
		return file.File{}, errs.NotFoundf("no such file: %s (it expired)", id)
	}
	if f.Deleted {
		return file.File{}, errs.NotFoundf("no such file: %s", id)
	}
	if f.Status == StatusUploaded {
		f, err = s.settle(ctx, f)
		if err != nil {
			return file.File{}, err
		}
	}
	return fileOut(f), nil
}

func (s *Service) settle(ctx context.Context, f file.File) (file.File, error) {
	size, etag, err := s.Blobs.Head(ctx, f.Objects[0])
	if err != nil {
		// Not there yet: still uploaded.
		return f, nil
	}
	return s.Store.UpdateFile(ctx, f.Tenant, f.ID, func(cur *file.File) error {
		if cur.Status != StatusUploaded {
			return nil
		}
		if size != cur.Bytes {
			cur.Status = StatusError
			d := fmt.Sprintf("the uploaded object has %d bytes, %d were announced", size, cur.Bytes)
			cur.StatusDetails = &d
			return nil
		}
		// Tagged before it counts as processed: a failure here leaves
		// it uploaded, and the next read tags it.
		if err := s.Blobs.SetExpiry(ctx, ExpiryTag(*cur), cur.Objects...); err != nil {
			return err
		}
		cur.Status, cur.ETag = StatusProcessed, etag
		return nil
	})
}

// expired reports whether f is past its expires_at at now.
func expired(f file.File, now time.Time) bool {
	return f.ExpiresAt != nil && now.Unix() >= *f.ExpiresAt
}

// List lists a tenant's files by created_at, newest first by default, as
// OpenAI does; expired files are not listed, as Get does not find them.
// File ids sort by creation time except an output file's, named after its
// batch, so the store's id order will not do: the tenant's records are
// read whole (files expire after 30 days by default, which bounds them)
// and sorted here.
func (s *Service) List(ctx context.Context, tenant string, p file.Page) ([]file.File, bool, error) {
	if p.Limit == 0 {
		p.Limit = 10000
	}
	if p.Limit < 1 || p.Limit > 10000 {
		return nil, false, errs.Invalidf("limit", "limit must be between 1 and 10000")
	}
	if p.Order == "" {
		p.Order = "desc"
	}
	if p.Order != "asc" && p.Order != "desc" {
		return nil, false, errs.Invalidf("order", "order must be asc or desc")
	}
	if p.After != "" && !ids.Valid("file-", p.After) {
		return nil, false, errs.Invalidf("after", "after %q is not a file id", p.After)
	}
	all, _, err := s.Store.ListFiles(ctx, tenant, file.Page{Limit: math.MaxInt, Order: "asc", Filter: p.Filter})
	if err != nil {
		return nil, false, err
	}
	return pageOf(all, p, s.Now())
}

// pageOf sorts files by created_at (then id) in p's order, leaves out the
// expired ones and returns the p.Limit after p.After.
func pageOf(all []file.File, p file.Page, now time.Time) ([]file.File, bool, error) {
	fs := slices.DeleteFunc(all, func(f file.File) bool { return expired(f, now) || f.Deleted })
	slices.SortFunc(fs, func(a, b file.File) int {
		c := cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID))
		if p.Order == "desc" {
			return -c
		}
		return c
	})
	if p.After != "" {
		i := slices.IndexFunc(fs, func(f file.File) bool { return f.ID == p.After })
		if i < 0 {
			return nil, false, errs.Invalidf("after", "after: file %s is not listed (it was deleted or expired): list again from the start", p.After)
		}
		fs = fs[i+1:]
	}
	more := len(fs) > p.Limit
	if more {
		fs = fs[:p.Limit]
	}
	out := make([]file.File, len(fs))
	for i, f := range fs {
		out[i] = fileOut(f)
	}
	return out, more, nil
}

// SetExpiresAt sets when a file expires; nil keeps it until it is deleted.
// A cron template keeps its input this way while it is scheduled.
func (s *Service) SetExpiresAt(ctx context.Context, tenant, id string, at *int64) error {
	f, err := s.Store.UpdateFile(ctx, tenant, id, func(f *file.File) error {
		f.ExpiresAt = at
		return nil
	})
	if err != nil {
		return fmt.Errorf("set expiry of file %s: %w", id, err)
	}
	// Its objects follow (a template's input loses its class while the
	// template is scheduled); a retried call repeats both.
	if err := s.Blobs.SetExpiry(ctx, ExpiryTag(f), f.Objects...); err != nil {
		return fmt.Errorf("set expiry of file %s: %w", id, err)
	}
	return nil
}

// Content opens a file's bytes as one stream.
func (s *Service) Content(ctx context.Context, tenant, id string) (file.File, io.ReadCloser, error) {
	f, err := s.Get(ctx, tenant, id)
	if err != nil {
		return file.File{}, nil, err
	}
	if f.Status == StatusUploaded {
		return file.File{}, nil, errs.E(errs.Invalid, "file_not_ready", "", "file %s is still being uploaded", id)
	}
	full, err := s.Store.GetFile(ctx, tenant, id)
	if err != nil {
		return file.File{}, nil, err
	}
	return f, s.Blobs.Concat(ctx, full.Objects), nil
}

// Delete removes a file and its objects. A file that unfinished batches
// read (Hold) is gone for the API at once, as at OpenAI, and its objects
// stay until the last of them ends (Release).
func (s *Service) Delete(ctx context.Context, tenant, id string) error {
	if !ids.Valid("file-", id) {
		return errs.NotFoundf("no such file: %s", id)
	}
	f, err := s.Store.UpdateFile(ctx, tenant, id, func(f *file.File) error {
		if f.Deleted {
			return file.ErrNotFound
		}
		f.Deleted = true
		return nil
	})
	if errors.Is(err, file.ErrNotFound) {
		if f.Deleted && len(f.Readers) == 0 {
			// A purge cut short: finish it.
			_ = s.purge(ctx, f)
		}
		return errs.NotFoundf("no such file: %s", id)
	}
	if err != nil {
		return err
	}
	if len(f.Readers) > 0 {
		return nil
	}
	return s.purge(ctx, f)
}

// purge removes a deleted file's objects, then its record. Every object
// of a file sits under its tenant's prefix (inputs under files/<tenant>/,
// outputs under parts/<tenant>/), so this never reaches another tenant's
// data.
func (s *Service) purge(ctx context.Context, f file.File) error {
	if err := s.Blobs.Delete(ctx, f.Objects...); err != nil {
		return err
	}
	return s.Store.DeleteFile(ctx, f.Tenant, f.ID)
}

// Hold records batch batchID as a reader of file id, whose objects then
// outlive a delete until Release: ErrNotFound when the file is gone, or
// deleted with no reader left (its purge is under way). A deleted file
// that other batches still read takes more: a template's runs read the
// template's file (the API refuses a deleted file before this, in Get).
func (s *Service) Hold(ctx context.Context, tenant, id, batchID string) error {
	return s.Store.AddFileReader(ctx, tenant, id, batchID)
}

// Release ends batch batchID's hold on file id, once the batch is
// terminal; the last release of a deleted file removes it. Releasing
// twice, or a file gone already, is a no-op.
func (s *Service) Release(ctx context.Context, tenant, id, batchID string) error {
	f, err := s.Store.RemoveFileReader(ctx, tenant, id, batchID)
	switch {
	case errors.Is(err, file.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("release file %s of batch %s: %w", id, batchID, err)
	case f.Deleted && len(f.Readers) == 0:
		// The last reader ended (or a purge was cut short).
		return s.purge(ctx, f)
	}
	return nil
}

func fileOut(f file.File) file.File {
	f.Object = "file"
	return f
}

func uploadOut(u file.Upload) file.Upload {
	u.Object = "upload"
	u.PartLimit = PartLimit
	return u
}
