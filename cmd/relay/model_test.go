package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/jsonl"
)

func TestSetModelJSONL(t *testing.T) {
	t.Parallel()
	const req = `{"custom_id":"a","method":"POST","url":"/v1/chat/completions",`
	tests := []struct {
		name, in, want string
	}{
		{"overrides the row's model",
			req + `"body":{"model":"old","messages":[{"role":"user","content":"hi"}]}}`,
			req + `"body":{"model":"M","messages":[{"role":"user","content":"hi"}]}}`},
		{"adds a missing model",
			req + `"body":{"messages":[]}}`,
			req + `"body":{"model":"M","messages":[]}}`},
		{"adds it to an empty body",
			req + `"body":{}}`,
			req + `"body":{"model":"M"}}`},
		{"replaces null and non-strings",
			req + `"body":{"model":null,"n":1}}`,
			req + `"body":{"model":"M","n":1}}`},
		{"a number model",
			req + `"body":{"n":1,"model":12}}`,
			req + `"body":{"n":1,"model":"M"}}`},
		{"body first, spaces kept",
			`{ "body" : { "model" : "old" , "max_tokens" : 5 } , "custom_id" : "a" }`,
			`{ "body" : { "model" : "M" , "max_tokens" : 5 } , "custom_id" : "a" }`},
		{"nested model keys and strings are not body.model",
			req + `"body":{"messages":[{"model":"x","content":"\"model\":\"y\""}],"metadata":{"model":"z"},"model":"old"}}`,
			req + `"body":{"messages":[{"model":"x","content":"\"model\":\"y\""}],"metadata":{"model":"z"},"model":"M"}}`},
		{"a top-level model is not body.model",
			`{"model":"top","custom_id":"a","body":{"model":"old"}}`,
			`{"model":"top","custom_id":"a","body":{"model":"M"}}`},
		{"escaped keys match as the API reads them",
			`{"custom_id":"a","bo\u0064y":{"mod\u0065l":"old"}}`,
			`{"custom_id":"a","bo\u0064y":{"mod\u0065l":"M"}}`},
		{"keys match exactly",
			`{"custom_id":"a","body":{"Model":"old"}}`,
			`{"custom_id":"a","body":{"model":"M","Model":"old"}}`},
		{"every duplicate model",
			`{"custom_id":"a","body":{"model":"a","x":1,"model":"b"}}`,
			`{"custom_id":"a","body":{"model":"M","x":1,"model":"M"}}`},
		{"every duplicate body",
			`{"body":{"model":"a"},"custom_id":"a","body":{"x":1}}`,
			`{"body":{"model":"M"},"custom_id":"a","body":{"model":"M","x":1}}`},
		{"other endpoints",
			`{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"input":"x","model":"text-embedding-3-small"}}`,
			`{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"input":"x","model":"M"}}`},
		// Lines that cannot carry a model stay for the API to report.
		{"no body", `{"custom_id":"a","n":1}`, `{"custom_id":"a","n":1}`},
		{"body not an object", `{"custom_id":"a","body":"x"}`, `{"custom_id":"a","body":"x"}`},
		{"body an array", `{"custom_id":"a","body":[{"model":"x"}]}`, `{"custom_id":"a","body":[{"model":"x"}]}`},
		{"not JSON", `{"custom_id":"a","body":{"model":"x"}`, `{"custom_id":"a","body":{"model":"x"}`},
		{"not an object", `["body",{"model":"x"}]`, `["body",{"model":"x"}]`},
		{"blank", "  \t", "  \t"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := setModelJSONL(&out, strings.NewReader(tt.in+"\n"), "M"); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tt.want+"\n" {
				t.Errorf("got  %s\nwant %s", got, tt.want+"\n")
			}
		})
	}
	t.Run("the model is JSON-escaped", func(t *testing.T) {
		var out bytes.Buffer
		if err := setModelJSONL(&out, strings.NewReader(`{"body":{"model":"x"}}`), `a"b\c`); err != nil {
			t.Fatal(err)
		}
		if got, want := out.String(), `{"body":{"model":"a\"b\\c"}}`; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	})
}

