package batches

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/files"
	"github.com/relaybatch/relay/internal/jsonl"
)

// The rules of POST /v1/batches that need nothing stored (checkCreate,
// checkOptions, checkInputFile), without AWS: each is tried with values it
// accepts and values it refuses, and a refusal must be a 400 naming the
// field at fault.

func testModels(t *testing.T) *config.Models {
	t.Helper()
	ms, err := config.ParseModels([]byte(`models:
  - {name: gpt-4o, provider: openai, base_url: "https://api.openai.com/v1"}
  - {name: gpt-4o-mini, provider: openai, base_url: "https://api.openai.com/v1"}
  - {name: claude, provider: anthropic, base_url: "https://api.anthropic.com"}
`))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// wantInvalid checks err is a 400 naming param ("" means no error), with a
// code more specific than invalid_request.
func wantInvalid(t *testing.T, err error, param, msg string) {
	t.Helper()
	if param == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want a 400 on %s", err, param)
	}
	if e.Kind != errs.Invalid || e.Code == "" || e.Code == "invalid_request" || e.Param != param {
		t.Fatalf("got %s error %q on %q (%s), want a specific code on %q", e.Code, e.Message, e.Param, err, param)
	}
	if msg != "" && !strings.Contains(e.Message, msg) {
		t.Fatalf("message %q does not say %q", e.Message, msg)
	}
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	models := testModels(t)
	const base = `"endpoint":"/v1/chat/completions","input_file_id":"file-1"`
	long := func(n int) string { return strings.Repeat("k", n) }
	md := func(n int) string {
		var pairs []string
		for i := range n {
			pairs = append(pairs, `"k`+strings.Repeat("x", i)+`":"v"`)
		}
		return `"metadata":{` + strings.Join(pairs, ",") + `}`
	}
	tests := []struct {
		name   string
		body   string // the fields of the JSON body
		shaped bool   // a CreateShaped with a shape (a Message Batch)
		eps    []string
		mod    func(*CreateRequest) // what JSON cannot carry
		param  string               // the field refused; "" accepts
		msg    string
		code   string   // the refusal's code, when the case checks it
		key    []string // the creating key's allow-list (none: every model)
	}{
		// endpoint
		{name: "chat completions", body: base},
		{name: "embeddings", body: `"endpoint":"/v1/embeddings","input_file_id":"f"`},
		{name: "responses", body: `"endpoint":"/v1/responses","input_file_id":"f"`},
		{name: "completions", body: `"endpoint":"/v1/completions","input_file_id":"f"`},
		{name: "no endpoint", body: `"input_file_id":"f"`, param: "endpoint", msg: "endpoint is required", code: "missing_required_parameter"},
		{name: "unknown endpoint", body: `"endpoint":"/v1/images","input_file_id":"f"`, param: "endpoint", msg: "not supported", code: "invalid_endpoint"},
		{name: "trailing slash", body: `"endpoint":"/v1/chat/completions/","input_file_id":"f"`, param: "endpoint"},
		{name: "messages is not an OpenAI batch endpoint", body: `"endpoint":"/v1/messages","input_file_id":"f"`, param: "endpoint"},
		{name: "messages for a Message Batch", body: `"endpoint":"/v1/messages","input_file_id":"f"`, eps: []string{"/v1/messages"}, shaped: true},
		{name: "chat is no Message Batch endpoint", body: base, eps: []string{"/v1/messages"}, shaped: true, param: "endpoint"},

		// completion_window
		{name: "window 24h", body: base + `,"completion_window":"24h"`},
		{name: "window 1h", body: base + `,"completion_window":"1h"`},
		{name: "window 7h", body: base + `,"completion_window":"7h"`},
		{name: "window in minutes, whole hours", body: base + `,"completion_window":"120m"`},
		{name: "window 0h", body: base + `,"completion_window":"0h"`, param: "completion_window"},
		{name: "window 25h", body: base + `,"completion_window":"25h"`, param: "completion_window"},
		{name: "window 48h", body: base + `,"completion_window":"48h"`, param: "completion_window"},
		{name: "window 90m", body: base + `,"completion_window":"90m"`, param: "completion_window"},
		{name: "window 1.5h", body: base + `,"completion_window":"1.5h"`, param: "completion_window"},
		{name: "window -1h", body: base + `,"completion_window":"-1h"`, param: "completion_window"},
		{name: "window without unit", body: base + `,"completion_window":"24"`, param: "completion_window", msg: "whole number of hours"},

		// metadata
		{name: "16 metadata pairs", body: base + "," + md(16)},
		{name: "17 metadata pairs", body: base + "," + md(17), param: "metadata", msg: "at most 16 pairs, got 17", code: "invalid_metadata"},
		{name: "metadata key of 64", body: base + `,"metadata":{"` + long(64) + `":"v"}`},
		{name: "metadata key of 65", body: base + `,"metadata":{"` + long(65) + `":"v"}`, param: "metadata"},
		{name: "metadata value of 512", body: base + `,"metadata":{"k":"` + long(512) + `"}`},
		{name: "metadata value of 513", body: base + `,"metadata":{"k":"` + long(513) + `"}`, param: "metadata", code: "invalid_metadata"},
		// Limits count characters, as OpenAI's do, not UTF-8 bytes.
		{name: "metadata key of 64 accented characters", body: base + `,"metadata":{"` + strings.Repeat("é", 64) + `":"v"}`},
		{name: "metadata value of 512 CJK characters", body: base + `,"metadata":{"k":"` + strings.Repeat("字", 512) + `"}`},
		{name: "metadata key of 65 accented characters", body: base + `,"metadata":{"` + strings.Repeat("é", 65) + `":"v"}`, param: "metadata"},
		{name: "metadata not UTF-8", body: base, mod: func(r *CreateRequest) { r.Metadata = map[string]string{"k": "\xff"} }, param: "metadata"},
		{name: "empty metadata", body: base + `,"metadata":{}`},

		// priority
		{name: "priority 1000", body: base + `,"priority":1000`},
		{name: "priority -1000", body: base + `,"priority":-1000`},
		{name: "priority 1001", body: base + `,"priority":1001`, param: "priority"},
		{name: "priority -1001", body: base + `,"priority":-1001`, param: "priority"},

		// schedule
		{name: "a template", body: base + `,"schedule":"0 6 * * 1-5"`},
		{name: "a template in a time zone", body: base + `,"schedule":"0 6 * * *","schedule_timezone":"Europe/Paris"`},
		{name: "schedule of four fields", body: base + `,"schedule":"0 6 * *"`, param: "schedule"},
		{name: "minute 60", body: base + `,"schedule":"60 * * * *"`, param: "schedule"},
		{name: "unknown time zone", body: base + `,"schedule":"0 6 * * *","schedule_timezone":"Mars/Olympus"`, param: "schedule_timezone"},
		{name: "time zone without schedule", body: base + `,"schedule_timezone":"UTC"`, param: "schedule_timezone", msg: "send schedule too"},

		// output_expires_after
		{name: "outputs kept an hour", body: base + `,"output_expires_after":{"anchor":"created_at","seconds":3600}`},
		{name: "outputs kept 30 days", body: base + `,"output_expires_after":{"anchor":"created_at","seconds":2592000}`},
		{name: "outputs kept under an hour", body: base + `,"output_expires_after":{"anchor":"created_at","seconds":3599}`, param: "output_expires_after.seconds"},
		{name: "outputs kept over 30 days", body: base + `,"output_expires_after":{"anchor":"created_at","seconds":2592001}`, param: "output_expires_after.seconds"},
		{name: "no anchor", body: base + `,"output_expires_after":{"seconds":3600}`, param: "output_expires_after.anchor"},
		{name: "another anchor", body: base + `,"output_expires_after":{"anchor":"completed_at","seconds":3600}`, param: "output_expires_after.anchor"},

		// webhook_url
		{name: "https webhook", body: base + `,"webhook_url":"https://hooks.example.com/relay?x=1"`},
		{name: "http webhook", body: base + `,"webhook_url":"http://hooks.example.com/relay"`, param: "webhook_url", msg: "https"},
		{name: "webhook to loopback", body: base + `,"webhook_url":"https://127.0.0.1/hook"`, param: "webhook_url"},
		{name: "webhook to a private address", body: base + `,"webhook_url":"https://10.1.2.3/hook"`, param: "webhook_url"},
		{name: "webhook with credentials", body: base + `,"webhook_url":"https://u:p@hooks.example.com/"`, param: "webhook_url"},
		{name: "webhook without host", body: base + `,"webhook_url":"https:///hook"`, param: "webhook_url"},
		{name: "webhook not a URL", body: base + `,"webhook_url":"hooks dot example"`, param: "webhook_url"},
		{name: "webhook URL too long", body: base + `,"webhook_url":"https://hooks.example.com/` + long(5000) + `"`, param: "webhook_url"},

		// fallback_model
		{name: "fallback of the same shape", body: base + `,"fallback_model":"gpt-4o-mini"`},
		{name: "fallback not configured", body: base + `,"fallback_model":"gpt-5"`, param: "fallback_model", msg: "not a configured model (configured: gpt-4o, gpt-4o-mini, claude)"},
		{name: "fallback of another shape", body: base + `,"fallback_model":"claude"`, param: "fallback_model", msg: "takes anthropic requests"},
		{name: "Message Batch fallback", body: `"endpoint":"/v1/messages","input_file_id":"f","fallback_model":"claude"`, eps: []string{"/v1/messages"}, shaped: true},
		{name: "Message Batch fallback of OpenAI shape", body: `"endpoint":"/v1/messages","input_file_id":"f","fallback_model":"gpt-4o"`, eps: []string{"/v1/messages"}, shaped: true, param: "fallback_model"},
		{name: "fallback the key may use", body: base + `,"fallback_model":"gpt-4o-mini"`, key: []string{"gpt-4o", "gpt-4o-mini"}},
		{name: "fallback the key may not use", body: base + `,"fallback_model":"gpt-4o-mini"`, key: []string{"gpt-4o"}, param: "fallback_model",
			msg: `fallback_model "gpt-4o-mini" is not a model this API key may use`, code: "model_not_allowed"},

		// the input
		{name: "inline requests", body: `"endpoint":"/v1/chat/completions","requests":[{"body":{"model":"gpt-4o"}}]`},
		{name: "input file and inline requests", body: base + `,"requests":[{}]`, param: "requests", msg: "not both"},
		{name: "no input", body: `"endpoint":"/v1/chat/completions"`, param: "input_file_id", msg: "is required"},
		{name: "empty requests", body: `"endpoint":"/v1/chat/completions","requests":[]`, param: "input_file_id"},
		{name: "inline requests without method and url", body: `"endpoint":"/v1/embeddings","requests":[{"body":{"model":"gpt-4o","input":"x"}}]`},
		{name: "an inline request of another method", body: `"endpoint":"/v1/chat/completions","requests":[{"body":{"model":"gpt-4o"}},{"method":"GET","body":{"model":"gpt-4o"}}]`,
			param: "requests[1].method", msg: `requests[1].method: method must be "POST", not "GET"`},
		{name: "an inline request of an unknown model", body: `"endpoint":"/v1/chat/completions","requests":[{"body":{"model":"gpt-5"}}]`,
			param: "requests[0].body.model", msg: "not a configured model"},
		{name: "an inline request without a body", body: `"endpoint":"/v1/chat/completions","requests":[{"custom_id":"a"}]`, param: "requests[0].body"},
		{name: "inline requests with one custom_id twice", body: `"endpoint":"/v1/chat/completions","requests":[{"custom_id":"a","body":{"model":"gpt-4o"}},{"custom_id":"a","body":{"model":"gpt-4o"}}]`, param: "requests[1].custom_id"},
		{name: "an inline request not an object", body: `"endpoint":"/v1/chat/completions","requests":[{},"x"]`, param: "requests[1]"},
		{name: "a null inline request", body: `"endpoint":"/v1/chat/completions","requests":[null]`, param: "requests[0]"},
		{name: "an inline array", body: `"endpoint":"/v1/chat/completions","requests":[[1]]`, param: "requests[0]"},
		{name: "a template without input", body: `"endpoint":"/v1/chat/completions","schedule":"0 6 * * *"`, param: "input_file_id"},
		{name: "a shaped template without input", body: `"endpoint":"/v1/messages","schedule":"0 6 * * *"`, eps: []string{"/v1/messages"}, shaped: true},
		{name: "shaped, no input, no schedule", body: `"endpoint":"/v1/messages"`, eps: []string{"/v1/messages"}, shaped: true, param: "input_file_id"},

		// The first rule broken is the one reported, in CreateShaped's order.
		{name: "endpoint before window", body: `"endpoint":"/x","completion_window":"99h"`, param: "endpoint"},
		{name: "window before metadata", body: base + `,"completion_window":"99h",` + md(17), param: "completion_window"},
		{name: "metadata before priority", body: base + `,"priority":5000,` + md(17), param: "metadata"},
		{name: "priority before schedule", body: base + `,"priority":5000,"schedule":"bad"`, param: "priority"},
		{name: "schedule before output expiry", body: base + `,"schedule":"bad","output_expires_after":{"seconds":1}`, param: "schedule"},
		{name: "output expiry before webhook", body: base + `,"output_expires_after":{"seconds":1},"webhook_url":"http://x"`, param: "output_expires_after.anchor"},
		{name: "webhook before fallback", body: base + `,"webhook_url":"http://x","fallback_model":"gpt-5"`, param: "webhook_url"},
		{name: "fallback before input", body: `"endpoint":"/v1/chat/completions","fallback_model":"gpt-5"`, param: "fallback_model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var req CreateRequest
			if err := json.Unmarshal([]byte("{"+tt.body+"}"), &req); err != nil {
				t.Fatalf("body: %v", err)
			}
			if tt.mod != nil {
				tt.mod(&req)
			}
			eps := tt.eps
			if eps == nil {
				eps = Endpoints
			}
			// As CreateShaped: checkCreate, the in-flight check (not here),
			// checkOptions.
			_, err := checkCreate(req, eps)
			if err == nil {
				_, err = checkOptions(req, tt.shaped, egress.Policy{}.CheckURL, models, auth.Principal{Models: tt.key}.MayUse)
			}
			wantInvalid(t, err, tt.param, tt.msg)
			if tt.code != "" && err.(*errs.Error).Code != tt.code {
				t.Fatalf("code %q, want %q", err.(*errs.Error).Code, tt.code)
			}
		})
	}
}

