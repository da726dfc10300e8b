package blob

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// A presigned upload URL is a PUT of exactly one object key, of exactly
// the announced size, that only creates it, valid for at most 15 minutes:
// whoever holds it can write that object once, nothing else, and not for
// long.
func TestPresignPutIsOneShortLivedObject(t *testing.T) {
	t.Parallel()
	c := s3.New(s3.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
		BaseEndpoint: aws.String("https://s3.example.test"),
		UsePathStyle: true,
	})
	s := New(c, "relay-data")
	const key = "files/acme/file-abc/000000"
	for _, ttl := range []time.Duration{time.Minute, 15 * time.Minute} {
		raw, err := s.PresignPut(context.Background(), key, 1234, ttl)
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if u.Path != "/relay-data/"+key || strings.ContainsAny(u.Path, "*?") {
			t.Errorf("URL path %q: want exactly the one object /relay-data/%s", u.Path, key)
		}
		exp, err := strconv.Atoi(q.Get("X-Amz-Expires"))
		if err != nil || exp != int(ttl/time.Second) || exp > 900 {
			t.Errorf("X-Amz-Expires %q: want %d, at most 900", q.Get("X-Amz-Expires"), int(ttl/time.Second))
		}
		signed := strings.Split(q.Get("X-Amz-SignedHeaders"), ";")
		if !slices.Contains(signed, "host") || !slices.Contains(signed, "content-length") {
			t.Errorf("signed headers %v: want host and content-length, so the size cannot change", signed)
		}
		// A conditional PUT: S3 refuses it without the header, and refuses
		// it with the header once the object exists, so the URL cannot
		// replace the file after it was validated.
		if !slices.Contains(signed, "if-none-match") {
			t.Errorf("signed headers %v: want if-none-match, so the URL writes the object once", signed)
		}
		if q.Get("X-Amz-Signature") == "" || q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
			t.Errorf("URL %s is not SigV4-signed", raw)
		}
	}
}

// UploadOrigin is the one origin presigned PUTs go to, which the panel's
// Content-Security-Policy allows (internal/panel): the deployment's bucket
// in AWS (virtual-hosted), an emulator's endpoint with path-style.
func TestUploadOrigin(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")
	tests := []struct {
		name string
		opts s3.Options
		want string
	}{
		{"AWS", s3.Options{Region: "eu-west-1", Credentials: creds}, "https://relay-data.s3.eu-west-1.amazonaws.com"},
		{"emulator", s3.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String("http://127.0.0.1:4566"), UsePathStyle: true},
			"http://127.0.0.1:4566"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := New(s3.New(tt.opts), "relay-data").UploadOrigin(context.Background())
			if err != nil || got != tt.want {
				t.Errorf("UploadOrigin = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
