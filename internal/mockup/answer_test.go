package mockup

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
)

// stringCases hold every byte encoding/json escapes or keeps, and UTF-8
// valid and not.
var stringCases = []string{
	"", "plain", `"quoted" \back\slash/`, "<b>&amp;</b>", "\x00\x01\b\t\n\v\f\r\x1b\x1f\x7f", "é ☃ 𝄞 \u00a0",
	"\u2027\u2028\u2029\u202a", "\xff", "a\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\ufffd", "\ufeff",
}

func TestAppendStringAsEncodingJSON(t *testing.T) {
	for c := range 256 {
		stringCases = append(stringCases, string([]byte{byte(c)}), "a"+string(rune(c))+"b")
	}
	for _, s := range stringCases {
		checkAppendString(t, s)
	}
}

func checkAppendString(t *testing.T, s string) {
	want, _ := json.Marshal(s)
	if got := appendString(nil, s); !bytes.Equal(got, want) {
		t.Errorf("appendString(%q) = %s, want %s", s, got, want)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range stringCases {
		f.Add(s)
	}
	f.Fuzz(checkAppendString)
}

// TestWriteObjectAsWriteJSON writes values of every type an answer holds,
// and of others, through both.
func TestWriteObjectAsWriteJSON(t *testing.T) {
	for _, v := range []object{
		{},
		{"s": "x<y", "i": -3, "b": true, "n": nil, "f": 1.0, "g": 1e21, "h": 0.000001, "list": []object{{"z": 1, "a": 2}}, "any": []any{}, "none": []any(nil)},
		{"nilmap": object(nil), "nilobjs": []object(nil), "strs": []string{"a"}, "vec": []float32{0.1, -0.5}, "nested": map[string]any{"k": []any{1.5, "s", nil, false, map[string]any{}}}},
		{"ü": 1, "a": 2, "B": 3, "<": 4, "": 5},
		{"bad": math.NaN()},
	} {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSON(want, 201, v)
		writeObject(got, 201, v)
		if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Errorf("writeObject(%v): %d %q, writeJSON: %d %q", v, got.Code, got.Body, want.Code, want.Body)
		}
	}
}

func BenchmarkAppendString(b *testing.B) {
	s := strings.Repeat("lorem ipsum dolor sit amet ", 150)
	buf := make([]byte, 0, 8192)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = appendString(buf[:0], s)
	}
}
