package files

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/file"
)

// memStore is an in-memory Store: the file and upload records by tenant
// and id. ListFiles lists a tenant's files by id, without paging or
// filter, which no test here reads.
type memStore struct {
	mu      sync.Mutex
	files   map[string]file.File
	uploads map[string]file.Upload
}

var _ Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{files: map[string]file.File{}, uploads: map[string]file.Upload{}}
}

func (s *memStore) PutFile(_ context.Context, f file.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[f.Tenant+"/"+f.ID] = f
	return nil
}

func (s *memStore) GetFile(_ context.Context, tenant, id string) (file.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[tenant+"/"+id]
	if !ok {
		return file.File{}, file.ErrNotFound
	}
	return f, nil
}

func (s *memStore) ListFiles(_ context.Context, tenant string, _ file.Page) ([]file.File, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []file.File
	for k, f := range s.files {
		if strings.HasPrefix(k, tenant+"/") {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b file.File) int { return strings.Compare(a.ID, b.ID) })
	return out, false, nil
}

func (s *memStore) UpdateFile(_ context.Context, tenant, id string, fn func(*file.File) error) (file.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[tenant+"/"+id]
	if !ok {
		return file.File{}, file.ErrNotFound
	}
	f.Readers = slices.Clone(f.Readers)
	if err := fn(&f); err != nil {
		// As the table's: the record as read, with fn's error.
		return s.files[tenant+"/"+id], err
	}
	s.files[tenant+"/"+id] = f
	return f, nil
}

func (s *memStore) AddFileReader(_ context.Context, tenant, id, batchID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[tenant+"/"+id]
	if !ok || (f.Deleted && len(f.Readers) == 0) {
		return file.ErrNotFound
	}
	if !slices.Contains(f.Readers, batchID) {
		f.Readers = append(slices.Clone(f.Readers), batchID)
	}
	s.files[tenant+"/"+id] = f
	return nil
}

func (s *memStore) RemoveFileReader(_ context.Context, tenant, id, batchID string) (file.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[tenant+"/"+id]
	if !ok {
		return file.File{}, file.ErrNotFound
	}
	f.Readers = slices.DeleteFunc(slices.Clone(f.Readers), func(r string) bool { return r == batchID })
	s.files[tenant+"/"+id] = f
	return f, nil
}

func (s *memStore) DeleteFile(_ context.Context, tenant, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.files, tenant+"/"+id)
	return nil
}

func (s *memStore) PutUpload(_ context.Context, u file.Upload) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uploads[u.Tenant+"/"+u.ID] = u
	return nil
}

func (s *memStore) GetUpload(_ context.Context, tenant, id string) (file.Upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.uploads[tenant+"/"+id]
	if !ok {
		return file.Upload{}, file.ErrNotFound
	}
	return u, nil
}

func (s *memStore) UpdateUpload(_ context.Context, tenant, id string, fn func(*file.Upload) error) (file.Upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.uploads[tenant+"/"+id]
	if !ok {
		return file.Upload{}, file.ErrNotFound
	}
	if err := fn(&u); err != nil {
		return u, err
	}
	s.uploads[tenant+"/"+id] = u
	return u, nil
}

// memBlobs is an in-memory Blobs: objects by key with their expiry tags,
// and the presigned uploads it was asked for.
type memBlobs struct {
	mu        sync.Mutex
	objects   map[string][]byte
	tags      map[string]string
	presigned []presigned
}

// presigned is one PresignPut.
type presigned struct {
	key  string
	size int64
	ttl  time.Duration
}

var _ Blobs = (*memBlobs)(nil)

func newMemBlobs() *memBlobs {
	return &memBlobs{objects: map[string][]byte{}, tags: map[string]string{}}
}

func (b *memBlobs) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return b.PutTagged(ctx, key, r, size, "")
}

func (b *memBlobs) PutTagged(_ context.Context, key string, r io.Reader, _ int64, tag string) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.objects[key], b.tags[key] = data, tag
	return nil
}

func (b *memBlobs) SetExpiry(_ context.Context, tag string, keys ...string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		b.tags[k] = tag
	}
	return nil
}

func (b *memBlobs) object(key string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.objects[key]
	if !ok {
		return nil, errors.New("memBlobs: no object " + key)
	}
	return data, nil
}

func (b *memBlobs) Size(_ context.Context, key string) (int64, error) {
	data, err := b.object(key)
	return int64(len(data)), err
}

func (b *memBlobs) Head(_ context.Context, key string) (int64, string, error) {
	data, err := b.object(key)
	sum := md5.Sum(data)
	return int64(len(data)), `"` + hex.EncodeToString(sum[:]) + `"`, err
}

func (b *memBlobs) Concat(_ context.Context, keys []string) io.ReadCloser {
	var all []byte
	for _, k := range keys {
		data, err := b.object(k)
		if err != nil {
			return errReader{err}
		}
		all = append(all, data...)
	}
	return io.NopCloser(bytes.NewReader(all))
}

func (b *memBlobs) Delete(_ context.Context, keys ...string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		delete(b.objects, k)
		delete(b.tags, k)
	}
	return nil
}

func (b *memBlobs) List(_ context.Context, prefix string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []string
	for k := range b.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (b *memBlobs) PresignPut(_ context.Context, key string, size int64, ttl time.Duration) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.presigned = append(b.presigned, presigned{key, size, ttl})
	return "https://s3.example.test/bucket/" + key, nil
}

// bytesStored is the objects' count and total size.
func (b *memBlobs) bytesStored() (objects int, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, data := range b.objects {
		objects, size = objects+1, size+int64(len(data))
	}
	return objects, size
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
func (errReader) Close() error               { return nil }
