package workflow

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/egress"
)

func TestInBodyAndInRow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want bool
	}{
		{"plain row", `{"model":"m","messages":[{"role":"user","content":"relay me"}]}`, false},
		{"relay without workflow", `{"model":"m","relay":{"other":1}}`, false},
		{"workflow object", `{"model":"m","relay":{"workflow":{"url":"https://x"}}}`, true},
		{"workflow of the wrong type", `{"model":"m","relay":{"workflow":5}}`, true},
		{"nested deeper is not the mark", `{"model":"m","metadata":{"relay":{"workflow":{}}}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := InBody([]byte(tt.body)); got != tt.want {
				t.Errorf("InBody: got %v, want %v", got, tt.want)
			}
			row := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":` + tt.body + `}`
			if got := InRow([]byte(row)); got != tt.want {
				t.Errorf("InRow: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseSpec(t *testing.T) {
	t.Parallel()
	local := egress.Policy{AllowPrivate: true, AllowHTTP: true}
	body := func(wf string) []byte { return []byte(`{"model":"m","relay":{"workflow":` + wf + `}}`) }

	s, err := ParseSpec(body(`{"url":"http://127.0.0.1:9/cb","authorization":"Bearer a"}`), local)
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{URL: "http://127.0.0.1:9/cb", Context: []byte(`{}`), MaxSteps: 16, MaxRequests: 64, MaxTokens: 2_000_000, CallbackTimeout: time.Minute}
	if s.URL != want.URL || string(s.Context) != "{}" || s.MaxSteps != want.MaxSteps || s.MaxRequests != want.MaxRequests ||
		s.MaxTokens != want.MaxTokens || s.CallbackTimeout != want.CallbackTimeout || s.Authorization != "Bearer a" {
		t.Fatalf("defaults: got %+v, want %+v", s, want)
	}

	s, err = ParseSpec(body(`{"url":"https://cb.example.com/x","authorization":"Bearer t","context":{"a": [1, 2]},
		"max_steps":3,"max_requests":5,"max_tokens":100,"callback_timeout_ms":1500}`), egress.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Authorization != "Bearer t" || string(s.Context) != `{"a":[1,2]}` || s.MaxSteps != 3 || s.MaxRequests != 5 ||
		s.MaxTokens != 100 || s.CallbackTimeout != 1500*time.Millisecond {
		t.Fatalf("all fields: got %+v", s)
	}

	bad := []struct {
		name, body string
		policy     egress.Policy
		wantIn     string
	}{
		{"relay not an object", `{"model":"m","relay":[1]}`, local, "relay must be an object"},
		{"workflow not an object", `{"model":"m","relay":{"workflow":"https://x"}}`, local, "relay.workflow must be an object"},
		{"no url", string(body(`{}`)), local, "url is required"},
		{"null url", string(body(`{"url":null}`)), local, "url is required"},
		{"url not a string", string(body(`{"url":5}`)), local, "url must be a string"},
		{"ftp", string(body(`{"url":"ftp://x/y"}`)), local, "http(s)"},
		{"credentials", string(body(`{"url":"https://u:p@x.example/y"}`)), local, "credentials"},
		{"no host", string(body(`{"url":"https:///y"}`)), local, "no host"},
		{"http in a deployment", string(body(`{"url":"http://cb.example.com/"}`)), egress.Policy{}, "relay.workflow.url must use https"},
		{"private address in a deployment", string(body(`{"url":"https://10.0.0.1/"}`)), egress.Policy{}, "private address"},
		{"loopback in a deployment", string(body(`{"url":"https://127.0.0.1/"}`)), egress.Policy{}, "loopback"},
		{"unknown field", string(body(`{"url":"https://x.example","max_step":3}`)), local, `no field "max_step"`},
		{"unknown null field", string(body(`{"url":"https://x.example","max_step":null}`)), local, `no field "max_step"`},
		{"max_steps zero", string(body(`{"url":"https://x.example","max_steps":0}`)), local, "max_steps must be an integer from 1"},
		{"max_steps fractional", string(body(`{"url":"https://x.example","max_steps":1.5}`)), local, "max_steps"},
		{"max_requests as a string", string(body(`{"url":"https://x.example","max_requests":"5"}`)), local, "max_requests"},
		{"max_tokens negative", string(body(`{"url":"https://x.example","max_tokens":-1}`)), local, "max_tokens"},
		{"callback timeout too long", string(body(`{"url":"https://x.example","callback_timeout_ms":60001}`)), local, "callback_timeout_ms must be an integer from 1 to 60000"},
		{"authorization with a line break", string(body(`{"url":"https://x.example","authorization":"a\r\nX-Evil: 1"}`)), local, "header value"},
		{"no authorization", string(body(`{"url":"https://x.example"}`)), local, "authorization is required"},
		{"null authorization", string(body(`{"url":"https://x.example","authorization":null}`)), local, "authorization is required"},
		{"empty authorization", string(body(`{"url":"https://x.example","authorization":""}`)), local, "authorization is required"},
		{"authorization not a string", string(body(`{"url":"https://x.example","authorization":{}}`)), local, "authorization must be a string"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSpec([]byte(tt.body), tt.policy)
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalid || !strings.Contains(e.Message, tt.wantIn) {
				t.Fatalf("got %v, want %s containing %q", err, CodeInvalid, tt.wantIn)
			}
		})
	}
}
