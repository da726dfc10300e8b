// Package blob is the S3 adapter. It stores objects and reads a file as the
// ordered concatenation of its objects (docs/design.md "Data layout"): uploads in parts and
// outputs made of chunk parts are never copied to be joined. A byte range of
// such a file reads with ranged GETs (ReadRange), and batch.ObjectWriter writes one.
package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/relaybatch/relay/internal/resources"
)

// ErrNotFound is returned for a missing object.
var ErrNotFound = errors.New("blob: object not found")

// ErrChanged is returned for a read pinned to an ETag (batch.Object) of an
// object that was replaced since: S3's 412 to If-Match.
var ErrChanged = errors.New("blob: object changed since it was pinned")

// Store is a bucket.
type Store struct {
	S3      *s3.Client
	Presign *s3.PresignClient
	Bucket  string
}

// New builds a Store; S3 clients should use path-style addressing against
// an emulator, which the caller's options decide.
func New(c *s3.Client, bucket string) *Store {
	return &Store{S3: c, Presign: s3.NewPresignClient(c), Bucket: bucket}
}

// Put writes an object of known size.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.PutTagged(ctx, key, r, size, "")
}

// PutTagged writes an object of known size carrying the expiry class tag
// (resources.ExpiryTag; "" for none), which decides when the bucket's
// lifecycle deletes it.
func (s *Store) PutTagged(ctx context.Context, key string, r io.Reader, size int64, tag string) error {
	in := &s3.PutObjectInput{Bucket: &s.Bucket, Key: &key, Body: r, ContentLength: aws.Int64(size)}
	if tag != "" {
		in.Tagging = aws.String(url.Values{resources.ExpiryTag: {tag}}.Encode())
	}
	if _, err := s.S3.PutObject(ctx, in); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// PutLocked writes an object under S3 Object Lock: in mode (GOVERNANCE
// or COMPLIANCE) until until, when no one (in COMPLIANCE mode, not even
// the account's root) can delete or overwrite this version of it. The
// bucket must have Object Lock on.
func (s *Store) PutLocked(ctx context.Context, key string, body []byte, mode string, until time.Time) error {
	in := &s3.PutObjectInput{Bucket: &s.Bucket, Key: &key, Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		ObjectLockMode: types.ObjectLockMode(mode), ObjectLockRetainUntilDate: aws.Time(until),
		// S3 refuses a put with a retention that carries no checksum.
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32}
	if _, err := s.S3.PutObject(ctx, in); err != nil {
		return fmt.Errorf("put %s under object lock: %w", key, err)
	}
	return nil
}

// SetExpiry sets the expiry class tag of objects ("" removes it: they are
// kept until deleted).
func (s *Store) SetExpiry(ctx context.Context, tag string, keys ...string) error {
	for _, k := range keys {
		var err error
		if tag == "" {
			_, err = s.S3.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: &s.Bucket, Key: aws.String(k)})
		} else {
			_, err = s.S3.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &s.Bucket, Key: aws.String(k),
				Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String(resources.ExpiryTag), Value: aws.String(tag)}}}})
		}
		if err != nil {
			return fmt.Errorf("set expiry of %s: %w", k, err)
		}
	}
	return nil
}

// Size returns an object's size, ErrNotFound if it does not exist.
func (s *Store) Size(ctx context.Context, key string) (int64, error) {
	size, _, err := s.Head(ctx, key)
	return size, err
}

// Head returns an object's size and ETag, ErrNotFound if it does not exist.
func (s *Store) Head(ctx context.Context, key string) (size int64, etag string, err error) {
	out, err := s.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		if isNotFound(err) {
			return 0, "", ErrNotFound
		}
		return 0, "", fmt.Errorf("head %s: %w", key, err)
	}
	return aws.ToInt64(out.ContentLength), aws.ToString(out.ETag), nil
}

// Get opens an object.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		if isNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return out.Body, nil
}