// What a valid create's checks hand on.
func TestCreateValidationResults(t *testing.T) {
	t.Parallel()
	models := testModels(t)
	for _, tt := range []struct {
		window string
		want   time.Duration
	}{{"", 24 * time.Hour}, {"1h", time.Hour}, {"12h", 12 * time.Hour}, {"24h", 24 * time.Hour}, {"180m", 3 * time.Hour}} {
		got, err := checkCreate(CreateRequest{Endpoint: "/v1/chat/completions", CompletionWindow: tt.window}, Endpoints)
		if err != nil || got != tt.want {
			t.Errorf("window %q: got %v, %v; want %v", tt.window, got, err, tt.want)
		}
	}

	var req CreateRequest
	body := `{"endpoint":"/v1/chat/completions","input_file_id":"f","schedule":"0  6 * * *","output_expires_after":{"anchor":"created_at","seconds":7200}}`
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	o, err := checkOptions(req, false, egress.Policy{}.CheckURL, models, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.spec.Cron != "0 6 * * *" || o.spec.Timezone != "UTC" {
		t.Errorf("schedule: %+v, want its fields normalized, in UTC", o.spec)
	}
	if o.outputExpiresAfter == nil || *o.outputExpiresAfter != 7200 || o.inline != nil {
		t.Errorf("options: %+v", o)
	}
	// The URL is checked with the policy given, not a fixed one.
	var checked string
	req = CreateRequest{Endpoint: "/v1/chat/completions", InputFileID: "f", WebhookURL: "http://localhost:9000/hook"}
	if _, err := checkOptions(req, false, func(u string) error { checked = u; return nil }, models, nil); err != nil || checked != req.WebhookURL {
		t.Errorf("webhook policy: checked %q, %v", checked, err)
	}
}

func TestInlineJSONL(t *testing.T) {
	t.Parallel()
	rows := []json.RawMessage{
		json.RawMessage(`{"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o"}}`),
		json.RawMessage(`{"custom_id":"mine","body":{}}`),
		json.RawMessage(` { "custom_id" : null } `),
		json.RawMessage(`{}`),
	}
	got, err := inlineJSONL(rows, "/v1/embeddings")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"body":{"model":"gpt-4o"},"custom_id":"request-0","method":"POST","url":"/v1/chat/completions"}` + "\n" +
		`{"body":{},"custom_id":"mine","method":"POST","url":"/v1/embeddings"}` + "\n" +
		`{"custom_id":null,"method":"POST","url":"/v1/embeddings"}` + "\n" +
		`{"custom_id":"request-3","method":"POST","url":"/v1/embeddings"}` + "\n"
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	reqs, err := jsonl.ParseRequests([]byte(strings.SplitAfter(string(got), "\n")[0]))
	if err != nil || len(reqs) != 1 || reqs[0].CustomID != "request-0" || string(reqs[0].Body) != `{"model":"gpt-4o"}` {
		t.Fatalf("first row read back: %+v, %v", reqs, err)
	}
	for _, bad := range []string{`"x"`, `1`, `null`, `[]`, `{`, ``} {
		_, err := inlineJSONL([]json.RawMessage{json.RawMessage(`{}`), json.RawMessage(bad)}, "/v1/chat/completions")
		wantInvalid(t, err, "requests[1]", "must be an object")
	}
	if got, err := inlineJSONL(nil, "/v1/chat/completions"); err != nil || len(got) != 0 {
		t.Fatalf("no rows: %q, %v", got, err)
	}
}

func TestCheckInputFile(t *testing.T) {
	t.Parallel()
	fileOf := func(name, purpose, status string) file.File {
		return file.File{ID: "file-1", Filename: name, Purpose: purpose, Status: status}
	}
	ok := files.StatusProcessed
	tests := []struct {
		name     string
		f        file.File
		endpoint string
		model    string
		param    string
		msg      string
	}{
		{"a processed JSONL batch file", fileOf("in.jsonl", files.PurposeBatch, ok), "/v1/chat/completions", "", "", ""},
		{"JSONL for embeddings", fileOf("in.jsonl", files.PurposeBatch, ok), "/v1/embeddings", "", "", ""},
		{"an output file", fileOf("out.jsonl", files.PurposeBatchOutput, ok), "/v1/chat/completions", "", "input_file_id", `purpose "batch_output"`},
		{"an upload not done", fileOf("in.jsonl", files.PurposeBatch, files.StatusUploaded), "/v1/chat/completions", "", "input_file_id", "wait until"},
		{"an upload that failed", fileOf("in.jsonl", files.PurposeBatch, files.StatusError), "/v1/chat/completions", "", "input_file_id", ""},
		{"CSV with its model", fileOf("prompts.csv", files.PurposeBatch, ok), "/v1/chat/completions", "gpt-4o", "", ""},
		{"CSV by its extension in capitals", fileOf("PROMPTS.CSV", files.PurposeBatch, ok), "/v1/chat/completions", "", "model", ""},
		{"CSV without a model", fileOf("prompts.csv", files.PurposeBatch, ok), "/v1/chat/completions", "", "model", "needs model"},
		{"CSV for embeddings", fileOf("prompts.csv", files.PurposeBatch, ok), "/v1/embeddings", "gpt-4o", "endpoint", "chat completions"},
		// Other extensions pass here: planning fails the batch with
		// invalid_file_format.
		{"a .txt file", fileOf("in.txt", files.PurposeBatch, ok), "/v1/chat/completions", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkInputFile(tt.f, CreateRequest{Endpoint: tt.endpoint, Model: tt.model})
			wantInvalid(t, err, tt.param, tt.msg)
		})
	}
}

// Inline simple rows are written as they are and checked for the batch's
// model; a broken one names its row and field, or the batch's own field.
func TestInlineSimpleRows(t *testing.T) {
	t.Parallel()
	models := testModels(t)
	const chat = "/v1/chat/completions"
	tests := []struct {
		name, endpoint, model string
		rows                  []string
		param, msg            string
	}{
		{"messages and prompt", chat, "gpt-4o", []string{`{"messages":[{"role":"user","content":"hi"}]}`, `{"custom_id":"b","prompt":"hi"}`}, "", ""},
		{"beside a full row", chat, "gpt-4o", []string{`{"body":{"model":"gpt-4o-mini"}}`, `{"prompt":"hi"}`}, "", ""},
		{"no model", chat, "", []string{`{"prompt":"hi"}`}, "model", "requests[0]"},
		{"unknown model", chat, "gpt-9", []string{`{"prompt":"hi"}`}, "model", `requests[0]: model "gpt-9"`},
		{"not chat", "/v1/embeddings", "gpt-4o", []string{`{"body":{"model":"gpt-4o"}}`, `{"prompt":"hi"}`}, "endpoint", "requests[1]"},
		{"messages a string", chat, "gpt-4o", []string{`{"prompt":"a"}`, `{"messages":"hi"}`}, "requests[1].messages", "non-empty array"},
		{"prompt a number", chat, "gpt-4o", []string{`{"prompt":1}`}, "requests[0].prompt", "must be a string"},
		{"both", chat, "gpt-4o", []string{`{"prompt":"a","messages":[{}]}`}, "requests[0].prompt", "not both"},
		{"a parameter besides", chat, "gpt-4o", []string{`{"prompt":"a","temperature":0}`}, "requests[0].temperature", "with a body"},
		{"a url besides", chat, "gpt-4o", []string{`{"prompt":"a","url":"/v1/chat/completions"}`}, "requests[0].url", "with a body"},
		{"duplicate id", chat, "gpt-4o", []string{`{"custom_id":"row-2","prompt":"a"}`, `{"prompt":"b"}`}, "requests[1].custom_id", `"row-2" is already used`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var rows []json.RawMessage
			for _, r := range tt.rows {
				rows = append(rows, json.RawMessage(r))
			}
			data, err := inlineJSONL(rows, tt.endpoint)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(data), `"url"`); tt.param == "" && n != strings.Count(strings.Join(tt.rows, ""), `"body"`) {
				t.Errorf("simple rows got a url: %s", data)
			}
			wantInvalid(t, checkInline(data, tt.endpoint, tt.model, models), tt.param, tt.msg)
		})
	}
}
