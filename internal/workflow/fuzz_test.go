package workflow

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/jsonl"
)

// The callback is a server the tenant names: its answers are hostile input.

func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		`{"state":"continue","requests":[{"id":"a","body":{"model":"m"}}]}`,
		`{"state":"wait","seconds":30}`, `{"state":"wait","seconds":1e400}`, `{"state":"wait","seconds":-0}`,
		`{"state":"completed","output":{"a":1}}`, `{"state":"completed","output":{"a":1},"output":[]}`,
		`{"state":"failed","error":{"message":"no","code":"x"}}`, `{"state":"continue","requests":{}}`,
		`{"state":"continue","state":"completed","requests":[]}`, `[]`, `{"state":"wait","seconds":"5"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseAnswer(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidResponse {
				t.Fatalf("ParseAnswer(%q): %v is not %s", data, err, CodeInvalidResponse)
			}
			return
		}
		switch a.State {
		case StateContinue:
			for i, q := range a.Requests {
				var body map[string]json.RawMessage
				if q.ID == "" || q.CustomID == "" || json.Unmarshal(q.Body, &body) != nil || body == nil {
					t.Fatalf("ParseAnswer(%q): request %d is %+v", data, i, q)
				}
			}
		case StateWait:
			if a.Wait < 0 || a.Wait > MaxWait {
				t.Fatalf("ParseAnswer(%q): wait %s", data, a.Wait)
			}
		case StateCompleted:
			var out map[string]json.RawMessage
			if json.Unmarshal(a.Output, &out) != nil || out == nil {
				t.Fatalf("ParseAnswer(%q): output %q is not an object", data, a.Output)
			}
		case StateFailed:
			if a.Failure == nil || a.Failure.Code == "" || len(a.Failure.Code) > maxCodeLen {
				t.Fatalf("ParseAnswer(%q): failure %+v", data, a.Failure)
			}
		default:
			t.Fatalf("ParseAnswer(%q): state %q", data, a.State)
		}
	})
}

// FuzzParseSpec: a record's relay.workflow either is refused with
// invalid_workflow, or names a URL the deployment policy allows and an
// Authorization that cannot split a header.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		`{"relay":{"workflow":{"url":"https://example.com/cb","authorization":"Bearer x"}}}`,
		`{"relay":{"workflow":{"url":"https://127.0.0.1/cb"}}}`,
		`{"relay":{"workflow":{"url":"https://example.com/","authorization":"a\r\nX-Evil: 1"}}}`,
		`{"relay":{"workflow":{"url":"https://u:p@example.com/","max_steps":0}}}`,
		`{"relay":{"workflow":{"url":"https://example.com/"},"workflow":{"url":"http://10.0.0.1/"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseSpec(body, egress.Policy{})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalid {
				t.Fatalf("ParseSpec(%q): %v is not %s", body, err, CodeInvalid)
			}
			return
		}
		if (egress.Policy{}).CheckURL(s.URL) != nil {
			t.Fatalf("ParseSpec(%q) accepted url %q", body, s.URL)
		}
		if u, err := url.Parse(s.URL); err != nil || u.User != nil {
			t.Fatalf("ParseSpec(%q) accepted url %q", body, s.URL)
		}
		if s.Authorization == "" || strings.ContainsAny(s.Authorization, "\r\n\x00") {
			t.Fatalf("ParseSpec(%q) accepted authorization %q", body, s.Authorization)
		}
		if s.MaxSteps < 1 || s.MaxRequests < 1 || s.MaxTokens < 1 || s.CallbackTimeout <= 0 || !json.Valid(s.Context) {
			t.Fatalf("ParseSpec(%q) = %+v", body, s)
		}
	})
}

// FuzzInRow: the planner's test of a whole row agrees with the executor's
// test of the body it reads from that row (jsonl.ParseRequests), so a
// workflow record always gets the chunk of its own the planner promises.
func FuzzInRow(f *testing.F) {
	for _, s := range []string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","relay":{"workflow":{"url":"https://x"}}}}`,
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`,
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"relay":{"workflow":{}}},"body":{"model":"m"}}`,
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"rel\u0061y":{"workflow":{}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, row []byte) {
		reqs, err := jsonl.ParseRequests(row)
		if err != nil || len(reqs) != 1 || strings.ContainsAny(string(row), "\n") {
			return
		}
		if got, want := InRow(row), InBody(reqs[0].Body); got != want {
			t.Fatalf("InRow(%q) = %v, but InBody of its body %q = %v", row, got, reqs[0].Body, want)
		}
	})
}
