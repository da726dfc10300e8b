package workflow

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/egress"

	"github.com/relaybatch/relay/internal/inference"
)

func TestParseAnswer(t *testing.T) {
	t.Parallel()
	a, err := ParseAnswer([]byte(`{"state":"continue","requests":[{"id":"p","custom_id":"pay","body":{"model":"m"}},{"custom_id":"only-cid","body":{}},{"body":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.State != StateContinue || len(a.Requests) != 3 {
		t.Fatalf("continue: got %+v", a)
	}
	ids := [][2]string{{"p", "pay"}, {"only-cid", "only-cid"}, {"request-2", "request-2"}}
	for i, q := range a.Requests {
		if q.ID != ids[i][0] || q.CustomID != ids[i][1] {
			t.Errorf("request %d: got id %q custom_id %q, want %v", i, q.ID, q.CustomID, ids[i])
		}
	}
	if a, err = ParseAnswer([]byte(`{"state":"wait","seconds":1.5}`)); err != nil || a.Wait != 1500*time.Millisecond {
		t.Fatalf("wait: got %+v, %v", a, err)
	}
	if a, err = ParseAnswer([]byte(`{"state":"completed","output":{ "summary" : "x" }}`)); err != nil || string(a.Output) != `{"summary":"x"}` {
		t.Fatalf("completed: got %+v, %v", a, err)
	}
	if a, err = ParseAnswer([]byte(`{"state":"failed","error":{"message":"no way"}}`)); err != nil || a.Failure.Code != CodeFailed || a.Failure.Message != "no way" {
		t.Fatalf("failed: got %+v, %v", a, err)
	}
	if a, err = ParseAnswer([]byte(`{"state":"failed","error":{"message":"m","code":"fraud_suspected"}}`)); err != nil || a.Failure.Code != CodeFailed || a.Failure.Message != "fraud_suspected: m" {
		t.Fatalf("failed with a code: got %+v, %v", a, err)
	}
	if a, err = ParseAnswer([]byte(`{"state":"failed"}`)); err != nil || a.Failure.Code != CodeFailed || a.Failure.Message == "" {
		t.Fatalf("failed without error: got %+v, %v", a, err)
	}

	bad := []struct{ name, answer, wantIn string }{
		{"not JSON", `ok`, "not a JSON object"},
		{"an array", `[]`, "not a JSON object"},
		{"no state", `{"requests":[]}`, "no state"},
		{"state of the wrong type", `{"state":1}`, "no state"},
		{"unknown state", `{"state":"done"}`, `state "done"`},
		{"continue without requests", `{"state":"continue"}`, "requests array"},
		{"requests not an array", `{"state":"continue","requests":{}}`, "requests array"},
		{"request not an object", `{"state":"continue","requests":[1]}`, "request 0"},
		{"request without body", `{"state":"continue","requests":[{"id":"a"}]}`, "request 0 has no object body"},
		{"request id not a string", `{"state":"continue","requests":[{"id":5,"body":{}}]}`, "request 0"},
		{"wait too long", `{"state":"wait","seconds":61}`, "from 0 to 60"},
		{"wait negative", `{"state":"wait","seconds":-1}`, "from 0 to 60"},
		{"wait as a string", `{"state":"wait","seconds":"5"}`, "from 0 to 60"},
		{"wait without seconds", `{"state":"wait"}`, "missing"},
		{"completed without output", `{"state":"completed"}`, "output object"},
		{"completed with a string", `{"state":"completed","output":"x"}`, "output object"},
		{"failed with a string error", `{"state":"failed","error":"x"}`, "error object"},
		// A step's model is checked on the first "model" (gjson), while
		// upstreams keep the last: the answer is refused whole.
		{"duplicate model in a request body", `{"state":"continue","requests":[{"body":{"model":"gpt-4o-mini","messages":[],"model":"o1-pro"}}]}`, `duplicate member name "model"`},
		{"duplicate model, escaped", `{"state":"continue","requests":[{"body":{"model":"m","\u006dodel":"o1-pro"}}]}`, `duplicate member name "model"`},
		{"duplicate body", `{"state":"continue","requests":[{"body":{"model":"m"},"body":{"model":"o1-pro"}}]}`, `duplicate member name "body"`},
		{"duplicate state", `{"state":"completed","output":{},"state":"continue","requests":[]}`, `duplicate member name "state"`},
		{"failed with a long code", `{"state":"failed","error":{"code":"` + strings.Repeat("c", 65) + `"}}`, "longer than"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseAnswer([]byte(tt.answer))
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidResponse || !strings.Contains(e.Message, tt.wantIn) {
				t.Fatalf("got %v, want %s containing %q", err, CodeInvalidResponse, tt.wantIn)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		wantBody   string // "" when rejected
		wantCode   string
	}{
		{"the record's model", `{"model":"m","messages":[]}`, `{"model":"m","messages":[]}`, ""},
		{"no model takes the record's", `{"messages":[]}`, `{"messages":[],"model":"m"}`, ""},
		{"relay is stripped", `{"model":"m","relay":{"tag":1},"n":1}`, `{"model":"m","n":1}`, ""},
		{"another model", `{"model":"other"}`, "", "model_not_allowed"},
		{"model of the wrong type", `{"model":5}`, "", "model_not_allowed"},
		{"streaming", `{"model":"m","stream":true}`, "", "stream_unsupported"},
		{"nested workflow", `{"model":"m","relay":{"workflow":{"url":"https://x"}}}`, "", "nested_workflow"},
		{"tool_config without authorization", `{"model":"m","relay":{"tool_config":{"url":"https://tools.example.com"}}}`, "", "invalid_tool_config"},
		{"tool_config to a private address", `{"model":"m","relay":{"tool_config":{"url":"https://10.0.0.1/t","authorization":"a"}}}`, "", "invalid_tool_config"},
		{"tool_config with an unknown field", `{"model":"m","relay":{"tool_config":{"url":"https://t.example.com","authorization":"a","tools":[]}}}`, "", "invalid_tool_config"},
		{"tool_config is stripped", `{"model":"m","relay":{"tool_config":{"url":"https://t.example.com","authorization":"a"}}}`, `{"model":"m"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			call, rej := Admit(Request{ID: "i", CustomID: "c", Body: json.RawMessage(tt.body)}, "m", egress.Policy{})
			body := call.Body
			if tt.wantCode == "" {
				if rej != nil || string(body) != tt.wantBody {
					t.Fatalf("got %s, %+v; want %s", body, rej, tt.wantBody)
				}
				return
			}
			var e struct {
				Error struct{ Code, Type string }
			}
			json.Unmarshal(rej.Body, &e)
			if body != nil || rej == nil || rej.StatusCode != 400 || rej.ID != "i" || rej.CustomID != "c" || e.Error.Code != tt.wantCode || e.Error.Type != "invalid_request_error" {
				t.Fatalf("got %s, %+v; want a 400 %s", body, rej, tt.wantCode)
			}
		})
	}
}

