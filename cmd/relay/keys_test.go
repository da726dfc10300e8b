package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// The key commands say what to set when they cannot reach a table: no
// AWS_ENDPOINT_URL and no credentials (the SDK would end at EC2's instance
// metadata), or an AWS_ENDPOINT_URL where nothing answers any more.
func TestKeysWithoutAWS(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	none := filepath.Join(t.TempDir(), "none")
	for name, tc := range map[string]struct{ endpoint, want string }{
		"no credentials": {"", "set AWS_ENDPOINT_URL to the emulator make dev printed"},
		"stale endpoint": {gone.URL, "nothing answers at AWS_ENDPOINT_URL=" + gone.URL},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range map[string]string{
				"AWS_ENDPOINT_URL": tc.endpoint, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
				"AWS_PROFILE": "", "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
				"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
				"AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1",
			} {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := runMain(t.Context(), []string{"keys", "create", "--tenant", "acme"}, &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}
