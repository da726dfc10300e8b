package jsonl

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRequests(t *testing.T) {
	t.Parallel()
	input := "\xef\xbb\xbf" + chatRow("a") + "\r\n\n  \n" + obj(`"custom_id":"b\u00e9"`, `"method":"GET"`, `"url":"/x"`, `"body":{}`, `"x":1`) + "\n" + chatRow("c")
	reqs, err := ParseRequests([]byte(input))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{CustomID: "a", Method: "POST", URL: "/v1/chat/completions", Body: []byte(chatBody[len(`"body":`):])},
		{CustomID: "bé", Method: "GET", URL: "/x", Body: []byte(`{}`)},
		{CustomID: "c", Method: "POST", URL: "/v1/chat/completions", Body: []byte(chatBody[len(`"body":`):])},
	}
	if len(reqs) != len(want) {
		t.Fatalf("got %d requests, want %d", len(reqs), len(want))
	}
	for i := range want {
		if reqs[i].CustomID != want[i].CustomID || reqs[i].Method != want[i].Method || reqs[i].URL != want[i].URL || string(reqs[i].Body) != string(want[i].Body) {
			t.Errorf("request %d: got %+v, want %+v", i, reqs[i], want[i])
		}
	}
	for _, empty := range []string{"", "\n", "\r\n\r\n"} {
		if reqs, err := ParseRequests([]byte(empty)); err != nil || len(reqs) != 0 {
			t.Errorf("%q: got %v, %v", empty, reqs, err)
		}
	}
}

func TestParseRequestsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, line, wantInMsg string
	}{
		{"invalid JSON", `{"custom_id":`, "invalid JSON"},
		{"array", `[1]`, "not a JSON object"},
		{"no custom_id", obj(post, chat, chatBody), "custom_id is not a string"},
		{"number custom_id", obj(`"custom_id":1`, post, chat, chatBody), "custom_id is not a string"},
		{"no method", obj(`"custom_id":"x"`, chat, chatBody), "method is not a string"},
		{"no url", obj(`"custom_id":"x"`, post, chatBody), "url is not a string"},
		{"string body", obj(`"custom_id":"x"`, post, chat, `"body":"x"`), "body is not an object"},
		{"invalid UTF-8", "{\"custom_id\":\"\xff\"}", "UTF-8"},
		{"duplicate model", obj(`"custom_id":"x"`, post, chat, `"body":{"model":"gpt-4o-mini","model":"o1"}`), `duplicate member name "model"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseRequests([]byte(chatRow("a") + "\n\n" + tt.line + "\n" + chatRow("b")))
			if !errors.Is(err, ErrMalformedRequest) || !strings.HasPrefix(err.Error(), "line 3: ") || !strings.Contains(err.Error(), tt.wantInMsg) {
				t.Errorf("got %v, want a malformed request on line 3 containing %q", err, tt.wantInMsg)
			}
		})
	}
}