func TestEventWireShape(t *testing.T) {
	t.Parallel()
	start, _ := json.Marshal(Event{EventID: "e", Event: EventStart, WorkflowID: "b:r", RecordID: "r", Attempt: 1, Context: json.RawMessage(`{"k":1}`)})
	if want := `{"event_id":"e","event":"start","workflow_id":"b:r","record_id":"r","step":0,"attempt":1,"context":{"k":1}}`; string(start) != want {
		t.Errorf("start: got %s, want %s", start, want)
	}
	empty, _ := json.Marshal(Event{EventID: "e", Event: EventResults, WorkflowID: "b:r", RecordID: "r", Step: 2, Attempt: 3})
	if want := `{"event_id":"e","event":"results","workflow_id":"b:r","record_id":"r","step":2,"attempt":3,"context":{},"results":[]}`; string(empty) != want {
		t.Errorf("results after a wait: got %s, want %s", empty, want)
	}
	if EventID("b:r", 1) != EventID("b:r", 1) || EventID("b:r", 1) == EventID("b:r", 2) || EventID("b:r", 1) == EventID("b:s", 1) ||
		!strings.HasPrefix(EventID("b:r", 0), "wf_evt_") {
		t.Error("event ids must be stable per (record, step) and differ between them")
	}
}

func TestResultOf(t *testing.T) {
	t.Parallel()
	q := Request{ID: "i", CustomID: "c"}
	ok := resultOf(q, inference.Result{StatusCode: 200, Body: json.RawMessage(`{"x":1}`), Usage: inference.Usage{InputTokens: 3, OutputTokens: 4, TotalTokens: 7}})
	if ok.StatusCode != 200 || string(ok.Body) != `{"x":1}` || ok.Usage != (ResultUsage{3, 4}) {
		t.Errorf("answer: got %+v", ok)
	}
	tests := []struct {
		code string
		want int
	}{
		{inference.CodeRequestTimeout, 504},
		{inference.CodeConnectionError, 502},
		{inference.CodeInvalidRequest, 400},
		{inference.CodeAPIKeyUnavailable, 500},
	}
	for _, tt := range tests {
		r := resultOf(q, inference.Result{ErrCode: tt.code, ErrMessage: "m"})
		if r.StatusCode != tt.want || !strings.Contains(string(r.Body), tt.code) {
			t.Errorf("%s: got %d %s, want %d", tt.code, r.StatusCode, r.Body, tt.want)
		}
	}
}
