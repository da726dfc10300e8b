package mockup

import (
	"encoding/json"
	"reflect"
	"testing"
)

// bodyCases are bodies in plainJSON's form and out of it: escapes,
// invalid UTF-8, numbers of every form, bad syntax, other top-level values.
var bodyCases = []string{
	`{}`, ` { } `, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `{"a":[],"b":{},"c":[[],{}]}`,
	`{"a":"é ☃ 𝄞","b":"\u00e9","c":"tab\there","d":"x\/y"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\x01\"}",
	`{"n":[0,-0,1,-1,12.5,1e3,1E+3,1e-3,-0.0e0,1e400,1e-400,01,1.,.5,-,+1,0x1,1e,1e+]}`, `{"n":123456789012345678901234567890}`,
	`{"t":true,"f":false,"z":null,"tr":tru,"nu":nul}`, `{"a":1,"a":2}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a" 1}`, `{a:1}`, `{"a":[1,]}`,
	`{"a":[1 2]}`, `{"a":1}x`, `{"a":1}{}`, `{"a":1} `, "\t\r\n{\"a\":1}\n", `{"a":1`, `{"a":"`, `{`, ``, `null`, `[1]`, `"s"`, `1`, `true`,
	`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"\u006dodel":"m"}`, `{"model":"m","max_tokens":1e400,"messages":[]}`, "{\"a\":\"\u2028\"}",
}

// checkDecodeBody fails unless decodeBody gives raw's value and error
// as json.Unmarshal into a map[string]any does.
func checkDecodeBody(t *testing.T, raw []byte) {
	var want map[string]any
	wantErr := json.Unmarshal(raw, &want)
	got, err := decodeBody(raw)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(err, wantErr) {
		t.Errorf("decodeBody(%q) = %#v, %v; json.Unmarshal: %#v, %v", raw, got, err, want, wantErr)
	}
}

func TestDecodeBodyAsEncodingJSON(t *testing.T) {
	for _, s := range bodyCases {
		checkDecodeBody(t, []byte(s))
	}
}

func TestPlainJSONReadsTheCommonBodies(t *testing.T) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":"hi é"}],"max_tokens":16,"temperature":0.5,"stream":false,"stop":null}`} {
		p := plainJSON{b: []byte(s)}
		if _, ok := p.object(); !ok || !p.end() {
			t.Errorf("plainJSON does not read %s", s)
		}
	}
}

func FuzzDecodeBody(f *testing.F) {
	for _, s := range bodyCases {
		f.Add([]byte(s))
	}
	f.Fuzz(checkDecodeBody)
}
