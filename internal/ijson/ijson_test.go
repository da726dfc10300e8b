package ijson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	many := func(extra string) string {
		var b strings.Builder
		b.WriteString(`{`)
		for i := range 100 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(extra + `"end":0}`)
		return b.String()
	}
	for _, tt := range []struct {
		name, json string
		dup        string // the repeated name, "" for none
	}{
		{"empty object", `{}`, ""},
		{"scalars", `1`, ""},
		{"distinct", `{"model":"a","stream":false,"messages":[{"role":"user"}]}`, ""},
		{"top level", `{"model":"gpt-4o-mini","n":1,"model":"o1-pro"}`, "model"},
		{"nested", `{"body":{"model":"a","x":{"y":1},"model":"b"}}`, "model"},
		{"in an array", `[1,{"a":1},{"a":1,"b":2,"a":3}]`, "a"},
		{"same name in sibling objects", `[{"a":1},{"a":2}]`, ""},
		{"same name at two depths", `{"a":{"a":{"a":1}},"b":{"a":2}}`, ""},
		{"after a nested object closes", `{"a":{"b":1,"c":2},"b":3,"a":4}`, "a"},
		{"escaped", `{"model":"a","\u006dodel":"b"}`, "model"},
		{"escaped solidus", `{"a/b":1,"a\/b":2}`, "a/b"},
		{"escaped quote", `{"a\"":1,"a\u0022":2}`, `a"`},
		{"surrogate pair", `{"😀":1,"\ud83d\ude00":2}`, "😀"},
		{"lone surrogates both U+FFFD", `{"\ud800":1,"\udbff":2}`, "\uFFFD"},
		{"a value that looks like a name", `{"a":"a","b":"a"}`, ""},
		{"names in string values", `{"a":"{\"b\":1,\"b\":2}"}`, ""},
		{"backslashes before a quote", `{"a\\":1,"b":"\\\\","a\\":2}`, `a\`},
		{"case differs", `{"model":"a","Model":"b"}`, ""},
		{"large object", many(""), ""},
		{"large object repeats", many(`"k7":1,`), "k7"},
		{"large object repeats escaped", many(`"k\u0037":1,`), "k7"},
		{"deep", strings.Repeat(`{"a":`, 40) + `{"x":1,"x":2}` + strings.Repeat(`}`, 40), "x"},
		{"deep distinct", strings.Repeat(`[{"a":`, 40) + `1` + strings.Repeat(`}]`, 40), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !json.Valid([]byte(tt.json)) {
				t.Fatalf("test input %s is not JSON", tt.json)
			}
			err := Check([]byte(tt.json))
			if tt.dup == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want nil", tt.json, err)
				}
				return
			}
			var de *DuplicateError
			if !errors.As(err, &de) || de.Name != tt.dup {
				t.Fatalf("Check(%s) = %v, want a duplicate %q", tt.json, err, tt.dup)
			}
			if tt.json[de.Offset] != '"' {
				t.Errorf("Offset %d is not at a name's quote", de.Offset)
			}
		})
	}
}

// TestCheckNotJSON: whatever the bytes, Check returns.
func TestCheckNotJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`}`, `]]]`, `{"a"`, `{"a":1}}"a"`, `{]"a"`, `"`, `{"\`, `{"\u12`, `{"\ud800\u`, `{,"a",`, "{\"\xff\":1,\"\xfe\":2}"} {
		_ = Check([]byte(s))
	}
}

// reference finds the first repeated name with encoding/json's own reading
// of names.
func reference(b []byte) (string, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers past float64 are valid JSON
	type obj struct {
		names map[string]bool
		key   bool
	}
	var stack []*obj
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return "", false
		}
		if err != nil {
			panic(err)
		}
		var top *obj
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok {
		case json.Delim('{'):
			if top != nil {
				top.key = top.names != nil
			}
			stack = append(stack, &obj{names: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			if top != nil {
				top.key = top.names != nil
			}
			stack = append(stack, &obj{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top == nil || top.names == nil {
			continue
		}
		if top.key {
			name := tok.(string)
			if top.names[name] {
				return name, true
			}
			top.names[name] = true
		}
		top.key = !top.key
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"model":"a","model":"b"}`, `{"a":{"b":1},"b":2}`, `[{"a":1},{"a":1}]`,
		`{"\u006dodel":1,"model":2}`, `{"\ud800":1,"\udbff":2}`, `{"a\\":1,"a\\\\":2}`,
		"{\"\xff\":1,\"\xfe\":2}", `{"a":"}","b":"{\"a\":1"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b)
		if !json.Valid(b) {
			return
		}
		name, dup := reference(b)
		var de *DuplicateError
		switch {
		case dup && (!errors.As(err, &de) || de.Name != name):
			t.Fatalf("Check(%q) = %v, want duplicate %q", b, err, name)
		case !dup && err != nil:
			t.Fatalf("Check(%q) = %v, want nil", b, err)
		}
	})
}

// benchBody is a chat request of about 20 KB with nested objects.
func benchBody() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-4o-mini","temperature":0.2,"messages":[`)
	for i := range 40 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"role":"user","content":[{"type":"text","text":%q}],"name":"u%d"}`, strings.Repeat("lorem ipsum \"dolor\" ", 20), i)
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}}}}]}`)
	return []byte(b.String())
}

func BenchmarkCheck(b *testing.B) {
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValid is what every decoder already spends: Check should cost
// no more.
func BenchmarkValid(b *testing.B) {
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if !json.Valid(body) {
			b.Fatal("not valid")
		}
	}
}
