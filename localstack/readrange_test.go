package localstack

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
)

// ReadRange reads any range of a file made of objects (upload parts) as
// the bytes of the whole file, whichever objects it starts, crosses and
// ends in: each object's bytes are read into the range's one buffer.
func TestReadRangeAcrossObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := s3.NewFromConfig(emutest.Config(t), func(o *s3.Options) { o.UsePathStyle = true })
	bucket := fmt.Sprintf("relay-range-%d", time.Now().UnixNano())
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	store := blob.New(client, bucket)
	var whole []byte
	var objs []batch.Object
	for i, size := range []int{700, 1, 5000, 300} {
		part := bytes.Repeat([]byte{byte('a' + i)}, size)
		part[0], part[size-1] = byte('A'+i), byte('0'+i)
		key := fmt.Sprintf("files/f/part-%d", i)
		if err := store.Put(ctx, key, bytes.NewReader(part), int64(size)); err != nil {
			t.Fatal(err)
		}
		objs, whole = append(objs, batch.Object{Key: key, Size: int64(size)}), append(whole, part...)
	}
	for _, r := range [][2]int64{{0, 700}, {0, int64(len(whole))}, {699, 702}, {700, 701}, {10, 5800}, {701, 5701}, {5700, 6001}} {
		got, err := store.ReadRange(ctx, objs, r[0], r[1])
		if err != nil || !bytes.Equal(got, whole[r[0]:r[1]]) {
			t.Errorf("ReadRange(%d, %d): %d bytes, %v; want the file's %d", r[0], r[1], len(got), err, r[1]-r[0])
		}
	}
	if got, err := store.ReadRange(ctx, objs, 0, int64(len(whole))+1); err == nil {
		t.Errorf("ReadRange past the file's end: %d bytes, no error", len(got))
	}
}
