package plan

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/file"
)

// partsBucket holds objects by key and counts the HEADs asked of it.
type partsBucket struct {
	objects map[string][]byte
	heads   int
}

func (f *partsBucket) PutTagged(context.Context, string, io.Reader, int64, string) error { return nil }

func (f *partsBucket) Concat(_ context.Context, keys []string) io.ReadCloser {
	var rs []io.Reader
	for _, k := range keys {
		rs = append(rs, bytes.NewReader(f.objects[k]))
	}
	return io.NopCloser(io.MultiReader(rs...))
}

func (f *partsBucket) Head(_ context.Context, key string) (int64, string, error) {
	f.heads++
	return int64(len(f.objects[key])), `"etag"`, nil
}

// TestScanSizesFromItsRead: a file of 3 uploaded parts is planned with
// the parts' sizes the scan read, and no HEAD of each after it (a 200 MB
// file of 4 MiB parts made 48, one after another, before the batch could
// start); a presigned upload's object is still HEADed, for the ETag that
// pins it.
func TestScanSizesFromItsRead(t *testing.T) {
	t.Parallel()
	// Parts cut mid-line, as the Uploads API's are.
	data := chatLines(30)
	cuts := []int{0, 1000, 2500, len(data)}
	bucket := &partsBucket{objects: map[string][]byte{}}
	f := file.File{ID: "file-1", Tenant: "t", Filename: "in.jsonl"}
	for i := range 3 {
		k := fmt.Sprintf("uploads/t/u/%d", i)
		bucket.objects[k] = []byte(data[cuts[i]:cuts[i+1]])
		f.Objects = append(f.Objects, k)
	}
	b := batch.Batch{ID: "batch_1", Tenant: "t", Endpoint: "/v1/chat/completions", InputFileID: f.ID}
	models := Models{Known: func(string) bool { return true }}
	capacity := func(string) int { return 8 }

	in, err := Scan(context.Background(), bucket, b, f, Limits{}, capacity, models)

	if err != nil || in.Result.Rows != 30 {
		t.Fatalf("Scan: %d rows, %v", in.Result.Rows, err)
	}
	for i, o := range in.Objects {
		if o.Key != f.Objects[i] || o.Size != int64(cuts[i+1]-cuts[i]) {
			t.Errorf("object %d: %+v, want %s of %d bytes", i, o, f.Objects[i], cuts[i+1]-cuts[i])
		}
	}
	if len(in.Objects) != 3 || bucket.heads != 0 {
		t.Errorf("%d objects, %d HEADs: want 3 and none", len(in.Objects), bucket.heads)
	}
	f.ETag = `"etag"`
	if in, err = Scan(context.Background(), bucket, b, f, Limits{}, capacity, models); err != nil || in.Objects[0].ETag != f.ETag || bucket.heads != 3 {
		t.Errorf("presigned: %v, objects %+v after %d HEADs: want each pinned to its ETag", err, in.Objects, bucket.heads)
	}
}

// gatedBucket is a partsBucket whose object 0 does not end until the
// reads of the readAhead objects after it have begun (or a deadline
// passed: overlapped false).
type gatedBucket struct {
	*partsBucket
	mu         sync.Mutex
	asked      int
	begun      chan struct{}
	overlapped bool
}

func (f *gatedBucket) Concat(ctx context.Context, keys []string) io.ReadCloser {
	rc := f.partsBucket.Concat(ctx, keys)
	if keys[0] == "uploads/t/u/0" {
		return &gatedEnd{ReadCloser: rc, f: f}
	}
	f.mu.Lock()
	if f.asked++; f.asked == readAhead {
		close(f.begun)
	}
	f.mu.Unlock()
	return rc
}

type gatedEnd struct {
	io.ReadCloser
	f *gatedBucket
}

func (g *gatedEnd) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if err == io.EOF {
		select {
		case <-g.f.begun:
			g.f.overlapped = true
		case <-time.After(5 * time.Second):
		}
	}
	return n, err
}

// TestScanReadsObjectsAhead: the GETs of a file's next objects (readAhead
// of them) are made while its current one is read, so neither a 48-part
// file's first-byte latencies nor its objects' transfers add up before its
// batch can start (on S3 a single GET streams at 50-100 MB/s: 2-4 s for
// 200 MB one object after another). Before, only the next object was
// asked for, and only its first 32 KB read ahead.
func TestScanReadsObjectsAhead(t *testing.T) {
	t.Parallel()
	data := chatLines(60)
	objects := map[string][]byte{}
	f := file.File{ID: "file-1", Tenant: "t", Filename: "in.jsonl"}
	for i := range readAhead + 2 {
		k := fmt.Sprintf("uploads/t/u/%d", i)
		lo, hi := i*len(data)/(readAhead+2), (i+1)*len(data)/(readAhead+2)
		objects[k] = []byte(data[lo:hi])
		f.Objects = append(f.Objects, k)
	}
	bucket := &gatedBucket{partsBucket: &partsBucket{objects: objects}, begun: make(chan struct{})}
	b := batch.Batch{ID: "batch_1", Tenant: "t", Endpoint: "/v1/chat/completions", InputFileID: f.ID}

	in, err := Scan(context.Background(), bucket, b, f, Limits{}, func(string) int { return 8 }, Models{Known: func(string) bool { return true }})

	if err != nil || in.Result.Rows != 60 || len(in.Objects) != readAhead+2 {
		t.Fatalf("Scan: %d rows, objects %+v, %v", in.Result.Rows, in.Objects, err)
	}
	if !bucket.overlapped {
		t.Errorf("object 0 was read to its end before the %d objects after it were asked for", readAhead)
	}
}

// Scan spreads a model's last round over the lanes of its capacity
// (Limits.LanesFor): 800 rows on a model of 96 (3 lanes of 32 slots) are
// 3 chunks of about 267 rows, not 768 and 32; on a model of 8 (one lane),
// 800 rows are chunks of 192 as before.
func TestScanSpreadsTheLastRound(t *testing.T) {
	t.Parallel()
	var data strings.Builder
	for i := range 800 {
		fmt.Fprintf(&data, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`+"\n", i)
	}
	bucket := &partsBucket{objects: map[string][]byte{"uploads/t/u/0": []byte(data.String())}}
	f := file.File{ID: "file-1", Tenant: "t", Filename: "in.jsonl", Objects: []string{"uploads/t/u/0"}}
	b := batch.Batch{ID: "batch_1", Tenant: "t", Endpoint: "/v1/chat/completions", InputFileID: f.ID}
	models := Models{Known: func(string) bool { return true }}
	for capacity, want := range map[int][]int{96: {267, 267, 266}, 8: {192, 192, 192, 192, 32}} {
		in, err := Scan(context.Background(), bucket, b, f, Limits{}, func(string) int { return capacity }, models)
		if err != nil {
			t.Fatal(err)
		}
		if got := rowsPerChunk(in.Chunks, "m"); !slices.Equal(got, want) {
			t.Errorf("capacity %d: rows per chunk %v, want %v", capacity, got, want)
		}
	}
}

// chatLines is a JSONL file of n chat rows of model m.
func chatLines(n int) string {
	var all strings.Builder
	for i := range n {
		fmt.Fprintf(&all, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`+"\n", i)
	}
	return all.String()
}