// GetRange appends bytes [start, end) of an object to dst with one ranged
// GET; a non-empty etag pins the object: another one is ErrChanged. A dst
// with room for them (and bytes.MinRead more) takes them without growing.
func (s *Store) GetRange(ctx context.Context, dst []byte, key, etag string, start, end int64) ([]byte, error) {
	if end <= start {
		return dst, nil
	}
	rng := fmt.Sprintf("bytes=%d-%d", start, end-1)
	in := &s3.GetObjectInput{Bucket: &s.Bucket, Key: &key, Range: &rng}
	if etag != "" {
		in.IfMatch = &etag
	}
	out, err := s.S3.GetObject(ctx, in)
	if err != nil {
		if isNotFound(err) {
			return nil, ErrNotFound
		}
		if isPreconditionFailed(err) {
			return nil, fmt.Errorf("get %s: %w", key, ErrChanged)
		}
		return nil, fmt.Errorf("get %s %s: %w", key, rng, err)
	}
	defer out.Body.Close()
	b := bytes.NewBuffer(dst)
	if _, err := b.ReadFrom(out.Body); err != nil {
		return nil, fmt.Errorf("read %s %s: %w", key, rng, err)
	}
	return b.Bytes(), nil
}

// Delete removes objects (missing ones are fine).
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		objs := make([]types.ObjectIdentifier, n)
		for i, k := range keys[:n] {
			objs[i] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		_, err := s.S3.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &s.Bucket, Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return fmt.Errorf("delete %d objects: %w", n, err)
		}
		keys = keys[n:]
	}
	return nil
}

// List returns the keys under prefix.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.S3, &s3.ListObjectsV2Input{Bucket: &s.Bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}

// PresignPut returns a URL that uploads exactly one object of the given size
// with a PUT, valid for ttl. The PUT is conditional (If-None-Match: *, a
// signed header the client must send): S3 refuses it once the object
// exists, so whoever holds the URL cannot replace a file after it was
// uploaded, validated and planned (SECURITY.md "Presigned URLs").
func (s *Store) PresignPut(ctx context.Context, key string, size int64, ttl time.Duration) (string, error) {
	req, err := s.Presign.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.Bucket, Key: &key, ContentLength: aws.Int64(size), IfNoneMatch: aws.String("*"),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("presign %s: %w", key, err)
	}
	return req.URL, nil
}

// UploadOrigin is the scheme://host[:port] that PresignPut's URLs name:
// the bucket's own endpoint (virtual-hosted in AWS, an emulator's with
// path-style), which the panel's Content-Security-Policy allows and no
// other (internal/panel). Presigning signs locally: no request is sent.
func (s *Store) UploadOrigin(ctx context.Context) (string, error) {
	raw, err := s.PresignPut(ctx, "origin", 0, time.Minute)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("presigned URL of %s: %w", s.Bucket, err)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Concat reads objects one after another as one stream, opening each only
// when the previous one is done, so memory stays constant whatever the size.
func (s *Store) Concat(ctx context.Context, keys []string) io.ReadCloser {
	return &concat{ctx: ctx, s: s, keys: keys}
}

type concat struct {
	ctx  context.Context
	s    *Store
	keys []string
	cur  io.ReadCloser
}

func (c *concat) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			if len(c.keys) == 0 {
				return 0, io.EOF
			}
			rc, err := c.s.Get(c.ctx, c.keys[0])
			if err != nil {
				return 0, err
			}
			c.cur, c.keys = rc, c.keys[1:]
		}
		n, err := c.cur.Read(p)
		if err == io.EOF {
			c.cur.Close()
			c.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *concat) Close() error {
	if c.cur != nil {
		return c.cur.Close()
	}
	return nil
}

func isPreconditionFailed(err error) bool {
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusPreconditionFailed
}

func isNotFound(err error) bool {
	var nk *types.NoSuchKey
	var nf *types.NotFound
	return errors.As(err, &nk) || errors.As(err, &nf)
}

// DeleteExcept deletes the objects of b under prefix that keep does not
// hold.
func DeleteExcept(ctx context.Context, b interface {
	List(ctx context.Context, prefix string) ([]string, error)
	Delete(ctx context.Context, keys ...string) error
}, prefix string, keep map[string]bool) error {
	keys, err := b.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	var stray []string
	for _, k := range keys {
		if !keep[k] {
			stray = append(stray, k)
		}
	}
	return b.Delete(ctx, stray...)
}
