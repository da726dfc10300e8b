package emulator_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// A ranged GetObject answers as S3 does, whether moto_server.py reads the
// range alone (one "bytes=first-[last]" range) or the whole object (any
// other): the bytes of the range, its Content-Range, 416 past the end,
// and the whole object for a range it cannot take. The object is past
// moto's 5 MB in-memory buffer, so it lives in a temporary file.
func TestRangedGetObject(t *testing.T) {
	cfg, _ := start(t)
	c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	bucket := fmt.Sprintf("ranges-%d", rand.Int64())
	if _, err := c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 6<<20+7)
	for i := range body {
		body[i] = byte(rand.IntN(256))
	}
	if _, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("o"), Body: bytes.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
	n := len(body)
	tests := []struct {
		rng          string
		want         []byte
		contentRange string
	}{
		{"bytes=0-9", body[:10], fmt.Sprintf("bytes 0-9/%d", n)},
		{"bytes=5000000-5000099", body[5000000:5000100], fmt.Sprintf("bytes 5000000-5000099/%d", n)},
		{fmt.Sprintf("bytes=%d-", n-5), body[n-5:], fmt.Sprintf("bytes %d-%d/%d", n-5, n-1, n)},
		{fmt.Sprintf("bytes=%d-%d", n-3, n+100), body[n-3:], fmt.Sprintf("bytes %d-%d/%d", n-3, n-1, n)},
		{"bytes=-4", body[n-4:], fmt.Sprintf("bytes %d-%d/%d", n-4, n-1, n)},
		{"bytes=0-0,5-9", body, ""},
	}
	for _, tt := range tests {
		out, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("o"), Range: aws.String(tt.rng)})
		if err != nil {
			t.Errorf("%s: %v", tt.rng, err)
			continue
		}
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil || !bytes.Equal(got, tt.want) || aws.ToString(out.ContentRange) != tt.contentRange {
			t.Errorf("%s: got %d bytes (equal %v), Content-Range %q, %v; want %d bytes, %q",
				tt.rng, len(got), bytes.Equal(got, tt.want), aws.ToString(out.ContentRange), err, len(tt.want), tt.contentRange)
		}
	}
	_, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("o"), Range: aws.String(fmt.Sprintf("bytes=%d-", n))})
	if apiErr, ok := errors.AsType[smithy.APIError](err); !ok || apiErr.ErrorCode() != "InvalidRange" {
		t.Errorf("a range past the end: %v, want InvalidRange", err)
	}
}
