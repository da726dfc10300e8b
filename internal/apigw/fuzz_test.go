package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// FuzzRequest: any proxy event API Gateway could deliver either becomes a
// request carrying exactly the body sent, or an error; it never panics.
func FuzzRequest(f *testing.F) {
	f.Add("POST", "/v1/files", []byte("hello"), true, "Content-Type", "multipart/form-data; boundary=x", "limit", "10")
	f.Add("GET", "/v1/batches/%2e%2e/x", []byte(""), false, "Host", "example.com", "after", "batch_1")
	f.Add("GET", "", []byte("not base64 !"), false, "X-Request-Id", "", "", "")
	f.Add("BAD METHOD", "//x?y#z", []byte{0xff}, true, "a\r\nb", "c\x00", "q\x00", "\r\n")
	f.Fuzz(func(t *testing.T, method, path string, body []byte, b64 bool, hk, hv, qk, qv string) {
		ev := events.APIGatewayProxyRequest{
			HTTPMethod: method, Path: path, Body: string(body),
			Headers:               map[string]string{hk: hv},
			MultiValueHeaders:     map[string][]string{hk: {hv, hv}},
			QueryStringParameters: map[string]string{qk: qv},
		}
		want := body
		if b64 {
			ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		} else if _, err := base64.StdEncoding.DecodeString(string(body)); err != nil {
			// The same bytes flagged as base64 but not base64: an error.
			bad := ev
			bad.IsBase64Encoded = true
			if _, err := Request(context.Background(), bad); err == nil {
				t.Fatalf("body %q is not base64 but was accepted as such", body)
			}
		}
		r, err := Request(context.Background(), ev)
		if err != nil {
			return
		}
		got, _ := io.ReadAll(r.Body)
		if !bytes.Equal(got, want) || r.Method != method {
			t.Fatalf("%s %q with body %q became %s with body %q", method, path, want, r.Method, got)
		}
	})
}
