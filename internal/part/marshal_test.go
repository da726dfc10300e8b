package part

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
)

// compactBodies are answers' bodies as the provider gives them (compact:
// json.Compact, or its wrapping of a body that is not JSON), with what
// json.Marshal escapes in a line.
var compactBodies = []string{
	`{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
	`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`,
	`{"error":{"message":"<html><body><h1>502 Bad Gateway</h1></body></html>"}}`,
	`{"a":"<script>&amp;</script> a > b","b":"\u003c already escaped \u0026"}`,
	"{\"unicode\":\"é 日本 🎉 \u2028 \u2029 \u2027 \xe2\x80\",\"esc\":\"\\\"quote\\\" \\\\ \\n \\t \\u0000 \\ud83d\\ude00\"}",
	"{\"bad utf-8\":\"\xff\xfe a\"}",
	`[1,2.5e10,-0,true,false,null,"x",{},[]]`,
	`"just a string <b>"`,
	`42`,
	`null`,
}

// A line of an answer whose body is compact (inference.Result.Compact) is
// the same bytes as json.Marshal writes: whatever its status, ids, body,
// escapes and fallback.
func TestMarshalLine(t *testing.T) {
	t.Parallel()
	if n, m := reflect.TypeFor[Line]().NumField(), reflect.TypeFor[LineResponse]().NumField(); n != 6 || m != 3 {
		t.Fatalf("Line has %d fields, LineResponse %d: marshalLine writes them by hand; write the new ones there too", n, m)
	}
	for _, body := range compactBodies {
		for _, status := range []int{200, 400, 429, 502} {
			for _, fallback := range []bool{false, true} {
				l := Line{ID: "batch_req_0123456789abcdef01234567", CustomID: "row <1> & \"2\" é\u2028", Fallback: fallback,
					Response: &LineResponse{StatusCode: status, RequestID: "req_<x>&y", Body: json.RawMessage(body)}}
				want, err := json.Marshal(l)
				if err != nil {
					t.Fatalf("%s: json.Marshal: %v", body, err)
				}
				got, err := marshalLine(l, true)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("marshalLine(%s, %d, %v):\n got %s, %v\nwant %s", body, status, fallback, got, err, want)
				}
			}
		}
	}
}

// The escapes json.Marshal gives a body's <, >, & and U+2028 stay in its
// line, byte for byte.
func TestMarshalLineEscapes(t *testing.T) {
	t.Parallel()
	l := Line{ID: "batch_req_1", CustomID: "a<b", Response: &LineResponse{StatusCode: 502, RequestID: "req_1",
		Body: json.RawMessage("{\"error\":{\"message\":\"<html>a & b\u2028</html>\"}}")}}
	got, err := marshalLine(l, true)
	want := `{"id":"batch_req_1","custom_id":"a\u003cb","response":{"status_code":502,"request_id":"req_1","body":{"error":{"message":"\u003chtml\u003ea \u0026 b\u2028\u003c/html\u003e"}}},"error":null}`
	if err != nil || string(got) != want {
		t.Errorf("got  %s, %v\nwant %s", got, err, want)
	}
}

// Every outcome's line, usage event and counts are the same whether its
// body is known compact or checked: answers, errors, fallback, a record's
// usage, expiry.
func TestLinesOfCompactBodies(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	b := batch.Batch{ID: "batch_x", Tenant: "t", KeyID: "k"}
	var outs []Outcome
	for i, body := range compactBodies {
		outs = append(outs, Outcome{CustomID: "r<" + string(rune('a'+i)), Result: inference.Result{StatusCode: []int{200, 400, 500}[i%3],
			Body: json.RawMessage(body), RequestID: "req_&", Model: "m", Fallback: i%2 == 1, Attempts: 2,
			Usage: inference.Usage{InputTokens: 3, OutputTokens: 4, TotalTokens: 7}}})
	}
	outs = append(outs,
		Outcome{CustomID: "timeout", Result: inference.Result{ErrCode: inference.CodeRequestTimeout, ErrMessage: "slow <1s>", Model: "m"}},
		Outcome{CustomID: "record", Code: "workflow_failed", Message: "step 2", Result: inference.Result{Model: "m", Usage: inference.Usage{InputTokens: 5, TotalTokens: 5}}},
		Outcome{CustomID: "late", Code: CodeExpired, Message: "late", Expired: true})
	checked := make([]Outcome, len(outs))
	for i, o := range outs {
		checked[i] = o
		outs[i].Result.Compact = o.Result.StatusCode != 0
	}
	got, gotObjs := build(t, b, batch.Chunk{FirstRow: 7}, outs, now)
	want, wantObjs := build(t, b, batch.Chunk{FirstRow: 7}, checked, now)
	for _, kind := range []string{"out", "err"} {
		if !bytes.Equal(gotObjs[kind], wantObjs[kind]) {
			t.Errorf("%s lines:\n got %s\nwant %s", kind, gotObjs[kind], wantObjs[kind])
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("part %+v, want %+v", got, want)
	}
}

// FuzzMarshalLine: for any ids and any JSON body, compacted as the
// provider does, marshalLine writes json.Marshal's bytes.
func FuzzMarshalLine(f *testing.F) {
	for _, body := range compactBodies {
		f.Add("r<1>", "req_&", 200, false, []byte(body))
	}
	f.Add("\xff", "\u2028", 502, true, []byte(" { \"a\" : [ 1 , \"<\" ] } "))
	f.Fuzz(func(t *testing.T, customID, requestID string, status int, fallback bool, body []byte) {
		var compact bytes.Buffer
		if json.Compact(&compact, body) != nil {
			return
		}
		l := Line{ID: "batch_req_1", CustomID: customID, Fallback: fallback,
			Response: &LineResponse{StatusCode: status, RequestID: requestID, Body: compact.Bytes()}}
		want, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := marshalLine(l, true); err != nil || !bytes.Equal(got, want) {
			t.Errorf("got  %s, %v\nwant %s", got, err, want)
		}
	})
}
