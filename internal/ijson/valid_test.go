package ijson

import (
	"encoding/json"
	"strings"
	"testing"
)

// validCases are the edges of the grammar, each with encoding/json's answer.
var validCases = []struct {
	in   string
	want bool
}{
	// White space: only space, tab, CR and LF, around any token.
	{``, false}, {` `, false}, {" \t\r\n1 \t\r\n", true}, {"\f1", false}, {"1\v", false},
	{"\u00a01", false}, {"[1,\x002]", false}, {` { "a" : [ 1 , 2 ] } `, true},
	// One value only.
	{`1 2`, false}, {`{}{}`, false}, {`"a""b"`, false}, {`[] x`, false}, {`nul`, false},
	// Literals, exactly.
	{`true`, true}, {`false`, true}, {`null`, true}, {`True`, false}, {`tru`, false},
	{`truex`, false}, {`nullnull`, false}, {`[true,false,null]`, true}, {`[truefalse]`, false},
	// Numbers.
	{`0`, true}, {`-0`, true}, {`-`, false}, {`+1`, false}, {`01`, false}, {`-01`, false},
	{`00`, false}, {`1.`, false}, {`.1`, false}, {`1.5`, true}, {`-0.0e-0`, true}, {`1e`, false},
	{`1e+`, false}, {`1E+2`, true}, {`1e-2`, true}, {`1.e2`, false}, {`0x10`, false},
	{`1_000`, false}, {`Infinity`, false}, {`NaN`, false}, {`[-]`, false}, {`[1.]`, false},
	{`123456789012345678901234567890`, true}, {`[0,1]`, true}, {`[01]`, false}, {`1e5.5`, false},
	// Strings: control characters must be escaped, DEL and bytes ≥ 0x80 need not be.
	{`""`, true}, {`"`, false}, {`"abc`, false}, {"\"a\tb\"", false}, {"\"a\x1fb\"", false},
	{"\"a\x00b\"", false}, {"\"\x7f\"", true}, {"\"\xff\xfe\"", true}, {"\"é😀\"", true},
	{`"\"\\\/\b\f\n\r\t"`, true}, {`"\a"`, false}, {`"\x41"`, false}, {`"\'"`, false},
	{`"\u0041"`, true}, {`"\uD83D\uDE00"`, true}, {`"\ud800"`, true}, {`"\uDEFg"`, false},
	{`"\u00"`, false}, {`"\u"`, false}, {`"\`, false}, {`"\"`, false}, {`"a\\"`, true},
	{`"\\\"`, false}, {`'a'`, false}, {`"12345678\"12345678"`, true}, {"\"1234567\x0a12345678\"", false},
	{`"1234567"12345678"`, false}, {"\"" + strings.Repeat("x", 100) + "\x01\"", false},
	// Arrays and objects.
	{`[]`, true}, {`[ ]`, true}, {`{}`, true}, {`{ }`, true}, {`[`, false}, {`]`, false},
	{`[1,]`, false}, {`[,1]`, false}, {`[1,,2]`, false}, {`[1 2]`, false}, {`[}`, false},
	{`{]`, false}, {`{"a":1]`, false}, {`[1}`, false}, {`{"a"}`, false}, {`{"a":}`, false},
	{`{"a" 1}`, false}, {`{"a"::1}`, false}, {`{"a":1,}`, false}, {`{,"a":1}`, false},
	{`{1:2}`, false}, {`{a:1}`, false}, {`{"a":1 "b":2}`, false}, {`{"a":1,"b":2}`, true},
	{`{"a":[{"b":{}},[]],"c":{"d":[1,{"e":null}]}}`, true}, {`[[[]]]`, true}, {`[[[]]`, false},
	{`{"a":{"b":1}}}`, false}, {`{"a":{"b":1}`, false}, {`{"":""}`, true}, {`[{}{}]`, false},
	// Nesting: encoding/json takes 10,000 levels and no more.
	{strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth), true},
	{strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), false},
	{strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth), true},
	{strings.Repeat(`{"a":`, maxDepth) + "{}" + strings.Repeat("}", maxDepth), false},
	{strings.Repeat("[", maxDepth) + "{}" + strings.Repeat("]", maxDepth), false},
}

func TestValid(t *testing.T) {
	t.Parallel()
	for _, c := range validCases {
		in := c.in
		if len(in) > 40 {
			in = in[:40] + "…"
		}
		if ref := json.Valid([]byte(c.in)); ref != c.want {
			t.Errorf("json.Valid(%q) = %v: the case's want %v is wrong", in, ref, c.want)
		}
		if got := Valid([]byte(c.in)); got != c.want {
			t.Errorf("Valid(%q) = %v, want %v", in, got, c.want)
		}
	}
}

// FuzzValid holds Valid to encoding/json.Valid on any bytes.
func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		if len(c.in) < 1000 {
			f.Add([]byte(c.in))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

func BenchmarkValidFast(b *testing.B) {
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if !Valid(body) {
			b.Fatal("not valid")
		}
	}
}
