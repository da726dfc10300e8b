package jsonl

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/relaybatch/relay/internal/ijson"
)

// fuzzOptions has small limits so that fuzzing reaches them.
func fuzzOptions(csv bool) Options {
	o := Options{
		Format:       JSONL,
		Endpoint:     "/v1/chat/completions",
		KnownModel:   func(m string) bool { return m == "m" || m == "gpt-4o-mini" },
		MaxRows:      20,
		MaxLineBytes: 300,
		MaxBytes:     4000,
		MaxErrors:    5,
	}
	if csv {
		o.Format, o.Model = CSV, "m"
	}
	return o
}

func FuzzScan(f *testing.F) {
	for _, s := range []string{
		chatRow("a") + "\n" + chatRow("b") + "\n",
		"\xef\xbb\xbf" + chatRow("a") + "\r\n\r\n" + chatRow("b"),
		chatRow("a") + "\n" + chatRow("a") + "\n" + `{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"model":"x","stream":true}}`,
		`{"custom\u005fid":"\u0061","method":"POST","url":"/v1/chat/completions","body":{"model":"m","model":"gpt-4o-mini"}}`,
		`[]` + "\n" + `{"custom_id":1}` + "\n" + `null` + "\n" + `{"a":{"b":[1,2,{"c":"}"}]}}`,
		"prompt\nhello\n\"multi\nline\"\n",
		"custom_id,prompt\na,hi\na,again\n,x\nb,\"\"\n",
		`{"prompt":"hi"}` + "\n" + `{"custom_id":"x","messages":[{"role":"user","content":"a"},1]}` + "\n" + `{"prompt":"a","url":"/v1/chat/completions"}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, csv bool) {
		o := fuzzOptions(csv)
		var rows []Row
		res, err := Scan(bytes.NewReader(data), o, func(r Row) error {
			checkBody(t, r)
			r.JSON, r.Body = bytes.Clone(r.JSON), nil
			rows = append(rows, r)
			return nil
		})
		if err != nil {
			t.Fatalf("Scan of an in-memory input failed: %v", err)
		}
		if len(res.Errors) > o.MaxErrors {
			t.Fatalf("got %d errors, more than MaxErrors %d", len(res.Errors), o.MaxErrors)
		}
		if res.Bytes > int64(len(data)) || res.Rows < len(rows) || res.Rows > o.MaxRows+1 {
			t.Fatalf("got Bytes %d of %d, Rows %d for %d rows", res.Bytes, len(data), res.Rows, len(rows))
		}
		if len(rows) == 0 && len(res.Errors) == 0 {
			t.Fatal("no rows and no errors: an empty file must be an error")
		}
		ids := map[string]bool{}
		var prev Row
		for i, r := range rows {
			if len(res.Errors) == 0 && r.Index != i {
				t.Fatalf("row %d has index %d: indexes of a valid file must be consecutive from 0", i, r.Index)
			}
			if i > 0 && (r.Index <= prev.Index || r.Line <= prev.Line || r.Start < prev.End) {
				t.Fatalf("row %d (%+v) does not come after row %d (%+v)", i, r, i-1, prev)
			}
			if r.Line < 1 || r.Start < 0 || r.Start >= r.End || r.End > int64(len(data)) {
				t.Fatalf("row %d: line %d, range %d..%d out of an input of %d bytes", i, r.Line, r.Start, r.End, len(data))
			}
			if ids[r.CustomID] || r.CustomID == "" {
				t.Fatalf("row %d: custom_id %q empty or repeated", i, r.CustomID)
			}
			ids[r.CustomID] = true
			reqs, err := ParseRequests(r.JSON)
			if err != nil || len(reqs) != 1 || reqs[0].CustomID != r.CustomID || reqs[0].URL != o.Endpoint || reqs[0].Method != "POST" {
				t.Fatalf("row %d: JSON %q parses to %+v, %v", i, r.JSON, reqs, err)
			}
			if ref := refCheck(r.JSON, o); ref != "" {
				t.Fatalf("row %d: %q was accepted, the reference says %s", i, r.JSON, ref)
			}
			if !csv && strings.TrimRight(string(data[r.Start:r.End]), "\r\n") != string(r.JSON) {
				t.Fatalf("row %d: range %d..%d holds %q, not the row %q", i, r.Start, r.End, data[r.Start:r.End], r.JSON)
			}
			prev = r
		}
		if !csv {
			checkJSONLAgainstReference(t, data, o, res, rows)
		}
	})
}

// checkJSONLAgainstReference splits data into lines independently and
// checks every line-level verdict of Scan against refCheck.
func checkJSONLAgainstReference(t *testing.T, data []byte, o Options, res Result, rows []Row) {
	t.Helper()
	byLine := map[int]string{}
	for _, e := range res.Errors {
		byLine[e.Line] = e.Code
	}
	for _, r := range rows {
		byLine[r.Line] = "ok"
	}
	complete := len(res.Errors) < o.MaxErrors && int64(len(data)) <= o.MaxBytes && byLine[0] == "" && res.Rows <= o.MaxRows
	lines := bytes.SplitAfter(bytes.TrimPrefix(data, bom), []byte("\n"))
	for i, l := range lines {
		n := i + 1
		l = bytes.TrimSuffix(bytes.TrimSuffix(l, []byte("\n")), []byte("\r"))
		got, seen := byLine[n]
		want := ""
		switch {
		case len(l) > o.MaxLineBytes:
			want = CodeLineTooLong
		case isBlank(l):
			if seen {
				t.Fatalf("line %d is blank but got %s", n, got)
			}
			continue
		default:
			want = refCheck(l, o)
		}
		switch {
		case !seen && complete:
			t.Fatalf("line %d (%q) got no verdict, want %q", n, l, want)
		case !seen || got == CodeDuplicateCustomID || got == CodeTooManyRows:
		case want == "" && got != "ok":
			t.Fatalf("line %d (%q): got %s, the reference finds it valid", n, l, got)
		case want != "" && got != want:
			t.Fatalf("line %d (%q): got %s, the reference says %s", n, l, got, want)
		}
	}
}

// refCheck is an independent, slow statement of the JSONL rules (all but
// uniqueness) on top of encoding/json maps, whose keys match exactly, as
// the scanner's; a line with a duplicate member name is invalid JSON
// (ijson, fuzzed against encoding/json on its own).
func refCheck(line []byte, o Options) string {
	if !utf8.Valid(line) {
		return CodeInvalidUTF8
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil || m == nil || ijson.Check(line) != nil {
		return CodeInvalidJSON
	}
	if _, ok := m["body"]; !ok && (m["messages"] != nil || m["prompt"] != nil) {
		return refSimple(m, o)
	}
	var id string
	switch raw, ok := m["custom_id"]; {
	case !ok || string(raw) == "null":
		return CodeMissingCustomID
	case json.Unmarshal(raw, &id) != nil:
		return CodeInvalidCustomID
	case id == "":
		return CodeMissingCustomID
	}
	var method, url string
	if json.Unmarshal(m["method"], &method) != nil || method != "POST" {
		return CodeInvalidMethod
	}
	if json.Unmarshal(m["url"], &url) != nil || !supportedEndpoint([]byte(url)) {
		return CodeInvalidURL
	}
	if url != o.Endpoint {
		return CodeMismatchedURL
	}
	var body map[string]json.RawMessage
	if raw := m["body"]; len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &body) != nil {
		return CodeInvalidBody
	}
	var model string
	switch raw, ok := body["model"]; {
	case !ok || string(raw) == "null":
		return CodeMissingModel
	case json.Unmarshal(raw, &model) != nil:
		return CodeInvalidModel
	case model == "":
		return CodeMissingModel
	case !o.KnownModel(model):
		return CodeModelNotFound
	}
	if string(body["stream"]) == "true" {
		return CodeStreamUnsupported
	}
	return ""
}

// refSimple states the rules of a simple row (simple.go) on a map.
func refSimple(m map[string]json.RawMessage, o Options) string {
	for k := range m {
		if k != "custom_id" && k != "messages" && k != "prompt" {
			return CodeInvalidRow
		}
	}
	if m["messages"] != nil && m["prompt"] != nil {
		return CodeInvalidRow
	}
	if raw := m["prompt"]; raw != nil {
		var p string
		if raw[0] != '"' || json.Unmarshal(raw, &p) != nil {
			return CodeInvalidPrompt
		}
		if strings.TrimSpace(p) == "" {
			return CodeEmptyPrompt
		}
	} else {
		var msgs []map[string]json.RawMessage
		if json.Unmarshal(m["messages"], &msgs) != nil || len(msgs) == 0 {
			return CodeInvalidMessages
		}
		for _, msg := range msgs {
			if msg == nil {
				return CodeInvalidMessages
			}
		}
	}
	switch {
	case o.Endpoint != chatCompletions:
		return CodeUnsupportedEndpoint
	case o.Model == "":
		return CodeMissingModel
	case !o.KnownModel(o.Model):
		return CodeModelNotFound
	}
	var id string
	switch raw, ok := m["custom_id"]; {
	case !ok || string(raw) == "null":
	case raw[0] != '"' || json.Unmarshal(raw, &id) != nil:
		return CodeInvalidCustomID
	case id == "":
		return CodeMissingCustomID
	}
	return ""
}

func FuzzParseRequests(f *testing.F) {
	for _, s := range []string{
		chatRow("a") + "\n" + chatRow("b"),
		"\xef\xbb\xbf" + chatRow("a") + "\r\n\n  \r\n" + chatRow("b") + "\n",
		`{"custom_id":"x","method":"GET","url":"/y","body":{},"body":{"a":[]}}`,
		`{"Custom_ID":"x","custom_id":"y","method":"POST","url":"u","body":{}}`,
		`{"custom_id":"\ud800\"","method":"POST","url":"u","body":{ }}` + "\n" + `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reqs, err := ParseRequests(data)
		want, wantErr := refParse(data)
		if (err != nil) != (wantErr != "") {
			t.Fatalf("got %v, the reference says %q", err, wantErr)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), wantErr+": ") {
				t.Fatalf("got %v, want it to name %s", err, wantErr)
			}
			return
		}
		if len(reqs) != len(want) {
			t.Fatalf("got %d requests, the reference %d", len(reqs), len(want))
		}
		for i := range want {
			if reqs[i].CustomID != want[i].CustomID || reqs[i].Method != want[i].Method || reqs[i].URL != want[i].URL || !bytes.Equal(reqs[i].Body, want[i].Body) {
				t.Fatalf("request %d: got %+v, the reference %+v", i, reqs[i], want[i])
			}
		}
	})
}

// refParse is ParseRequests on top of encoding/json maps; it returns the
// requests or "line N" for the first bad line.
func refParse(data []byte) ([]Request, string) {
	var reqs []Request
	for i, l := range bytes.Split(bytes.TrimPrefix(data, bom), []byte("\n")) {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if isBlank(l) {
			continue
		}
		bad := "line " + strconv.Itoa(i+1)
		var m map[string]json.RawMessage
		if !utf8.Valid(l) || json.Unmarshal(l, &m) != nil || m == nil || ijson.Check(l) != nil {
			return nil, bad
		}
		var r Request
		if json.Unmarshal(m["custom_id"], &r.CustomID) != nil || m["custom_id"][0] != '"' ||
			json.Unmarshal(m["method"], &r.Method) != nil || m["method"][0] != '"' ||
			json.Unmarshal(m["url"], &r.URL) != nil || m["url"][0] != '"' ||
			len(m["body"]) == 0 || m["body"][0] != '{' {
			return nil, bad
		}
		r.Body = m["body"]
		reqs = append(reqs, r)
	}
	return reqs, ""
}
