package jsonl

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func csvOptions() Options {
	return Options{Format: CSV, Endpoint: "/v1/chat/completions", Model: "gpt-4o-mini", KnownModel: knownModel}
}

func TestScanCSV(t *testing.T) {
	t.Parallel()
	type want struct {
		id, prompt string
		line       int
	}
	tests := []struct {
		name  string
		input string
		want  []want
	}{
		{"one column", "hello\nworld\n", []want{{"row-1", "hello", 1}, {"row-2", "world", 2}}},
		{"header prompt", "prompt\nhello\n", []want{{"row-1", "hello", 2}}},
		{"header in any case, trimmed", " Prompt \nhello", []want{{"row-1", "hello", 2}}},
		{"two columns", "custom_id,prompt\na,hello\nb,\"x, y\"\n", []want{{"a", "hello", 2}, {"b", "x, y", 3}}},
		{"two columns, BOM, CRLF, header case", "\xef\xbb\xbf CUSTOM_ID , Prompt\r\na,hi\r\n", []want{{"a", "hi", 2}}},
		{"BOM without header", "\xef\xbb\xbfhello\n", []want{{"row-1", "hello", 1}}},
		{"blank lines skipped", "\nhello\n\r\n\nworld\n\n", []want{{"row-1", "hello", 2}, {"row-2", "world", 5}}},
		{"multi-line field", "prompt\n\"line one\r\nline two\"\nnext\n", []want{{"row-1", "line one\nline two", 2}, {"row-2", "next", 4}}},
		{"quotes and JSON specials", "\"say \"\"hi\"\" <b>&</b>\"\n", []want{{"row-1", `say "hi" <b>&</b>`, 1}}},
		{"prompt header is not data", "PROMPT\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, rows := scanAll(t, tt.input, csvOptions())
			if tt.want == nil {
				if got := errorCodes(res.Errors); got != "0:empty_file" {
					t.Fatalf("got errors %s, want 0:empty_file", got)
				}
				return
			}
			if len(res.Errors) != 0 {
				t.Fatalf("got errors %v", res.Errors)
			}
			if len(rows) != len(tt.want) || res.Rows != len(tt.want) || res.Model != "gpt-4o-mini" {
				t.Fatalf("got %d rows (Rows %d, Model %q), want %d", len(rows), res.Rows, res.Model, len(tt.want))
			}
			for i, w := range tt.want {
				r := rows[i]
				if r.Index != i || r.CustomID != w.id || r.Line != w.line || r.Model != "gpt-4o-mini" {
					t.Errorf("row %d: got %+v, want %+v", i, r, w)
				}
				reqs, err := ParseRequests(r.JSON)
				if err != nil || len(reqs) != 1 {
					t.Fatalf("row %d: JSON %s does not parse: %v", i, r.JSON, err)
				}
				if reqs[0].CustomID != w.id || reqs[0].Method != "POST" || reqs[0].URL != "/v1/chat/completions" {
					t.Errorf("row %d: got request %+v", i, reqs[0])
				}
				var body struct {
					Model    string
					Messages []struct{ Role, Content string }
				}
				if err := json.Unmarshal(reqs[0].Body, &body); err != nil || body.Model != "gpt-4o-mini" ||
					len(body.Messages) != 1 || body.Messages[0].Role != "user" || body.Messages[0].Content != w.prompt {
					t.Errorf("row %d: got body %s (%v), want prompt %q", i, reqs[0].Body, err, w.prompt)
				}
				// Reading the range again gives the same record.
				rec, err := csv.NewReader(strings.NewReader(tt.input[r.Start:r.End])).Read()
				if err != nil || rec[len(rec)-1] != w.prompt {
					t.Errorf("row %d: range %d..%d holds %q (%v)", i, r.Start, r.End, rec, err)
				}
			}
			if last := rows[len(rows)-1]; last.End > int64(len(tt.input)) {
				t.Errorf("last row ends at %d of %d", last.End, len(tt.input))
			}
		})
	}
}

