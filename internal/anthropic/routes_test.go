package anthropic

import (
	"crypto/tls"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/errs"
)

func TestBaseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		host   string
		tls    bool
		header map[string]string
		want   string
	}{
		{"local", "127.0.0.1:8080", false, nil, "http://127.0.0.1:8080"},
		{"tls", "relay.example.com", true, nil, "https://relay.example.com"},
		{"behind a proxy", "abc.execute-api.us-east-1.amazonaws.com", false,
			map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Prefix": "/prod"}, "https://abc.execute-api.us-east-1.amazonaws.com/prod"},
		{"proxy chain", "h", false, map[string]string{"X-Forwarded-Proto": "HTTPS, http"}, "https://h"},
		{"odd proto", "h", false, map[string]string{"X-Forwarded-Proto": "gopher"}, "http://h"},
		{"nested prefix", "h", false, map[string]string{"X-Forwarded-Prefix": "a/b/"}, "http://h/a/b"},
		{"prefix with a dot-dot", "h", false, map[string]string{"X-Forwarded-Prefix": "/a/../b"}, "http://h"},
		{"prefix with a query", "h", false, map[string]string{"X-Forwarded-Prefix": "/a?b"}, "http://h"},
		{"prefix with leading slashes", "h", false, map[string]string{"X-Forwarded-Prefix": "//evil.example"}, "http://h/evil.example"}, // a path, never another host
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/v1/messages/batches", nil)
			r.Host = tt.host
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			} else {
				r.TLS = nil
			}
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			if got := baseURL(r); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResultsURLOnlyOnceEnded(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "/v1/messages/batches/msgbatch_1", nil)
	r.Host = "h"
	if m := withResultsURL(r, wire.MessageBatch{ID: "msgbatch_1", ProcessingStatus: wire.ProcessingInProgress}); m.ResultsURL != nil {
		t.Fatalf("in progress: results_url %q", *m.ResultsURL)
	}
	m := withResultsURL(r, wire.MessageBatch{ID: "msgbatch_1", ProcessingStatus: wire.ProcessingEnded})
	if m.ResultsURL == nil || *m.ResultsURL != "http://h/v1/messages/batches/msgbatch_1/results" {
		t.Fatalf("ended: results_url %v", m.ResultsURL)
	}
}

// testRoutes decode with a stand-in for internal/api's decoding of a JSON
// body (its own tests cover that): any error is an invalid request.
var testRoutes = &routes{decode: func(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return errs.Invalidf("", "malformed JSON: %v", err)
	}
	return nil
}}

func TestDecodeMessageBatchCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		wantN      int
		wantErr    string
	}{
		{"two", `{"requests":[{"custom_id":"a"},{"custom_id":"b"}]}`, 2, ""},
		{"empty list", `{"requests":[]}`, 0, ""}, // the engine says what is wrong with it
		{"null", `null`, 0, "JSON object"},
		{"no requests", `{}`, 0, "requests: an array"},
		{"requests null", `{"requests":null}`, 0, "requests: an array"},
		{"requests a string", `{"requests":"a"}`, 0, "requests: an array"},
		{"unknown field", `{"requests":[],"metadata":{}}`, 0, "metadata: unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reqs, err := testRoutes.decodeMessageBatchCreate([]byte(tt.body))
			if tt.wantErr != "" {
				if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an invalid request error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(reqs) != tt.wantN {
				t.Fatalf("got %d requests, %v; want %d", len(reqs), err, tt.wantN)
			}
		})
	}
}

func FuzzDecodeMessageBatchCreate(f *testing.F) {
	for _, s := range []string{`{"requests":[{"custom_id":"a","params":{"model":"m"}}]}`, `{"requests":null}`, `[]`, `{`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		reqs, err := testRoutes.decodeMessageBatchCreate(body)
		if err != nil && !errs.Is(err, errs.Invalid) {
			t.Fatalf("an undecodable body is a client error, got %v", err)
		}
		if err == nil && reqs == nil {
			t.Fatal("no error and no requests")
		}
	})
}
