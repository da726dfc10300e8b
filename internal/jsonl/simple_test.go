package jsonl

import (
	"strings"
	"testing"
)

func simpleOptions() Options {
	o := chatOptions()
	o.Model = "gpt-4o-mini"
	return o
}

// Simple rows become chat completions for the batch's model; rows
// without a custom_id get row-<n>, n counting rows from 1.
func TestScanSimpleRows(t *testing.T) {
	t.Parallel()
	input := `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}` + "\n" +
		"\n" +
		`{"custom_id":"mine","prompt":"say \"x\" <b>"}` + "\n" +
		chatRow("full") + "\n" +
		`{"prompt":"third"}` + "\n"
	res, rows := scanAll(t, input, simpleOptions())
	if len(res.Errors) != 0 {
		t.Fatalf("got errors %v", res.Errors)
	}
	want := []struct{ id, json string }{
		{"row-1", `{"custom_id":"row-1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}}`},
		{"mine", `{"custom_id":"mine","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"say \"x\" <b>"}]}}`},
		{"full", chatRow("full")},
		{"row-4", `{"custom_id":"row-4","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"third"}]}}`},
	}
	if len(rows) != len(want) || res.Rows != 4 || res.Model != "gpt-4o-mini" {
		t.Fatalf("got %d rows (Rows %d, Model %q), want %d of gpt-4o-mini", len(rows), res.Rows, res.Model, len(want))
	}
	for i, w := range want {
		if rows[i].CustomID != w.id || string(rows[i].JSON) != w.json || rows[i].Model != "gpt-4o-mini" {
			t.Errorf("row %d: got %s %s, want %s %s", i, rows[i].CustomID, rows[i].JSON, w.id, w.json)
		}
		reqs, err := ParseRequests(rows[i].JSON)
		if err != nil || len(reqs) != 1 || reqs[0].CustomID != w.id {
			t.Errorf("row %d: the normalized request does not parse back: %v %+v", i, err, reqs)
		}
	}
	if rows[1].Line != 3 || rows[1].Start != int64(strings.Index(input, `{"custom_id":"mine"`)) {
		t.Errorf("row mine: line %d start %d, want its line in the input", rows[1].Line, rows[1].Start)
	}
}

// A broken simple row names its line and the field.
func TestScanSimpleRowRules(t *testing.T) {
	t.Parallel()
	embeddings := simpleOptions()
	embeddings.Endpoint = "/v1/embeddings"
	noModel := simpleOptions()
	noModel.Model = ""
	unknown := simpleOptions()
	unknown.Model = "gpt-9"
	denied := simpleOptions()
	denied.AllowedModel = func(string) bool { return false }
	tests := []struct {
		name      string
		o         Options
		line      string
		wantCode  string
		wantParam string
		wantInMsg string
	}{
		{"no batch model", noModel, `{"prompt":"hi"}`, CodeMissingModel, "model", "needs the batch's model"},
		{"unknown batch model", unknown, `{"prompt":"hi"}`, CodeModelNotFound, "model", `"gpt-9"`},
		{"model not allowed", denied, `{"prompt":"hi"}`, CodeModelNotAllowed, "model", "may use"},
		{"not chat", embeddings, `{"prompt":"hi"}`, CodeUnsupportedEndpoint, "endpoint", "/v1/chat/completions"},
		{"both", simpleOptions(), `{"prompt":"hi","messages":[{"role":"user","content":"x"}]}`, CodeInvalidRow, "prompt", "not both"},
		{"other member", simpleOptions(), `{"prompt":"hi","max_tokens":5}`, CodeInvalidRow, "max_tokens", `not "max_tokens"`},
		{"number prompt", simpleOptions(), `{"prompt":5}`, CodeInvalidPrompt, "prompt", "not 5"},
		{"blank prompt", simpleOptions(), `{"prompt":"  "}`, CodeEmptyPrompt, "prompt", "empty"},
		{"string messages", simpleOptions(), `{"messages":"hi"}`, CodeInvalidMessages, "messages", "non-empty array"},
		{"empty messages", simpleOptions(), `{"messages":[]}`, CodeInvalidMessages, "messages", "non-empty array"},
		{"message not an object", simpleOptions(), `{"messages":[{"role":"user","content":"x"},"hi"]}`, CodeInvalidMessages, "messages[1]", `"hi"`},
		{"number custom_id", simpleOptions(), `{"custom_id":1,"prompt":"hi"}`, CodeInvalidCustomID, "custom_id", "not 1"},
		{"empty custom_id", simpleOptions(), `{"custom_id":"","prompt":"hi"}`, CodeMissingCustomID, "custom_id", "row-2"},
		{"duplicate custom_id", simpleOptions(), `{"custom_id":"a","prompt":"hi"}`, CodeDuplicateCustomID, "custom_id", "line 1"},
		{"neither body nor prompt", simpleOptions(), obj(`"custom_id":"b"`, post, chat), CodeInvalidBody, "body", "messages or prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Line 1 is valid unless the options refuse every row.
			res, _ := scanAll(t, chatRow("a")+"\n"+tt.line+"\n", tt.o)
			var line2 []LineError
			for _, e := range res.Errors {
				if e.Line == 2 {
					line2 = append(line2, e)
				}
			}
			if len(line2) != 1 {
				t.Fatalf("got errors %q, want one %s on line 2", errorCodes(res.Errors), tt.wantCode)
			}
			got := line2[0]
			if got.Code != tt.wantCode || got.Line != 2 || got.Param != tt.wantParam {
				t.Errorf("got %+v, want code %s, line 2, param %q", got, tt.wantCode, tt.wantParam)
			}
			if !strings.HasPrefix(got.Message, "line 2: ") || !strings.Contains(got.Message, tt.wantInMsg) {
				t.Errorf("got message %q, want it to contain %q", got.Message, tt.wantInMsg)
			}
		})
	}
}

// A generated id taken by an earlier row is a duplicate, not a second row-2.
func TestScanSimpleGeneratedIDCollides(t *testing.T) {
	t.Parallel()
	res, _ := scanAll(t, `{"custom_id":"row-2","prompt":"a"}`+"\n"+`{"prompt":"b"}`+"\n", simpleOptions())
	if len(res.Errors) != 1 || res.Errors[0].Code != CodeDuplicateCustomID || res.Errors[0].Line != 2 {
		t.Fatalf("got %v, want a duplicate custom_id on line 2", res.Errors)
	}
}
