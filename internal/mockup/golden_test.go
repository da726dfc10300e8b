package mockup_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/mockup"
)

var update = flag.Bool("update", false, "rewrite testdata/answers.golden from the mock's answers")

// goldenRequest is one request of TestAnswersAreUnchanged.
type goldenRequest struct {
	method, path, body string
	header             http.Header
}

// goldenRequests are requests of every route and of every way a body can
// be wrong: their answers (status, headers, body, record) are the mock's
// contract with the tests that read them, byte for byte.
func goldenRequests() []goldenRequest {
	chat := func(content string) string {
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": content}}})
		return string(b)
	}
	bodies := map[string][]string{
		"/v1/chat/completions": {
			string(largeRowBody(7)),
			chat("a\u00a0b\u2003c\u3000d\u0085e\u200bf\u2028g\u1680h\tī\vj\fk\rl\nm  "),
			chat(" <b>&amp;</b> \"quoted\" back\\slash \u0001 \u007f \u2029 é ☃ 𝄞 "),
			chat(""), chat("   "), chat("[[mock:fail=1]] flaky"), chat("[[mock:fail=1]] flaky"),
			chat("[[mock:429x=1]] limited"), chat("[[mock:503]]"), chat("[[mock:sleep=0s]] asleep"),
			chat("[[mock:bogus]]"), chat("[[mock:sleep=-1s]]"), chat("[[mock:fail=x]]"),
			`{"model":"m","messages":[{"role":"user","content":"\u005b\u005bmock:502]] escaped"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{"b":"[[mock:500]]","a":"[[mock:nope]]"}}`,
			`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"two parts"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"here"}]},{"role":"assistant","content":"ok"},{"role":"user","content":"last one"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather"}},{"type":"function","function":{"name":"get_time"}}]}`,
			`{"model":"m","messages":[{"role":"user","content":"weather?"},{"role":"tool","content":"sunny"}],"tools":[{"type":"function","function":{"name":"get_weather"}},{"type":"function","function":{"name":"get_time"}}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":false}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			`{"model":"m","Model":"n","messages":[{"role":"user","content":"keys are exact"}],"Messages":[]}`,
			`{"model":"a","model":"b","messages":[{"role":"user","content":"first"}],"messages":[{"role":"user","content":"second"}]}`,
			`{"model":"m","messages":"not a list"}`, `{"model":"m","messages":[1,"x",null,{"role":5,"content":7}]}`,
			`{"model":"m-ratelimited","messages":[]}`, `{"model":"m-broken","messages":[]}`,
			`{"messages":[]}`, `{"model":5}`, `{"model":""}`, `{}`, `null`, `[1]`, `"s"`, `{`, ``, `{} {}`, `{"model":"m",}`,
			`{"model":"m","max_tokens":1e400}`, `{"model":"m\ud800"}`, "{\"model\":\"m\xff\"}", ` {"model":"m"} `,
		},
		"/v1/completions": {
			`{"model":"m","prompt":"say this"}`, `{"model":"m","prompt":["one two","three"]}`,
			`{"model":"m","prompt":[1,2,3]}`, `{"model":"m","prompt":[[1,2],[3]]}`, `{"model":"m"}`,
		},
		"/v1/embeddings": {
			`{"model":"e","input":"embed me"}`, `{"model":"e","input":["a b","c"],"encoding_format":"base64"}`, `{"model":"e","input":[5,6]}`,
		},
		"/v1/responses": {
			`{"model":"r","instructions":"be nice","input":"hello there"}`,
			`{"model":"r","input":[{"role":"user","content":[{"type":"input_text","text":"part"}]}]}`,
		},
		"/v1/moderations":        {`{"model":"mod","input":"fine"}`, `{"model":"mod","input":[{"type":"text","text":"x y"},{"type":"image_url"}]}`},
		"/v1/images/generations": {`{"model":"img","prompt":"a cat","n":2}`, `{"model":"img","prompt":"a dog"}`},
		"/v1/messages": {
			`{"model":"claude","max_tokens":64,"system":"sys text","messages":[{"role":"user","content":"hi there"}]}`,
			`{"model":"claude","system":[{"type":"text","text":"a b"}],"messages":[{"role":"user","content":[{"type":"text","text":"parts"}]}]}`,
			`[1]`, `{"model":"claude","messages":[{"role":"user","content":"[[mock:529]]"}]}`,
		},
		"/model/anthropic.claude/invoke": {
			`{"anthropic_version":"bedrock-2023-05-31","max_tokens":8,"messages":[{"role":"user","content":"bedrock hi"}]}`,
			`{"anthropic_version":"bedrock-2023-05-31","model":"x","messages":[]}`, `{"messages":[]}`, `{`,
		},
		"/openai/v1/chat/completions": {`{"model":"b","messages":[{"role":"user","content":"via bedrock"}]}`, `{"model":"b"}`, `nope`},
		"/v1/unknown":                 {`{"model":"m"}`},
	}
	var reqs []goldenRequest
	for _, path := range slices.Sorted(maps.Keys(bodies)) {
		for _, body := range bodies[path] {
			reqs = append(reqs, goldenRequest{http.MethodPost, path, body, authFor(path)})
		}
	}
	chat0 := chat("header cases")
	return append(reqs,
		goldenRequest{http.MethodGet, "/v1/chat/completions", chat0, authFor("")},
		goldenRequest{http.MethodPost, "/v1/chat/completions", chat0, http.Header{}},
		goldenRequest{http.MethodPost, "/v1/messages", chat0, http.Header{"Authorization": {"Bearer k"}}},
		goldenRequest{http.MethodPost, "/v1/chat/completions", chat0, http.Header{"Authorization": {"Bearer revoked"}}},
		goldenRequest{http.MethodPost, "/v1/chat/completions", chat0, http.Header{"Authorization": {"Bearer k"}, "X-Mock-Status": {"418"}}},
		goldenRequest{http.MethodPost, "/v1/chat/completions", chat0, http.Header{"Authorization": {"Bearer k"}, "X-Mock-Status": {"200"}}},
		goldenRequest{http.MethodPost, "/v1/chat/completions", chat0, http.Header{"Authorization": {"Bearer k"},
			mockup.HeaderRun: {"run-1"}, mockup.HeaderLeaseUntil: {"1735689600000"}, "Anthropic-Beta": {"b1"}}},
	)
}

// TestAnswersAreUnchanged serves goldenRequests and compares every answer
// with testdata/answers.golden: the mock's answers do not change when its
// code does (go test -run TestAnswersAreUnchanged ./internal/mockup -args -update rewrites it).
func TestAnswersAreUnchanged(t *testing.T) {
	var out bytes.Buffer
	for _, opts := range []mockup.Options{
		{Record: true, RevokedKeys: []string{"revoked"}},
		{Record: true, RPM: 1000, TPM: 10}, // every chat answer is over the tokens on its own
		{Record: true, RPM: 1000},
	} {
		m := mockup.New(opts)
		fmt.Fprintf(&out, "=== options %+v\n", opts)
		for _, gr := range goldenRequests() {
			r := httptest.NewRequest(gr.method, gr.path, strings.NewReader(gr.body))
			r.Header = gr.header.Clone()
			w := httptest.NewRecorder()
			m.ServeHTTP(w, r)
			fmt.Fprintf(&out, "--- %s %s %q %v\n%d\n", gr.method, gr.path, gr.body, gr.header, w.Code)
			for _, k := range slices.Sorted(maps.Keys(w.Header())) {
				v := fmt.Sprintf("%q", w.Header()[k])
				if opts.RPM > 0 && (strings.HasPrefix(k, "Retry-After") || strings.Contains(k, "-Reset")) {
					v = "(a time)" // from when the window's requests came
				}
				fmt.Fprintf(&out, "%s: %s\n", k, v)
			}
			fmt.Fprintf(&out, "%s", w.Body)
			if recs := m.Requests(); len(recs) > 0 {
				rec := recs[len(recs)-1]
				fmt.Fprintf(&out, "record %q %q %q %d %q %q %d\n", rec.Key, rec.Model, rec.Run, rec.LeaseUntil, rec.Beta, rec.UserProfile, rec.Status)
			}
		}
		stats, _ := json.Marshal(m.Stats())
		fmt.Fprintf(&out, "stats %s\n", stats)
	}
	path := filepath.Join("testdata", "answers.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Bytes(); !bytes.Equal(got, want) {
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gotLines), len(wantLines)) {
			if gotLines[i] != wantLines[i] {
				t.Fatalf("line %d differs:\n got %.400s\nwant %.400s", i+1, gotLines[i], wantLines[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(gotLines), len(wantLines))
	}
}

// TestTooLargeBody: a body over the limit is answered 413, its id made
// from the part that was read, as before the body was read into a buffer
// of its announced size.
func TestTooLargeBody(t *testing.T) {
	const limit = 32 << 20
	body := bytes.Repeat([]byte("x"), limit+1)
	for _, announced := range []int64{limit + 1, -1} {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		r.Header = authFor("")
		r.ContentLength = announced
		w := httptest.NewRecorder()
		mockup.New(mockup.Options{}).ServeHTTP(w, r)
		sum := sha256.Sum256(body[:limit])
		if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "Request body exceeds 33554432 bytes") ||
			w.Header().Get("x-request-id") != "req_"+hex.EncodeToString(sum[:])[:24] {
			t.Errorf("announced %d: %d %s %s", announced, w.Code, w.Header(), w.Body)
		}
	}
}
