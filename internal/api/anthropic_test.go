package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/errs"
)

// Under /v1/messages an error's type is Anthropic's for its status.
func TestAnthropicErrorTypes(t *testing.T) {
	t.Parallel()
	for kind, want := range map[errs.Kind]string{
		errs.Internal:        "api_error",
		errs.Invalid:         "invalid_request_error",
		errs.Unauthenticated: "authentication_error",
		errs.Forbidden:       "permission_error",
		errs.NotFound:        "not_found_error",
		errs.Conflict:        "invalid_request_error",
		errs.TooLarge:        "request_too_large",
		errs.RateLimited:     "rate_limit_error",
	} {
		if got := wire.ErrorType(statusOf[kind]); got != want {
			t.Errorf("kind %v: got %q, want %q", kind, got, want)
		}
	}
}

// The Message Batches routes (internal/anthropic) decode a create body
// the way every route does, and answer its errors in Anthropic's shape;
// none of these bodies reaches the engine.
func TestMessageBatchCreateBodies(t *testing.T) {
	t.Parallel()
	const raw = "rb-anthropic-test-key-------------------------"
	h := (&API{Auth: auth.Authenticator{Store: newKeyStore(raw, "acme")}, Log: slog.New(slog.DiscardHandler)}).Handler()
	tests := []struct {
		name, body string
		status     int
		errType    string
		want       string
	}{
		{"empty body", ``, http.StatusBadRequest, "invalid_request_error", "empty"},
		{"malformed", `{"requests":[`, http.StatusBadRequest, "invalid_request_error", "malformed JSON"},
		{"array", `[]`, http.StatusBadRequest, "invalid_request_error", "JSON object"},
		{"too deep", `{"requests":[` + strings.Repeat(`[`, maxDepth+1) + strings.Repeat(`]`, maxDepth+1) + `]}`, http.StatusBadRequest, "invalid_request_error", "deeper than"},
		{"duplicate member", `{"requests":[{"custom_id":"a","params":{"model":"claude","max_tokens":1,"model":"claude-opus"}}]}`, http.StatusBadRequest, "invalid_request_error", `duplicate member name "model"`},
		{"unknown field", `{"requests":[],"metadata":{}}`, http.StatusBadRequest, "invalid_request_error", "metadata: unknown field"},
		{"too large", `{"requests":["` + strings.Repeat("x", maxJSON) + `"]}`, http.StatusRequestEntityTooLarge, "request_too_large", "larger than 4 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/v1/messages/batches", strings.NewReader(tt.body))
			r.Header.Set("x-api-key", raw)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			var body struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != tt.status || body.Type != "error" || body.Error.Type != tt.errType || !strings.Contains(body.Error.Message, tt.want) {
				t.Fatalf("got %d %s, want %d %s containing %q", w.Code, w.Body, tt.status, tt.errType, tt.want)
			}
		})
	}
}