func TestScanCSVJSON(t *testing.T) {
	t.Parallel()
	_, rows := scanAll(t, "custom_id,prompt\nq1,\"<b>Hi</b> \"\"you\"\"\"\n", csvOptions())
	want := `{"custom_id":"q1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"<b>Hi</b> \"you\""}]}}`
	if len(rows) != 1 || string(rows[0].JSON) != want {
		t.Fatalf("got %+v, want %s", rows, want)
	}
}

func TestScanCSVRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		input     string
		opts      func(*Options)
		want      string
		wantInMsg string
	}{
		{"empty prompt", "prompt\nhello\n\"\"\n", nil, "3:empty_prompt", "line 3: the prompt is empty"},
		{"blank prompt", "hello\n   \n", nil, "2:empty_prompt", "empty"},
		{"empty custom_id", "custom_id,prompt\n,hello\n", nil, "2:missing_custom_id", "custom_id is empty"},
		{"duplicate custom_id", "custom_id,prompt\na,x\nb,y\na,z\n", nil, "4:duplicate_custom_id", `"a" is already used on line 2`},
		{"two columns without header", "a,hello\n", nil, "1:invalid_csv", "one column of prompts"},
		{"three columns", "custom_id,prompt\na,b,c\n", nil, "2:invalid_csv", "has 3 columns"},
		{"one column under two-column header", "custom_id,prompt\nhello\n", nil, "2:invalid_csv", "has 1 columns"},
		{"two columns under prompt header", "prompt\na,b\n", nil, "2:invalid_csv", "has 2 columns"},
		{"bare quote, then scanning goes on", "hello\nsay \"hi\"\n\"\"\n", nil, "2:invalid_csv 3:empty_prompt", "line 2: invalid CSV"},
		{"unterminated quote", "hello\n\"open\nmore\n", nil, "2:invalid_csv", "line 2: invalid CSV"},
		{"invalid UTF-8", "hello\nbad \xff\n", nil, "2:invalid_utf8", "UTF-8"},
		{"header only", "custom_id,prompt\n", nil, "0:empty_file", "no requests"},
		{"empty", "", nil, "0:empty_file", "no requests"},
		{"too many rows", "prompt\na\nb\nc\n", func(o *Options) { o.MaxRows = 2 }, "4:too_many_rows", "more than 2"},
		{"record too long", "a\n" + strings.Repeat("b", 20) + "\nc\n\"\"\n", func(o *Options) { o.MaxLineBytes = 10 }, "2:line_too_long 4:empty_prompt", "longer than 10 bytes"},
		{"file too large", "a\nb\nc\n", func(o *Options) { o.MaxBytes = 4 }, "0:file_too_large", "larger than 4 bytes"},
		{"max errors", "\"\"\n\"\"\n\"\"\n\"\"\n", func(o *Options) { o.MaxErrors = 2 }, "1:empty_prompt 2:empty_prompt", "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := csvOptions()
			if tt.opts != nil {
				tt.opts(&o)
			}
			res, _ := scanAll(t, tt.input, o)
			if got := errorCodes(res.Errors); got != tt.want {
				t.Fatalf("got errors %s, want %s (%v)", got, tt.want, res.Errors)
			}
			if !strings.Contains(res.Errors[0].Message, tt.wantInMsg) {
				t.Errorf("got message %q, want it to contain %q", res.Errors[0].Message, tt.wantInMsg)
			}
		})
	}
}

// TestScanCSVHugeRecord checks that a record far over the limit stops the
// scan without encoding/csv holding it.
func TestScanCSVHugeRecord(t *testing.T) { // not parallel: it measures the heap
	const size = 64 << 20
	src := io.MultiReader(strings.NewReader("a\n\""), io.LimitReader(repeatReader('x'), size), strings.NewReader("\"\nb\n"))
	o := csvOptions()
	o.MaxLineBytes = 1 << 20
	var res Result
	var err error
	allocated := allocatedBy(t, func() {
		res, err = Scan(src, o, nil)
	})
	if got := errorCodes(res.Errors); err != nil || got != "2:line_too_long" {
		t.Errorf("got errors %s, %v; want 2:line_too_long", got, err)
	}
	t.Logf("allocated %.1f MiB", float64(allocated)/(1<<20))
	if allocated > 16<<20 {
		t.Errorf("scanning a %d MiB record allocated %d MiB", size>>20, allocated>>20)
	}
}
