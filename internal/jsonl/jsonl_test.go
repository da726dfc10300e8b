package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

const (
	chat     = `"url":"/v1/chat/completions"`
	post     = `"method":"POST"`
	chatBody = `"body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
)

func knownModel(m string) bool { return m == "gpt-4o-mini" || m == "gpt-4o" }

func chatOptions() Options {
	return Options{Format: JSONL, Endpoint: "/v1/chat/completions", KnownModel: knownModel}
}

// obj builds a JSON object line from its members.
func obj(members ...string) string { return "{" + strings.Join(members, ",") + "}" }

// chatRow is a valid chat completion line.
func chatRow(id string) string { return obj(`"custom_id":"`+id+`"`, post, chat, chatBody) }

// scanAll scans input and returns the result and copies of the rows.
func scanAll(t *testing.T, input string, o Options) (Result, []Row) {
	t.Helper()
	var rows []Row
	res, err := Scan(strings.NewReader(input), o, func(r Row) error {
		checkBody(t, r)
		r.JSON, r.Body = bytes.Clone(r.JSON), bytes.Clone(r.Body)
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return res, rows
}

// checkBody checks that a row's Body is the body member of its JSON.
func checkBody(t *testing.T, r Row) {
	t.Helper()
	var members map[string]json.RawMessage
	if err := json.Unmarshal(r.JSON, &members); err != nil {
		t.Fatalf("row on line %d: %v", r.Line, err)
	}
	if want := members["body"]; string(r.Body) != string(want) {
		t.Fatalf("row on line %d: got Body %.200q, want the body of %.200q", r.Line, r.Body, r.JSON)
	}
}

func errorCodes(errs []LineError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "%d:%s ", e.Line, e.Code)
	}
	return strings.TrimSpace(b.String())
}

func TestFormatOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		want    Format
		wantErr string
	}{
		{"batch.jsonl", JSONL, ""},
		{"dir/Batch.JSONL", JSONL, ""},
		{"prompts.csv", CSV, ""},
		{"prompts.CSV", CSV, ""},
		{"batch.json", 0, `".json"`},
		{"batch.txt", 0, `".txt"`},
		{"batch", 0, "no extension"},
		{"batch.jsonl.gz", 0, `".gz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := FormatOf(tt.name)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want error naming %s", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestScanJSONLRules puts one bad line after a good one and checks that
// exactly that problem is reported, on line 2.
func TestScanJSONLRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		line      string
		wantCode  string
		wantParam string
		wantInMsg string
	}{
		{"truncated JSON", `{"custom_id":"b",`, CodeInvalidJSON, "", "invalid JSON"},
		{"garbage", `hello`, CodeInvalidJSON, "", "invalid JSON"},
		{"two objects", chatRow("b") + chatRow("c"), CodeInvalidJSON, "", "invalid JSON"},
		{"array", `[` + chatRow("b") + `]`, CodeInvalidJSON, "", "an array, not a JSON object"},
		{"string", `"x"`, CodeInvalidJSON, "", "a string"},
		{"invalid UTF-8", obj("\"custom_id\":\"b\xff\"", post, chat, chatBody), CodeInvalidUTF8, "", "UTF-8"},
		{"no custom_id", obj(post, chat, chatBody), CodeMissingCustomID, "custom_id", "missing"},
		{"null custom_id", obj(`"custom_id":null`, post, chat, chatBody), CodeMissingCustomID, "custom_id", "missing"},
		{"empty custom_id", obj(`"custom_id":""`, post, chat, chatBody), CodeMissingCustomID, "custom_id", "empty"},
		{"custom_id in other case", obj(`"Custom_ID":"b"`, post, chat, chatBody), CodeMissingCustomID, "custom_id", "missing"},
		{"number custom_id", obj(`"custom_id":7`, post, chat, chatBody), CodeInvalidCustomID, "custom_id", "must be a string, not 7"},
		{"duplicate custom_id", chatRow("a"), CodeDuplicateCustomID, "custom_id", `"a" is already used on line 1`},
		{"duplicate custom_id, escaped", obj(`"custom_id":"\u0061"`, post, chat, chatBody), CodeDuplicateCustomID, "custom_id", "line 1"},
		{"GET", obj(`"custom_id":"b"`, `"method":"GET"`, chat, chatBody), CodeInvalidMethod, "method", `not "GET"`},
		{"post in lower case", obj(`"custom_id":"b"`, `"method":"post"`, chat, chatBody), CodeInvalidMethod, "method", `"post"`},
		{"no method", obj(`"custom_id":"b"`, chat, chatBody), CodeInvalidMethod, "method", "not missing"},
		{"unknown url", obj(`"custom_id":"b"`, post, `"url":"/v1/images"`, chatBody), CodeInvalidURL, "url", `"/v1/images"`},
		{"no url", obj(`"custom_id":"b"`, post, chatBody), CodeInvalidURL, "url", "missing"},
		{"number url", obj(`"custom_id":"b"`, post, `"url":1`, chatBody), CodeInvalidURL, "url", "not 1"},
		{"other endpoint", obj(`"custom_id":"b"`, post, `"url":"/v1/embeddings"`, chatBody), CodeMismatchedURL, "url", `endpoint "/v1/chat/completions"`},
		{"no body", obj(`"custom_id":"b"`, post, chat), CodeInvalidBody, "body", "missing"},
		{"string body", obj(`"custom_id":"b"`, post, chat, `"body":"{}"`), CodeInvalidBody, "body", "object"},
		{"array body", obj(`"custom_id":"b"`, post, chat, `"body":[]`), CodeInvalidBody, "body", "object"},
		{"no model", obj(`"custom_id":"b"`, post, chat, `"body":{"messages":[]}`), CodeMissingModel, "body.model", "missing"},
		{"null model", obj(`"custom_id":"b"`, post, chat, `"body":{"model":null}`), CodeMissingModel, "body.model", "missing"},
		{"empty model", obj(`"custom_id":"b"`, post, chat, `"body":{"model":""}`), CodeMissingModel, "body.model", "empty"},
		{"nested model only", obj(`"custom_id":"b"`, post, chat, `"body":{"x":{"model":"gpt-4o"}}`), CodeMissingModel, "body.model", "missing"},
		{"number model", obj(`"custom_id":"b"`, post, chat, `"body":{"model":4}`), CodeInvalidModel, "body.model", "not 4"},
		{"unknown model", obj(`"custom_id":"b"`, post, chat, `"body":{"model":"gpt-9"}`), CodeModelNotFound, "body.model", `"gpt-9" is not a configured model`},
		{"model in other case", obj(`"custom_id":"b"`, post, chat, `"body":{"Model":"gpt-4o"}`), CodeMissingModel, "body.model", "missing"},
		{"stream", obj(`"custom_id":"b"`, post, chat, `"body":{"model":"gpt-4o","stream":true}`), CodeStreamUnsupported, "body.stream", "stream"},
		{"duplicate model", obj(`"custom_id":"b"`, post, chat, `"body":{"model":"gpt-4o","model":"gpt-4o-mini"}`), CodeInvalidJSON, "", `duplicate member name "model"`},
		{"duplicate model, escaped", obj(`"custom_id":"b"`, post, chat, `"body":{"model":"gpt-4o","\u006dodel":"o1"}`), CodeInvalidJSON, "", `duplicate member name "model"`},
		{"duplicate body", obj(`"custom_id":"b"`, post, chat, chatBody, `"body":{"model":"o1"}`), CodeInvalidJSON, "", `duplicate member name "body"`},
		{"duplicate member deep in the body", obj(`"custom_id":"b"`, post, chat, `"body":{"model":"gpt-4o","messages":[{"role":"user","role":"system"}]}`), CodeInvalidJSON, "", `duplicate member name "role"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, rows := scanAll(t, chatRow("a")+"\n"+tt.line+"\n", chatOptions())
			if len(res.Errors) != 1 {
				t.Fatalf("got errors %q, want one %s", errorCodes(res.Errors), tt.wantCode)
			}
			got := res.Errors[0]
			if got.Code != tt.wantCode || got.Line != 2 || got.Param != tt.wantParam {
				t.Errorf("got %+v, want code %s, line 2, param %q", got, tt.wantCode, tt.wantParam)
			}
			if !strings.HasPrefix(got.Message, "line 2: ") || !strings.Contains(got.Message, tt.wantInMsg) {
				t.Errorf("got message %q, want it to start with %q and contain %q", got.Message, "line 2: ", tt.wantInMsg)
			}
			if len(rows) != 1 || rows[0].CustomID != "a" || res.Rows != 2 {
				t.Errorf("got %d rows (Rows %d), want the valid row a and Rows 2", len(rows), res.Rows)
			}
		})
	}
}

func TestScanJSONLValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		line   string
		wantID string
	}{
		{"plain", chatRow("b"), "b"},
		{"unknown top-level fields ignored", obj(`"custom_id":"b"`, post, chat, chatBody, `"extra":{"x":[1,"}"]}`), "b"},
		{"members in any order", obj(chatBody, chat, post, `"custom_id":"b"`), "b"},
		{"whitespace", " { \"custom_id\" : \"b\" ,\t" + post + " , " + chat + " , " + chatBody + " } ", "b"},
		{"escaped key and id", obj(`"custom\u005fid":"b\"\\\u00e9"`, post, chat, chatBody), "b\"\\é"},
		{"stream false", obj(`"custom_id":"b"`, post, chat, `"body":{"model":"gpt-4o","stream":false}`), "b"},
		{"unicode id", obj(`"custom_id":"行-1"`, post, chat, chatBody), "行-1"},
		{"embedded braces in strings", obj(`"custom_id":"{b}"`, post, chat, `"body":{"x":"}]\"","model":"gpt-4o"}`), "{b}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, rows := scanAll(t, chatRow("a")+"\n"+tt.line+"\n", chatOptions())
			if len(res.Errors) != 0 {
				t.Fatalf("got errors %v, want none", res.Errors)
			}
			if len(rows) != 2 || rows[1].CustomID != tt.wantID || rows[1].Line != 2 || rows[1].Index != 1 {
				t.Fatalf("got rows %+v, want row 1 with custom_id %q on line 2", rows, tt.wantID)
			}
			if string(rows[1].JSON) != tt.line {
				t.Errorf("got JSON %q, want the line itself %q", rows[1].JSON, tt.line)
			}
		})
	}
}

func TestScanLinesAndRanges(t *testing.T) {
	t.Parallel()
	input := "\xef\xbb\xbf" + chatRow("a") + "\r\n" + // BOM, CRLF
		"\r\n" + // blank lines are not rows
		"  \t\n" +
		chatRow("b") + "\n" +
		"\n" +
		chatRow("c") // no final line break
	res, rows := scanAll(t, input, chatOptions())
	if len(res.Errors) != 0 {
		t.Fatalf("got errors %v", res.Errors)
	}
	if res.Rows != 3 || res.Bytes != int64(len(input)) || res.Model != "gpt-4o-mini" {
		t.Errorf("got Rows %d, Bytes %d, Model %q; want 3, %d, gpt-4o-mini", res.Rows, res.Bytes, res.Model, len(input))
	}
	wantLines := []int{1, 4, 6}
	for i, r := range rows {
		if r.Index != i || r.Line != wantLines[i] {
			t.Errorf("row %d: got index %d line %d, want %d %d", i, r.Index, r.Line, i, wantLines[i])
		}
		raw := input[r.Start:r.End]
		if got := strings.TrimRight(raw, "\r\n"); got != string(r.JSON) {
			t.Errorf("row %d: range %d..%d holds %q, want %q", i, r.Start, r.End, raw, r.JSON)
		}
		if bytes.HasPrefix(r.JSON, bom) || bytes.ContainsAny(r.JSON, "\r\n") {
			t.Errorf("row %d: JSON %q keeps a BOM or line break", i, r.JSON)
		}
	}
	if rows[0].Start != 3 || rows[0].End != int64(3+len(chatRow("a"))+2) || rows[2].End != int64(len(input)) {
		t.Errorf("got ranges %d..%d and ..%d", rows[0].Start, rows[0].End, rows[2].End)
	}
	// A chunk is the range from one row's start to a later row's end:
	// every such range must parse back to exactly those rows.
	for i := range rows {
		for j := i; j < len(rows); j++ {
			reqs, err := ParseRequests([]byte(input[rows[i].Start:rows[j].End]))
			if err != nil {
				t.Fatalf("rows %d..%d: %v", i, j, err)
			}
			if len(reqs) != j-i+1 {
				t.Fatalf("rows %d..%d: got %d requests", i, j, len(reqs))
			}
			for k, req := range reqs {
				want := rows[i+k]
				if req.CustomID != want.CustomID || req.Method != "POST" || req.URL != "/v1/chat/completions" {
					t.Errorf("rows %d..%d: request %d is %+v, want %s", i, j, k, req, want.CustomID)
				}
				var body struct{ Model string }
				if err := json.Unmarshal(req.Body, &body); err != nil || body.Model != want.Model {
					t.Errorf("rows %d..%d: request %d body %s", i, j, k, req.Body)
				}
			}
		}
	}
}

func TestScanLineNumbersOfErrors(t *testing.T) {
	t.Parallel()
	input := "\n" + chatRow("a") + "\r\n\r\n" + "oops\r\n" + chatRow("a") + "\n\n\n" + `{"custom_id":"z"}`
	res, rows := scanAll(t, input, chatOptions())
	if got, want := errorCodes(res.Errors), "4:invalid_json 5:duplicate_custom_id 8:invalid_method"; got != want {
		t.Errorf("got errors %s, want %s", got, want)
	}
	if len(rows) != 1 || rows[0].Line != 2 || res.Rows != 4 {
		t.Errorf("got rows %+v, Rows %d", rows, res.Rows)
	}
}

func TestScanEmptyFile(t *testing.T) {
	t.Parallel()
	for _, input := range []string{"", "\n", " \n\t\r\n\n", "\xef\xbb\xbf", "\xef\xbb\xbf\r\n"} {
		res, _ := scanAll(t, input, chatOptions())
		if errorCodes(res.Errors) != "0:empty_file" || res.Rows != 0 {
			t.Errorf("%q: got errors %s, Rows %d; want 0:empty_file", input, errorCodes(res.Errors), res.Rows)
		}
	}
}

func TestScanBOMOnlyAtStart(t *testing.T) {
	t.Parallel()
	res, _ := scanAll(t, chatRow("a")+"\n\xef\xbb\xbf"+chatRow("b")+"\n", chatOptions())
	if got := errorCodes(res.Errors); got != "2:invalid_json" {
		t.Errorf("got errors %s, want a BOM inside the file to be invalid JSON", got)
	}
}

func TestScanModel(t *testing.T) {
	t.Parallel()
	other := obj(`"custom_id":"c"`, post, chat, `"body":{"model":"gpt-4o"}`)
	tests := []struct {
		name, input, want string
	}{
		{"one model", chatRow("a") + "\n" + chatRow("b"), "gpt-4o-mini"},
		{"two models", chatRow("a") + "\n" + other + "\n" + chatRow("b"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, rows := scanAll(t, tt.input, chatOptions())
			if res.Model != tt.want || len(res.Errors) != 0 {
				t.Errorf("got Model %q, errors %v; want %q", res.Model, res.Errors, tt.want)
			}
			if rows[0].Model != "gpt-4o-mini" {
				t.Errorf("got row model %q", rows[0].Model)
			}
		})
	}
}

func TestScanOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts func(*Options)
		want string
	}{
		{"unknown endpoint", func(o *Options) { o.Endpoint = "/v1/images" }, "0:unsupported_endpoint"},
		{"no endpoint", func(o *Options) { o.Endpoint = "" }, "0:unsupported_endpoint"},
		{"CSV for embeddings", func(o *Options) { o.Format, o.Endpoint, o.Model = CSV, "/v1/embeddings", "gpt-4o" }, "0:unsupported_endpoint"},
		{"CSV without model", func(o *Options) { o.Format = CSV }, "0:missing_model"},
		{"CSV with unknown model", func(o *Options) { o.Format, o.Model = CSV, "gpt-9" }, "0:model_not_found"},
		{"nil KnownModel knows nothing", func(o *Options) { o.KnownModel = nil }, "1:model_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := chatOptions()
			tt.opts(&o)
			res, rows := scanAll(t, chatRow("a")+"\n", o)
			if got := errorCodes(res.Errors); got != tt.want || len(rows) != 0 {
				t.Errorf("got errors %s and %d rows, want %s", got, len(rows), tt.want)
			}
		})
	}
}

func TestScanOtherEndpoints(t *testing.T) {
	t.Parallel()
	for _, ep := range []string{"/v1/embeddings", "/v1/responses", "/v1/completions", "/v1/messages"} {
		o := chatOptions()
		o.Endpoint = ep
		line := obj(`"custom_id":"a"`, post, `"url":"`+ep+`"`, `"body":{"model":"gpt-4o","input":"x"}`)
		res, rows := scanAll(t, line+"\n"+chatRow("b")+"\n", o)
		if got := errorCodes(res.Errors); got != "2:mismatched_url" || len(rows) != 1 {
			t.Errorf("%s: got errors %s and %d rows, want row 1 valid and 2:mismatched_url", ep, got, len(rows))
		}
	}
}

func TestScanMaxErrors(t *testing.T) {
	t.Parallel()
	bad := strings.Repeat("nope\n", 150) + chatRow("a") + "\n"
	for _, tt := range []struct{ max, want int }{{0, DefaultMaxErrors}, {3, 3}} {
		o := chatOptions()
		o.MaxErrors = tt.max
		res, rows := scanAll(t, bad, o)
		if len(res.Errors) != tt.want {
			t.Errorf("MaxErrors %d: got %d errors, want %d", tt.max, len(res.Errors), tt.want)
		}
		if len(rows) != 0 || res.Rows != tt.want {
			t.Errorf("MaxErrors %d: got %d rows, Rows %d; want scanning to stop at error %d", tt.max, len(rows), res.Rows, tt.want)
		}
	}
}

func TestScanMaxBytes(t *testing.T) {
	t.Parallel()
	input := chatRow("a") + "\n" + chatRow("b") + "\n"
	tests := []struct {
		max  int64
		want string
	}{
		{int64(len(input)), ""},
		{int64(len(input)) - 1, "0:file_too_large"},
		{10, "0:file_too_large"},
		{1, "0:file_too_large"},
	}
	for _, tt := range tests {
		o := chatOptions()
		o.MaxBytes = tt.max
		res, _ := scanAll(t, input, o)
		if got := errorCodes(res.Errors); got != tt.want {
			t.Errorf("MaxBytes %d: got errors %s, want %q", tt.max, got, tt.want)
		}
		if res.Bytes > tt.max+1 {
			t.Errorf("MaxBytes %d: read %d bytes", tt.max, res.Bytes)
		}
	}
}

func TestScanMaxRows(t *testing.T) {
	t.Parallel()
	build := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(chatRow(fmt.Sprint("r", i)))
			b.WriteString("\n")
		}
		return b.String()
	}
	t.Run("50,000 rows", func(t *testing.T) {
		t.Parallel()
		res, rows := scanAll(t, build(50_000), chatOptions())
		if len(res.Errors) != 0 || len(rows) != 50_000 || res.Rows != 50_000 || rows[49_999].Index != 49_999 {
			t.Fatalf("got %d rows, Rows %d, errors %v", len(rows), res.Rows, res.Errors)
		}
	})
	t.Run("50,001 rows", func(t *testing.T) {
		t.Parallel()
		res, rows := scanAll(t, build(50_001), chatOptions())
		if got := errorCodes(res.Errors); got != "50001:too_many_rows" {
			t.Fatalf("got errors %s, want 50001:too_many_rows", got)
		}
		if !strings.Contains(res.Errors[0].Message, "more than 50000 requests") || len(rows) != 50_000 {
			t.Fatalf("got message %q and %d rows", res.Errors[0].Message, len(rows))
		}
	})
	t.Run("blank lines do not count", func(t *testing.T) {
		t.Parallel()
		o := chatOptions()
		o.MaxRows = 2
		res, _ := scanAll(t, "\n"+chatRow("a")+"\n\n"+chatRow("b")+"\n\n", o)
		if len(res.Errors) != 0 {
			t.Fatalf("got errors %v", res.Errors)
		}
	})
}

// bigRow is a valid row of exactly n bytes.
func bigRow(id string, n int) string {
	head := obj(`"custom_id":"`+id+`"`, post, chat, `"body":{"model":"gpt-4o","pad":"`)
	const tail = `"}}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

func TestScanLongLines(t *testing.T) {
	t.Parallel()
	const max = DefaultMaxLineBytes
	tests := []struct {
		name  string
		first string
		want  string
	}{
		{"exactly the limit", bigRow("big", max) + "\n", "3:model_not_found"},
		{"exactly the limit, CRLF", bigRow("big", max) + "\r\n", "3:model_not_found"},
		{"one byte over", bigRow("big", max+1) + "\n", "1:line_too_long 3:model_not_found"},
		{"far over", bigRow("big", 3*max) + "\n", "1:line_too_long 3:model_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			input := tt.first + chatRow("a") + "\n" + obj(`"custom_id":"b"`, post, chat, `"body":{"model":"gpt-9"}`) + "\n"
			res, rows := scanAll(t, input, chatOptions()) // default limits
			if got := errorCodes(res.Errors); got != tt.want {
				t.Fatalf("got errors %s, want %s", got, tt.want)
			}
			last := rows[len(rows)-1]
			if last.CustomID != "a" || last.Line != 2 || last.Start != int64(len(tt.first)) {
				t.Fatalf("got last row %s on line %d at %d, want a on line 2 at %d", last.CustomID, last.Line, last.Start, len(tt.first))
			}
			if strings.HasPrefix(tt.want, "1:") && !strings.Contains(res.Errors[0].Message, "longer than 10485760 bytes") {
				t.Errorf("got message %q", res.Errors[0].Message)
			}
		})
	}
}

// TestScanLongLineMemory reads a 64 MiB line with a 1 MiB limit through a
// reader that allocates nothing, and checks that the scan allocated a few
// MiB, not the line.
func TestScanLongLineMemory(t *testing.T) { // not parallel: it measures the heap
	const size = 64 << 20
	src := io.MultiReader(
		strings.NewReader(`{"custom_id":"big","pad":"`),
		io.LimitReader(repeatReader('x'), size),
		strings.NewReader("\"}\n"+chatRow("a")+"\nbad\n"),
	)
	o := chatOptions()
	o.MaxLineBytes = 1 << 20
	var ids []string
	allocated := allocatedBy(t, func() {
		res, err := Scan(src, o, func(r Row) error { ids = append(ids, r.CustomID); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if got := errorCodes(res.Errors); got != "1:line_too_long 3:invalid_json" {
			t.Errorf("got errors %s", got)
		}
	})
	if len(ids) != 1 || ids[0] != "a" {
		t.Errorf("got rows %v, want a", ids)
	}
	t.Logf("allocated %.1f MiB", float64(allocated)/(1<<20))
	if allocated > 8<<20 {
		t.Errorf("scanning a %d MiB line allocated %d MiB", size>>20, allocated>>20)
	}
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

func TestScanReadAndCallbackErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	_, err := Scan(io.MultiReader(strings.NewReader(chatRow("a")+"\n"+chatRow("b")), iotest.ErrReader(boom)), chatOptions(), nil)
	if !errors.Is(err, boom) {
		t.Errorf("read error: got %v, want %v", err, boom)
	}
	calls := 0
	_, err = Scan(strings.NewReader(chatRow("a")+"\n"+chatRow("b")+"\n"), chatOptions(), func(Row) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("callback error: got %v after %d calls, want %v after 1", err, calls, boom)
	}
	// A reader that hands out one byte at a time must not change anything.
	input := "\xef\xbb\xbf" + chatRow("a") + "\r\n\n" + chatRow("b")
	var got []Row
	res, err := Scan(iotest.OneByteReader(strings.NewReader(input)), chatOptions(), func(r Row) error { got = append(got, r); return nil })
	if err != nil || len(res.Errors) != 0 || len(got) != 2 || got[1].Start != int64(len(input)-len(chatRow("b"))) {
		t.Errorf("one byte reader: got %v, %v, %+v", err, res.Errors, got)
	}
}

func TestLineErrorJSON(t *testing.T) {
	t.Parallel()
	e := LineError{Code: CodeModelNotFound, Message: `line 3: model "x" is not a configured model`, Param: "body.model", Line: 3}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":"model_not_found","message":"line 3: model \"x\" is not a configured model","param":"body.model","line":3}`
	if string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	if got := e.Error(); got != `model_not_found: line 3: model "x" is not a configured model` {
		t.Errorf("got %q", got)
	}
	// An error about the whole file has neither a field nor a line.
	b, _ = json.Marshal([]LineError{{Code: CodeEmptyFile, Message: "empty"}})
	if want := `[{"code":"empty_file","message":"empty","param":null,"line":null}]`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

func TestMessagesStayShort(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 5000)
	for _, line := range []string{
		obj(`"custom_id":"a"`, `"method":"`+long+`"`, chat, chatBody),
		obj(`"custom_id":"a"`, post, chat, `"body":{"model":"`+long+`"}`),
		obj(`"custom_id":"a"`, post, `"url":"`+long+`"`, chatBody),
		chatRow(long) + "\n" + chatRow(long),
	} {
		res, _ := scanAll(t, line, chatOptions())
		if len(res.Errors) != 1 || len(res.Errors[0].Message) > 300 || !json.Valid(mustMarshal(t, res.Errors[0])) {
			t.Errorf("got %d errors, the first %d bytes long", len(res.Errors), len(res.Errors[0].Message))
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// allocatedBy returns the bytes f allocated on the heap.
func allocatedBy(t *testing.T, f func()) uint64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A row naming a configured model its key may not use fails with
// model_not_allowed on its line; a CSV batch's model, before any line.
func TestScanAllowedModels(t *testing.T) {
	t.Parallel()
	only4o := func(m string) bool { return m == "gpt-4o" }
	o := chatOptions()
	o.AllowedModel = only4o
	other := obj(`"custom_id":"b"`, post, chat, `"body":{"model":"gpt-4o","messages":[]}`)
	res, rows := scanAll(t, other+"\n"+chatRow("a")+"\n"+chatRow("c")+"\n", o)
	if got := errorCodes(res.Errors); got != "2:model_not_allowed 3:model_not_allowed" || len(rows) != 1 {
		t.Fatalf("got errors %s and %d rows, want lines 2 and 3 not allowed", got, len(rows))
	}
	if e := res.Errors[0]; e.Param != "body.model" || !strings.Contains(e.Message, "gpt-4o-mini") {
		t.Fatalf("error %+v", e)
	}
	csv := Options{Format: CSV, Endpoint: "/v1/chat/completions", Model: "gpt-4o-mini", KnownModel: knownModel, AllowedModel: only4o}
	if res, _ := scanAll(t, "hello\n", csv); errorCodes(res.Errors) != "0:model_not_allowed" {
		t.Fatalf("CSV: got %s", errorCodes(res.Errors))
	}
}

// A row without body.model gets the endpoint's default model when one is
// configured (a /v1/moderations row, docs/api.md "Batches"), checked as a
// model it named would be; without one it is missing_model, saying how to
// configure it.
func TestScanDefaultModel(t *testing.T) {
	t.Parallel()
	const mod = `"url":"/v1/moderations"`
	noModel := obj(`"custom_id":"b"`, post, mod, `"body":{"input":"hi"}`)
	nullModel := obj(`"custom_id":"b"`, post, mod, `"body":{"model":null,"input":"hi"}`)
	tests := []struct {
		name         string
		line         string
		defaultModel string
		allowed      func(string) bool
		wantErr      string // code:param:text in the message; "" for a valid row of defaultModel
	}{
		{"absent", noModel, "omni", nil, ""},
		{"null", nullModel, "omni", nil, ""},
		{"empty stays empty", obj(`"custom_id":"b"`, post, mod, `"body":{"model":"","input":"hi"}`), "omni", nil, "missing_model:body.model:empty"},
		{"default not allowed", noModel, "omni", func(m string) bool { return m != "omni" }, `model_not_allowed:body.model:"omni"`},
		{"no default", noModel, "", nil, "missing_model:body.model:moderation_model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := Options{Format: JSONL, Endpoint: "/v1/moderations", DefaultModel: tt.defaultModel,
				KnownModel: func(m string) bool { return m == "omni" }, AllowedModel: tt.allowed}
			res, rows := scanAll(t, tt.line+"\n", o)
			if tt.wantErr == "" {
				if len(res.Errors) != 0 || len(rows) != 1 || rows[0].Model != "omni" || res.Model != "omni" {
					t.Fatalf("got errors %v, rows %+v, Model %q; want one row of omni", res.Errors, rows, res.Model)
				}
				return
			}
			want := strings.SplitN(tt.wantErr, ":", 3)
			if len(res.Errors) != 1 || res.Errors[0].Code != want[0] || res.Errors[0].Param != want[1] || !strings.Contains(res.Errors[0].Message, want[2]) {
				t.Fatalf("got errors %+v, want %s", res.Errors, tt.wantErr)
			}
		})
	}
}