// TestPrepareInputSetsModel checks the bytes batch submit --model uploads
// for a JSONL file: every row with body.model set, nothing else changed,
// and the API's own validation reading the model on every row.
func TestPrepareInputSetsModel(t *testing.T) {
	t.Parallel()
	row := func(id, body string) string {
		return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":` + body + `}`
	}
	in := "\xef\xbb\xbf" + row("a", `{"model":"gpt-4o","messages":[{"role":"user","content":"a"}]}`) + "\r\n" +
		"\n" +
		row("b", `{"messages":[{"role":"user","content":"b"}]}`) + "\n" +
		"   \n" +
		row("c", `{"model":"other","max_tokens":3,"messages":[{"role":"user","content":"c"}]}`) // no final line break
	want := "\xef\xbb\xbf" + row("a", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a"}]}`) + "\r\n" +
		"\n" +
		row("b", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"b"}]}`) + "\n" +
		"   \n" +
		row("c", `{"model":"gpt-4o-mini","max_tokens":3,"messages":[{"role":"user","content":"c"}]}`)
	path := filepath.Join(t.TempDir(), "rows.JSONL")
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}

	up, cleanup, err := prepareInput(path, "gpt-4o-mini")
	if err != nil {
		t.Fatal(err)
	}
	if up == path {
		t.Fatal("prepareInput uploads the file itself: --model is ignored")
	}
	if filepath.Base(up) != "rows.JSONL" {
		t.Errorf("uploads %s, want the name rows.JSONL (the API reads the format from it)", filepath.Base(up))
	}
	got, err := os.ReadFile(up)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("upload is\n%q\nwant\n%q", got, want)
	}
	res, err := jsonl.Scan(bytes.NewReader(got), jsonl.Options{
		Format: jsonl.JSONL, Endpoint: "/v1/chat/completions",
		KnownModel: func(m string) bool { return m == "gpt-4o-mini" },
	}, nil)
	if err != nil || len(res.Errors) != 0 || res.Rows != 3 || res.Model != "gpt-4o-mini" {
		t.Errorf("validation: %d rows, model %q, errors %v, err %v; want 3 valid rows of gpt-4o-mini", res.Rows, res.Model, res.Errors, err)
	}
	cleanup()
	if _, err := os.Stat(filepath.Dir(up)); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s", filepath.Dir(up))
	}
	if b, _ := os.ReadFile(path); string(b) != in {
		t.Error("prepareInput changed the input file")
	}

	// Without --model, and for CSV (the API takes the batch's model), the
	// file goes as it is.
	csv := filepath.Join(t.TempDir(), "rows.csv")
	os.WriteFile(csv, []byte("prompt\nhi\n"), 0o600)
	for _, c := range []struct{ path, model string }{{path, ""}, {csv, "gpt-4o-mini"}} {
		up, cleanup, err := prepareInput(c.path, c.model)
		if err != nil || up != c.path {
			t.Errorf("prepareInput(%s, %q) = %s, %v; want the file itself", c.path, c.model, up, err)
		}
		if cleanup != nil {
			cleanup()
		}
	}
}

// TestBatchSubmitModelJSONL: the file batch submit --model uploads has the
// model on every row, under the input's name.
func TestBatchSubmitModelJSONL(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	in := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o","messages":[]}}` + "\n" +
		`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}` + "\n"
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, f.env(), "batch", "submit", path, "--model", "gpt-4o-mini"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.creates) != 1 {
		t.Fatalf("%d batch creates, want 1", len(f.creates))
	}
	file := f.files[f.creates[0]["input_file_id"].(string)]
	if file == nil {
		t.Fatal("the batch's input file was not uploaded")
	}
	want := strings.ReplaceAll(in, `"body":{"model":"gpt-4o",`, `"body":{`)
	want = strings.ReplaceAll(want, `"body":{`, `"body":{"model":"gpt-4o-mini",`)
	if string(file.data) != want || file.name != "rows.jsonl" {
		t.Errorf("uploaded %s:\n%s\nwant rows.jsonl:\n%s", file.name, file.data, want)
	}
}

// FuzzWithModel: whatever the line, a rewritten one is valid JSON, and a
// request whose body is an object has, as the API's own validation
// (internal/jsonl) reads it, the model set.
func FuzzWithModel(f *testing.F) {
	for _, s := range []string{
		`{"model":"x","messages":[]}`, `{}`, `{"a":[1,{"model":2}],"model":null}`,
		`{ "mod\u0065l" : true , "model":"y"}`, `"x"`, `[]`, `nope`, `{"Model":"x"}`,
	} {
		f.Add([]byte(s))
	}
	opts := jsonl.Options{Format: jsonl.JSONL, Endpoint: "/v1/chat/completions", KnownModel: func(m string) bool { return m == "M" }}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, line := range [][]byte{
			body, // any line
			append(append([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":`), body...), '}'),
		} {
			out, ok := withModel(line, []byte(`"M"`))
			if !ok {
				continue
			}
			if !json.Valid(out) {
				t.Fatalf("%s became invalid JSON %s", line, out)
			}
			res, err := jsonl.Scan(bytes.NewReader(out), opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Errors {
				if e.Param == "body.model" {
					t.Fatalf("%s became %s: %v", line, out, e)
				}
			}
		}
	})
}
