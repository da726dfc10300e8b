package localstack

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/api"
	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/store"
)

// Limits and abuse (SECURITY.md): every one answered with a clear 4xx in
// the shape of the API it was sent to, or, for what is only found by
// reading an input file, a failed batch naming the rule and the line.

// limitReq sends one request with the key as a bearer token (or as
// x-api-key under /v1/messages, as Anthropic's SDKs do).
func limitReq(t testing.TB, rt *localrun.Runtime, key, method, path, ctype string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, rt.URL+path, r)
	if strings.HasPrefix(path, "/v1/messages") {
		req.Header.Set("x-api-key", key)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// wantError checks an error answer: its status, its shape (Anthropic's
// under /v1/messages, OpenAI's elsewhere), its type, and that its message
// contains wantIn.
func wantError(t testing.TB, path string, status int, body []byte, wantStatus int, wantType, wantIn string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string  `json:"type"`
			Message string  `json:"message"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
		t.Fatalf("%s: got %d %s, want an error body", path, status, body)
	}
	anthropic := strings.HasPrefix(path, "/v1/messages")
	if anthropic != (e.Type == "error") {
		t.Errorf("%s: body %s is not in the %s shape", path, body, map[bool]string{true: "Anthropic", false: "OpenAI"}[anthropic])
	}
	if status != wantStatus || e.Error.Type != wantType || !strings.Contains(e.Error.Message, wantIn) {
		t.Errorf("%s: got %d %s, want %d %s containing %q", path, status, body, wantStatus, wantType, wantIn)
	}
}

// multipartFile builds a multipart body whose file part carries the given
// Content-Disposition parameters verbatim.
func multipartFile(disposition string, data []byte) ([]byte, string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	w.WriteField("purpose", "batch")
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", disposition)
	h.Set("Content-Type", "application/octet-stream")
	p, _ := w.CreatePart(h)
	p.Write(data)
	w.Close()
	return b.Bytes(), w.FormDataContentType()
}

func nest(depth int) string {
	return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
}

// TestLimitRequests: body size, metadata, list bounds, nesting, bad UTF-8,
// rows per Anthropic batch and filename tricks, each refused at the door.
func TestLimitRequests(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	in := upload(t, c, "in.jsonl", jsonlRows(nRows(1, "hi")))
	create := func(extra map[string]any) []byte {
		body := map[string]any{"input_file_id": in.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
		for k, v := range extra {
			body[k] = v
		}
		return jsonBody(body)
	}
	pairs := func(n, klen, vlen int) map[string]string {
		md := map[string]string{}
		for i := range n {
			k := fmt.Sprintf("%02d", i) + strings.Repeat("k", klen-2)
			md[k] = strings.Repeat("v", vlen)
		}
		return md
	}
	// Bodies just over what a handler takes (it says which route and how
	// much), and over what the gateway can carry at all (base64 in a 6 MB
	// event).
	bigInline := func(size int) []byte {
		return []byte(`{"endpoint":"/v1/chat/completions","requests":[{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","x":"` +
			strings.Repeat("A", size) + `"}}]}`)
	}
	bigMessages := func(size int) []byte {
		return []byte(`{"requests":[{"custom_id":"a","params":{"model":"claude-haiku-4-5","max_tokens":1,"messages":[{"role":"user","content":"` +
			strings.Repeat("A", size) + `"}]}}]}`)
	}
	// The count is checked before the requests themselves, so empty
	// objects keep 100,001 of them within one request.
	tinyMessages := func(n int) []byte {
		return []byte(`{"requests":[{}` + strings.Repeat(`,{}`, n-1) + `]}`)
	}
	const j = "application/json"
	tests := []struct {
		name, method, path, ctype string
		body                      []byte
		status                    int
		typ, wantIn               string
	}{
		// Request body size.
		{"JSON body over the route's limit", "POST", "/v1/batches", j, bigInline(4<<20 + 200<<10), 413, "invalid_request_error", "larger than 4259840 bytes, the most POST /v1/batches takes"},
		{"JSON body over the gateway's limit", "POST", "/v1/batches", j, bigInline(5 << 20), 413, "invalid_request_error", "Request too large"},
		{"small JSON route", "POST", "/v1/uploads", j, jsonBody(map[string]any{"filename": strings.Repeat("a", 70<<10) + ".jsonl"}), 413, "invalid_request_error", "larger than 65536 bytes"},
		{"Anthropic body over the route's limit", "POST", "/v1/messages/batches", j, bigMessages(4<<20 + 200<<10), 413, "request_too_large", "larger than 4 MiB"},
		{"Anthropic body over the gateway's limit", "POST", "/v1/messages/batches", j, bigMessages(5 << 20), 413, "request_too_large", "Request too large"},
		// Rows per Anthropic batch (OpenAI's 50,000 are counted when the
		// input is read: TestAbuseInputFiles).
		{"Anthropic batch of 100,001 requests", "POST", "/v1/messages/batches", j, tinyMessages(100_001), 400, "invalid_request_error", "at most 100000 requests"},
		// Metadata: 16 pairs, keys up to 64 characters, values up to 512.
		{"17 metadata pairs", "POST", "/v1/batches", j, create(map[string]any{"metadata": pairs(17, 4, 4)}), 400, "invalid_request_error", "at most 16 pairs"},
		{"metadata key of 65", "POST", "/v1/batches", j, create(map[string]any{"metadata": pairs(1, 65, 1)}), 400, "invalid_request_error", "keys must be at most 64 characters"},
		{"metadata value of 513", "POST", "/v1/batches", j, create(map[string]any{"metadata": pairs(1, 4, 513)}), 400, "invalid_request_error", "values at most 512"},
		{"metadata not strings", "POST", "/v1/batches", j, create(map[string]any{"metadata": map[string]any{"a": map[string]any{"b": 1}}}), 400, "invalid_request_error", "metadata"},
		// List bounds.
		{"files limit 0", "GET", "/v1/files?limit=0", "", nil, 400, "invalid_request_error", "between 1 and 10000"},
		{"files limit 10001", "GET", "/v1/files?limit=10001", "", nil, 400, "invalid_request_error", "between 1 and 10000"},
		{"files limit not a number", "GET", "/v1/files?limit=ten", "", nil, 400, "invalid_request_error", "between 1 and 10000"},
		{"batches limit 0", "GET", "/v1/batches?limit=0", "", nil, 400, "invalid_request_error", "between 1 and 100"},
		{"batches limit 101", "GET", "/v1/batches?limit=101", "", nil, 400, "invalid_request_error", "between 1 and 100"},
		{"batches limit huge", "GET", "/v1/batches?limit=99999999999999999999", "", nil, 400, "invalid_request_error", "between 1 and 100"},
		{"message batches limit 1001", "GET", "/v1/messages/batches?limit=1001", "", nil, 400, "invalid_request_error", "between 1 and 1000"},
		// Nesting and encoding.
		{"nested 65 deep", "POST", "/v1/batches", j, []byte(`{"metadata":` + nest(65) + `}`), 400, "invalid_request_error", "nests deeper than 64 levels"},
		{"nested 100,000 deep", "POST", "/v1/batches", j, []byte(`{"requests":[` + nest(100_000) + `]}`), 400, "invalid_request_error", "nests deeper than 64 levels"},
		{"nested arrays", "POST", "/v1/uploads", j, []byte(strings.Repeat("[", 10_000)), 400, "invalid_request_error", "nests deeper than 64 levels"},
		{"Anthropic nested", "POST", "/v1/messages/batches", j, []byte(`{"requests":[` + nest(1000) + `]}`), 400, "invalid_request_error", "nests deeper than 64 levels"},
		{"invalid UTF-8", "POST", "/v1/batches", j, []byte("{\"metadata\":{\"a\":\"\xff\xfe\"}}"), 400, "invalid_request_error", "not valid UTF-8 (at byte 18)"},
		{"Anthropic invalid UTF-8", "POST", "/v1/messages/batches", j, []byte("{\"requests\":[{\"custom_id\":\"\xc3\"}]}"), 400, "invalid_request_error", "not valid UTF-8"},
		{"malformed JSON", "POST", "/v1/batches", j, []byte(`{"metadata":`), 400, "invalid_request_error", "malformed JSON"},
		{"not an object", "POST", "/v1/batches", j, []byte(`[1,2,3]`), 400, "invalid_request_error", "must be a JSON object"},
	}
	// Filename tricks, in a multipart upload, a presigned upload and an
	// Upload: each named, none cut down to something else.
	tricks := []struct{ name, disposition, wantIn string }{
		{"parent directories", `form-data; name="file"; filename="../../x.jsonl"`, "without a directory"},
		{"absolute path", `form-data; name="file"; filename="/etc/x.jsonl"`, "without a directory"},
		{"subdirectory", `form-data; name="file"; filename="a/b.jsonl"`, "without a directory"},
		{"backslash", `form-data; name="file"; filename="..\\..\\x.jsonl"`, "without a directory"},
		{"NUL", `form-data; name="file"; filename*=UTF-8''a%00b.jsonl`, "control character"},
		{"CR LF", `form-data; name="file"; filename*=UTF-8''a%0D%0AX-Injected%3A%201.jsonl`, "control character"},
		{"dot dot", `form-data; name="file"; filename=".."`, "has no name"},
		{"quote", `form-data; name="file"; filename*=UTF-8''a%22.jsonl`, "quote"},
	}
	for _, tr := range tricks {
		body, ctype := multipartFile(tr.disposition, jsonlRows(nRows(1, "x")))
		tests = append(tests, struct {
			name, method, path, ctype string
			body                      []byte
			status                    int
			typ, wantIn               string
		}{"filename: " + tr.name, "POST", "/v1/files", ctype, body, 400, "invalid_request_error", tr.wantIn})
	}
	for _, name := range []string{"../x.jsonl", "a/b.jsonl", "a\x00.jsonl", "a\r\nb.jsonl"} {
		want := "without a directory"
		if strings.ContainsAny(name, "\x00\r") {
			want = "control character"
		}
		tests = append(tests,
			struct {
				name, method, path, ctype string
				body                      []byte
				status                    int
				typ, wantIn               string
			}{"presigned filename " + strconv.Quote(name), "POST", "/v1/files", j, jsonBody(map[string]any{"filename": name, "purpose": "batch", "bytes": 10}), 400, "invalid_request_error", want},
			struct {
				name, method, path, ctype string
				body                      []byte
				status                    int
				typ, wantIn               string
			}{"upload filename " + strconv.Quote(name), "POST", "/v1/uploads", j, jsonBody(map[string]any{"filename": name, "purpose": "batch", "bytes": 10, "mime_type": "text/jsonl"}), 400, "invalid_request_error", want})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := limitReq(t, rt, key, tt.method, tt.path, tt.ctype, tt.body)
			wantError(t, tt.path, status, body, tt.status, tt.typ, tt.wantIn)
		})
	}

	// Right at each bound, the same requests pass.
	for _, ok := range []struct {
		name, method, path string
		body               []byte
	}{
		{"16 pairs of 64 and 512", "POST", "/v1/batches", create(map[string]any{"metadata": pairs(16, 64, 512)})},
		{"nested 64 deep", "POST", "/v1/batches", create(map[string]any{"requests": nil, "metadata": nil, "x": json.RawMessage(nest(63))})},
		{"files limit 10000", "GET", "/v1/files?limit=10000", nil},
		{"batches limit 100", "GET", "/v1/batches?limit=100", nil},
		{"a plain unusual filename", "POST", "/v1/files", nil},
	} {
		t.Run("bound: "+ok.name, func(t *testing.T) {
			body, ctype := ok.body, "application/json"
			if ok.body == nil && ok.method == "POST" {
				body, ctype = multipartFile(`form-data; name="file"; filename="..résumé (1).jsonl"`, jsonlRows(nRows(1, "x")))
			}
			status, _, out := limitReq(t, rt, key, ok.method, ok.path, ctype, body)
			if status != http.StatusOK {
				t.Fatalf("got %d %s, want 200", status, out)
			}
		})
	}
}

// TestLimitRatePerKey: past its requests per second a key gets 429 with
// Retry-After, in the API's shape; refused requests do nothing; the limit
// is per key and the next second starts afresh.
func TestLimitRatePerKey(t *testing.T) {
	t.Parallel()
	const perSecond = 5
	rt := runtime(t, func(o *localrun.Options) { o.Env.RateLimit = perSecond })
	c, key := client(t, rt, "acme")
	other, err := rt.Key(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}

	type answer struct {
		status int
		header http.Header
		body   []byte
	}
	burst := func(n int, do func() answer) []answer {
		out := make([]answer, n)
		var wg sync.WaitGroup
		for i := range out {
			wg.Go(func() { out[i] = do() })
		}
		wg.Wait()
		return out
	}
	uploadWith := func(k string) func() answer {
		return func() answer {
			body, ctype := multipartFile(`form-data; name="file"; filename="burst.jsonl"`, jsonlRows(nRows(1, "x")))
			s, h, b := limitReq(t, rt, k, "POST", "/v1/files", ctype, body)
			return answer{s, h, b}
		}
	}
	start := time.Now()
	got := burst(30, uploadWith(key))
	seconds := int(time.Since(start)/time.Second) + 2 // the burst may straddle second boundaries
	created, limited := 0, 0
	for _, a := range got {
		switch a.status {
		case http.StatusOK:
			created++
		case http.StatusTooManyRequests:
			limited++
			if a.header.Get("Retry-After") != "1" {
				t.Errorf("429 with Retry-After %q, want 1", a.header.Get("Retry-After"))
			}
			wantError(t, "/v1/files", a.status, a.body, 429, "rate_limit_error", "at most 5 requests per second")
		default:
			t.Errorf("burst answer %d %s", a.status, a.body)
		}
	}
	if limited == 0 || created > perSecond*seconds {
		t.Fatalf("30 uploads at once: %d created, %d limited; want at most %d per second over %d s", created, limited, perSecond, seconds)
	}
	// The other key of the same tenant has its own allowance.
	if a := uploadWith(other)(); a.status != http.StatusOK {
		t.Fatalf("another key during the burst: got %d %s, want 200", a.status, a.body)
	}
	created++
	// Anthropic's routes answer in Anthropic's shape.
	msgs := burst(20, func() answer {
		s, h, b := limitReq(t, rt, key, "GET", "/v1/messages/batches", "", nil)
		return answer{s, h, b}
	})
	anthropicLimited := 0
	for _, a := range msgs {
		if a.status == http.StatusTooManyRequests {
			anthropicLimited++
			wantError(t, "/v1/messages/batches", a.status, a.body, 429, "rate_limit_error", "rate limit")
		}
	}
	if anthropicLimited == 0 {
		t.Error("20 Anthropic requests at once: none limited")
	}
	// A refused request did nothing: exactly the accepted uploads exist.
	time.Sleep(1100 * time.Millisecond)
	page, err := c.Files.List(context.Background(), openai.FileListParams{})
	if err != nil {
		t.Fatalf("list after a second: %v", err)
	}
	if len(page.Data) != created {
		t.Fatalf("%d files exist, %d uploads were accepted", len(page.Data), created)
	}
}

// sdkGivesUpAtOnce: the official Go SDKs, with their default retries, get
// the in-flight limit's 429 within 2 s, instead of sleeping out Retry-After.
func sdkGivesUpAtOnce(t *testing.T, rt *localrun.Runtime, key, fileID string) {
	t.Helper()
	oc := openai.NewClient(option.WithBaseURL(rt.URL+"/v1/"), option.WithAPIKey(key))
	ac := anthropic.NewClient(aoption.WithBaseURL(rt.URL), aoption.WithAPIKey(key))
	for name, create := range map[string]func(context.Context) error{
		"openai-go": func(ctx context.Context) error {
			_, err := oc.Batches.New(ctx, openai.BatchNewParams{InputFileID: fileID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
				CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
			return err
		},
		"anthropic-sdk-go": func(ctx context.Context) error {
			_, err := ac.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{
				msgRequest("a", "claude-haiku-4-5", "hi")}})
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		err := create(ctx)
		cancel()
		status := 0
		if oe := (*openai.Error)(nil); errors.As(err, &oe) {
			status = oe.StatusCode
		} else if ae := (*anthropic.Error)(nil); errors.As(err, &ae) {
			status = ae.StatusCode
		}
		if took := time.Since(start); status != http.StatusTooManyRequests || took > 2*time.Second {
			t.Errorf("%s at the in-flight limit: got %v after %v, want a 429 within 2 s", name, err, took.Round(time.Millisecond))
		}
	}
}

// slowModel answers rows that sleep up to a minute.
const slowModel = `  - {name: slow, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 8, timeout: 60s}
`

// TestLimitInflightPerTenant: a tenant's batches that have not ended are
// capped; the cap counts each batch once and frees its slot once, whatever
// path ends it; a template is not counted; another tenant is not affected;
// slots left behind by crashes are recovered.
func TestLimitInflightPerTenant(t *testing.T) {
	t.Parallel()
	const max = 2
	// The slow batches must outlast every check made while they run,
	// however loaded the machine: their model's timeout is above their
	// sleep.
	rt := runtime(t, withModels(t, testModels+slowModel), func(o *localrun.Options) { o.Env.MaxInflight = max })
	ctx := context.Background()
	c, key := client(t, rt, "acme")
	_, otherKey := client(t, rt, "globex")
	inflight := func() int {
		t.Helper()
		n, err := rt.App.Store.Inflight(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	slow := upload(t, c, "slow.jsonl", jsonlRows(modelRows(nRows(1, "[[mock:sleep=15s]] slow"), "slow")))
	fast := upload(t, c, "fast.jsonl", jsonlRows(nRows(1, "quick")))
	post := func(key, fileID string, extra ...string) (int, http.Header, []byte) {
		body := map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
		for i := 0; i+1 < len(extra); i += 2 {
			body[extra[i]] = extra[i+1]
		}
		return limitReq(t, rt, key, "POST", "/v1/batches", "application/json", jsonBody(body))
	}
	b1, b2 := createBatch(t, c, slow.ID), createBatch(t, c, slow.ID)
	if n := inflight(); n != 2 {
		t.Fatalf("after two creates: %d in flight, want 2", n)
	}

	// At the limit: OpenAI and Anthropic creates, inline rows too (which
	// are refused before they are stored as a file).
	files := func() int {
		page, err := c.Files.List(ctx, openai.FileListParams{})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Data)
	}
	nfiles := files()
	status, h, body := post(key, fast.ID)
	wantError(t, "/v1/batches", status, body, 429, "rate_limit_error", "already has 2 batches in flight")
	if h.Get("Retry-After") != "60" || h.Get("X-Should-Retry") != "false" {
		t.Errorf("Retry-After %q, X-Should-Retry %q: want 60 and false", h.Get("Retry-After"), h.Get("X-Should-Retry"))
	}
	sdkGivesUpAtOnce(t, rt, key, fast.ID)
	status, _, body = limitReq(t, rt, key, "POST", "/v1/batches", "application/json", jsonBody(map[string]any{
		"endpoint": "/v1/chat/completions", "requests": []any{map[string]any{"method": "POST", "url": "/v1/chat/completions", "body": map[string]any{"model": "gpt-4o-mini"}}}}))
	wantError(t, "/v1/batches", status, body, 429, "rate_limit_error", "batches in flight")
	status, _, body = limitReq(t, rt, key, "POST", "/v1/messages/batches", "application/json", []byte(
		`{"requests":[{"custom_id":"a","params":{"model":"claude-haiku-4-5","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}}]}`))
	wantError(t, "/v1/messages/batches", status, body, 429, "rate_limit_error", "batches in flight")
	if n := files(); n != nfiles {
		t.Errorf("refused creates left %d files behind", n-nfiles)
	}
	// Another tenant has its own allowance; a template runs nothing itself.
	if status, _, body := post(otherKey, upload(t, clientWithKey(rt, otherKey), "o.jsonl", jsonlRows(nRows(1, "x"))).ID); status != 200 {
		t.Fatalf("another tenant: got %d %s", status, body)
	}
	status, _, body = post(key, fast.ID, "schedule", "0 0 1 1 *")
	if status != 200 {
		t.Fatalf("template at the limit: got %d %s, want 200", status, body)
	}
	tpl := decodeBatch(t, body)
	if _, err := c.Batches.Cancel(ctx, tpl.ID); err != nil {
		t.Fatalf("cancel template: %v", err)
	}
	if n := inflight(); n != 2 {
		t.Fatalf("after refused creates and a template: %d in flight, want 2", n)
	}

	// A batch that ends gives its slot back: cancelled or completed.
	if _, err := c.Batches.Cancel(ctx, b2.ID); err != nil {
		t.Fatal(err)
	}
	waitBatch(t, c, b2.ID)
	waitBatch(t, c, b1.ID)
	eventually(t, "slots given back", 10*time.Second, func() bool { return inflight() == 0 })

	// An Idempotency-Key retry is not counted twice, and still gets its
	// batch at the limit.
	status, _, body = post(key, slow.ID)
	if status != 200 {
		t.Fatalf("create after the slots were freed: %d %s", status, body)
	}
	b3 := decodeBatch(t, body)
	req := func() (int, []byte) {
		return postBatch(t, rt, key, map[string]any{"input_file_id": slow.ID, "endpoint": "/v1/chat/completions"}, "Idempotency-Key", "limit-test-1")
	}
	s1, first := req()
	s2, again := req()
	if s1 != 200 || s2 != 200 || decodeBatch(t, first).ID != decodeBatch(t, again).ID {
		t.Fatalf("idempotent creates at the limit: got %d %s and %d %s, want the same batch twice", s1, first, s2, again)
	}
	if n := inflight(); n != 2 {
		t.Fatalf("two batches and an idempotent retry: %d in flight, want 2", n)
	}
	// A terminal state reported again (a redelivered finalize) frees nothing more.
	for range 3 {
		if err := rt.App.Engine.FinalizeBatch(ctx, "acme", b1.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := inflight(); n != 2 {
		t.Fatalf("after duplicate terminal reports: %d in flight, want 2", n)
	}
	for _, id := range []string{b3.ID, decodeBatch(t, first).ID} {
		if _, err := c.Batches.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		waitBatch(t, c, id)
	}
	eventually(t, "slots given back", 10*time.Second, func() bool { return inflight() == 0 })

	// Slots left behind by crashes: one of a create that never recorded
	// its batch, one of a batch that ended without giving its slot back.
	// The next create at the limit recovers both.
	if err := rt.App.Store.ReserveInflight(ctx, "acme", "batch_neverrecorded", max, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := rt.App.Store.ReserveInflight(ctx, "acme", b1.ID, max, time.Now()); err != nil {
		t.Fatal(err)
	}
	status, _, body = post(key, fast.ID)
	if status != 200 {
		t.Fatalf("create with only left-behind slots taken: got %d %s, want 200", status, body)
	}
	waitBatch(t, c, decodeBatch(t, body).ID)
	eventually(t, "slots given back", 10*time.Second, func() bool { return inflight() == 0 })
	if ms, err := rt.App.Store.InflightMarkers(ctx, "acme"); err != nil || len(ms) != 0 {
		t.Fatalf("markers left: %+v, %v", ms, err)
	}
}

// uploadInParts uploads data with the Uploads API in parts of 4 MiB.
func uploadInParts(t *testing.T, c openai.Client, name string, data []byte) string {
	t.Helper()
	ctx := context.Background()
	u, err := c.Uploads.New(ctx, openai.UploadNewParams{Bytes: int64(len(data)), Filename: name, MimeType: "application/jsonl", Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for off := 0; off < len(data); off += 4 << 20 {
		p, err := c.Uploads.Parts.New(ctx, u.ID, openai.UploadPartNewParams{Data: bytes.NewReader(data[off:min(off+4<<20, len(data))])})
		if err != nil {
			t.Fatalf("part at %d: %v", off, err)
		}
		parts = append(parts, p.ID)
	}
	done, err := c.Uploads.Complete(ctx, u.ID, openai.UploadCompleteParams{PartIDs: parts})
	if err != nil {
		t.Fatal(err)
	}
	return done.File.ID
}

// TestAbuseInputFiles: what only reading the input can find fails the
// batch with the rule and the line, without a row run; what is merely
// unusual (BOM, CRLF) is read correctly; nothing is decompressed or
// amplified.
func TestAbuseInputFiles(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")

	valid := func(id string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`, id)
	}
	var manyRows bytes.Buffer
	for i := range 50_001 {
		fmt.Fprintf(&manyRows, `{"custom_id":"%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"}}`+"\n", i)
	}
	longLine := append([]byte(`{"custom_id":"long","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","x":"`), bytes.Repeat([]byte("A"), 10<<20)...)
	longLine = append(longLine, "\"}}\n"+valid("after")+"\n"...)

	type failure struct {
		code string
		line int64
		msg  string
	}
	tests := []struct {
		name, filename string
		data           []byte
		parts          bool   // upload with the Uploads API
		model          string // CSV
		want           *failure
		rows           int // for a valid input: rows completed
	}{
		{"50,001 rows", "many.jsonl", manyRows.Bytes(), true, "", &failure{"too_many_rows", 50_001, "more than 50000 requests"}, 0},
		{"a line over 10 MB", "long.jsonl", longLine, true, "", &failure{"line_too_long", 1, "longer than 10485760 bytes"}, 0},
		{"invalid UTF-8 in JSONL", "bad.jsonl", []byte(valid("a") + "\n" + `{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","x":"` + "\xff\xfe" + `"}}` + "\n"), false, "", &failure{"invalid_utf8", 2, "not valid UTF-8"}, 0},
		{"invalid UTF-8 in CSV", "bad.csv", []byte("prompt\nhello\nbad \xc3\x28 byte\n"), false, "gpt-4o-mini", &failure{"invalid_utf8", 3, "UTF-8"}, 0},
		{"a NUL byte in JSONL", "nul.jsonl", []byte(valid("a") + "\n\x00\n"), false, "", &failure{"invalid_json", 2, "line 2"}, 0},
		{"BOM and CRLF in JSONL", "bom.jsonl", []byte("\xef\xbb\xbf" + valid("a") + "\r\n\r\n" + valid("b") + "\r\n"), false, "", nil, 2},
		{"BOM and CRLF in CSV", "bom.csv", []byte("\xef\xbb\xbfcustom_id,prompt\r\na,hello\r\nb,\"two\r\nlines\"\r\n"), false, "gpt-4o-mini", nil, 2},
		// One byte repeated over a whole part: just data, kept as sent and
		// refused as a line of no JSON.
		{"4 MiB of one byte", "bomb.jsonl", bytes.Repeat([]byte("A"), 4<<20), false, "", &failure{"invalid_json", 1, "line 1"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var fileID string
			if tt.parts {
				fileID = uploadInParts(t, c, tt.filename, tt.data)
			} else {
				fileID = upload(t, c, tt.filename, tt.data).ID
			}
			body := map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions"}
			if tt.model != "" {
				body["model"] = tt.model
			}
			status, out := postBatch(t, rt, key, body)
			if status != 200 {
				t.Fatalf("create: %d %s", status, out)
			}
			b := waitBatch(t, c, decodeBatch(t, out).ID)
			if tt.want == nil {
				if b.Status != "completed" || b.RequestCounts.Completed != int64(tt.rows) {
					t.Fatalf("got %s with %+v, want completed with %d rows", b.Status, b.RequestCounts, tt.rows)
				}
				return
			}
			if b.Status != "failed" || len(b.Errors.Data) == 0 {
				t.Fatalf("got %s %+v, want failed with %s", b.Status, b.Errors, tt.want.code)
			}
			e := b.Errors.Data[0]
			if e.Code != tt.want.code || e.Line != tt.want.line || !strings.Contains(e.Message, tt.want.msg) {
				t.Fatalf("got error %+v, want %s on line %d containing %q", e, tt.want.code, tt.want.line, tt.want.msg)
			}
			if b.RequestCounts.Completed+b.RequestCounts.Failed != 0 {
				t.Fatalf("an invalid input ran rows: %+v", b.RequestCounts)
			}
		})
	}

	// A gzip bomb sent with Content-Encoding: gzip is stored as the bytes
	// sent, served back as those bytes, and never inflated.
	t.Run("gzip bomb", func(t *testing.T) {
		t.Parallel()
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		zw.Write(make([]byte, 64<<20))
		zw.Close()
		body, ctype := multipartFile(`form-data; name="file"; filename="bomb.jsonl"`, gz.Bytes())
		req, _ := http.NewRequest("POST", rt.URL+"/v1/files", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var f openai.FileObject
		if resp.StatusCode != 200 || json.Unmarshal(out, &f) != nil || f.Bytes != int64(gz.Len()) {
			t.Fatalf("upload: got %d %s, want the %d bytes sent stored as they are", resp.StatusCode, out, gz.Len())
		}
		if got := content(t, c, f.ID); sha256.Sum256(got) != sha256.Sum256(gz.Bytes()) {
			t.Fatalf("content: got %d bytes, want the %d sent", len(got), gz.Len())
		}
		b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
		if b.Status != "failed" || len(b.Errors.Data) == 0 || b.Errors.Data[0].Line != 1 {
			t.Fatalf("got %s %+v, want failed on line 1", b.Status, b.Errors)
		}
	})
}

// logBuffer is an io.Writer for slog that many goroutines share.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAbuseKeyNeverLogged: with every log line captured at debug level,
// through successes, client errors, a rate limit, a disabled key and an
// internal error in the key lookup itself, no key and no key hash is ever
// written (the key id, 12 hex digits of the hash, is the public name).
func TestAbuseKeyNeverLogged(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt := runtime(t, func(o *localrun.Options) {
		o.Log = log
		o.Env.RateLimit = 20
		o.Env.MaxInflight = 10
	})
	ctx := context.Background()
	c, key := client(t, rt, "acme")
	disabled, err := rt.Key(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{key, disabled, key[:len(key)-1] + "x", "rb-not-a-key"}

	f := upload(t, c, "in.jsonl", jsonlRows(nRows(3, "hello [[mock:500]]")))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	content(t, c, f.ID)
	limitReq(t, rt, key, "GET", "/v1/batches/batch_nope", "", nil)
	limitReq(t, rt, key, "POST", "/v1/batches", "application/json", []byte(`{"input_file_id":`))
	var wg sync.WaitGroup
	limited := 0
	var mu sync.Mutex
	for range 40 {
		wg.Go(func() {
			if status, _, _ := limitReq(t, rt, key, "GET", "/v1/batches/"+b.ID, "", nil); status == http.StatusTooManyRequests {
				mu.Lock()
				limited++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if limited == 0 {
		t.Error("40 requests at once: none rate limited")
	}
	if err := rt.App.Store.DisableKey(ctx, disabled); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys[1:] {
		if status, _, _ := limitReq(t, rt, k, "GET", "/v1/files", "", nil); status != 401 {
			t.Errorf("key %q: got %d, want 401", k[:6], status)
		}
	}
	// The key lookup fails inside DynamoDB (no such table): a 500 whose
	// detail is logged, naming the key by its id only. (The last key is
	// malformed: refused before any lookup.)
	broken := (&api.API{Auth: auth.Authenticator{Store: store.New(rt.App.DB, "no-such-table-"+rt.App.Env.Table)}, Log: log}).Handler()
	for _, k := range keys[:len(keys)-1] {
		r := httptest.NewRequest("GET", "/v1/files", nil)
		r.Header.Set("Authorization", "Bearer "+k)
		w := httptest.NewRecorder()
		broken.ServeHTTP(w, r)
		if w.Code != 500 || strings.Contains(w.Body.String(), "table") {
			t.Fatalf("lookup failure: got %d %s, want a 500 with a request id only", w.Code, w.Body)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "request failed") || !strings.Contains(out, "get key "+apikey.Hash(key)[:12]) {
		t.Fatalf("the internal error was not logged with the key id; logs:\n%s", out)
	}
	for _, k := range keys {
		if strings.Contains(out, k) || strings.Contains(out, apikey.Hash(k)) || strings.Contains(out, strings.TrimPrefix(k, "rb-")) {
			t.Errorf("the logs hold key %q or its hash", k[:6]+"…")
		}
	}
}

// objectKeyRE is the shape of every object key: a kind, then the tenant.
var objectKeyRE = regexp.MustCompile(`^(files|uploads|parts)/([A-Za-z0-9_-]+)/`)

// TestAbuseStorageKeysCarryTenant: after two tenants use every kind of
// object (files, uploads, presigned files, batches, inline, CSV, retries,
// Anthropic batches, templates, usage, rate and in-flight counters), every
// item in the table and every object in the bucket is attributed to one
// tenant by its key: T#<tenant>, USAGE#<tenant>, USAGEBY#<tenant>, an S3 prefix
// <kind>/<tenant>/, or a batch id (B#<batch>) that exactly one tenant's
// records hold. Key records carry their tenant; the capacity counters are
// shared and hold no tenant data. Anything else fails the test.
func TestAbuseStorageKeysCarryTenant(t *testing.T) {
	t.Parallel()
	rt := runtime(t, func(o *localrun.Options) {
		o.Env.RateLimit = 1000
		o.Env.MaxInflight = 100
	})
	ctx := context.Background()
	tenants := []string{"acme", "globex"}
	var wg sync.WaitGroup
	keyIDs := map[string]string{}
	var mu sync.Mutex
	for _, tenant := range tenants {
		c, key := client(t, rt, tenant)
		mu.Lock()
		keyIDs[apikey.Hash(key)[:12]] = tenant
		mu.Unlock()
		wg.Go(func() {
			f := upload(t, c, "in.jsonl", jsonlRows(append(nRows(2, "ok"), row{id: "bad", content: "[[mock:400]]"})))
			b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
			if _, err := c.Batches.Cancel(ctx, createBatch(t, c, f.ID).ID); err != nil {
				t.Errorf("%s: cancel: %v", tenant, err)
			}
			if status, body := rawDo(t, rt, key, "POST", "/v1/batches/"+b.ID+"/retry", nil); status != 200 {
				t.Errorf("%s: retry: %d %s", tenant, status, body)
			}
			uploadInParts(t, c, "parts.jsonl", jsonlRows(nRows(2, "parts")))
			csv := upload(t, c, "in.csv", []byte("prompt\nhello\n"))
			postBatch(t, rt, key, map[string]any{"input_file_id": csv.ID, "endpoint": "/v1/chat/completions", "model": "gpt-4o-mini"})
			postBatch(t, rt, key, map[string]any{"endpoint": "/v1/chat/completions", "requests": []any{map[string]any{"method": "POST", "url": "/v1/chat/completions", "body": map[string]any{"model": "gpt-4o-mini"}}}})
			_, _, pres := limitReq(t, rt, key, "POST", "/v1/files", "application/json", jsonBody(map[string]any{"filename": "p.jsonl", "purpose": "batch", "bytes": 5}))
			var pf struct {
				UploadURL string `json:"upload_url"`
			}
			if json.Unmarshal(pres, &pf) == nil && pf.UploadURL != "" {
				req, _ := http.NewRequest("PUT", pf.UploadURL, strings.NewReader("12345"))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			limitReq(t, rt, key, "POST", "/v1/messages/batches", "application/json", []byte(
				`{"requests":[{"custom_id":"a","params":{"model":"claude-haiku-4-5","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}}]}`))
			postBatch(t, rt, key, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "schedule": "0 0 1 1 *"})
			u, err := c.Uploads.New(ctx, openai.UploadNewParams{Bytes: 10, Filename: "pending.jsonl", MimeType: "application/jsonl", Purpose: openai.FilePurposeBatch})
			if err == nil {
				c.Uploads.Parts.New(ctx, u.ID, openai.UploadPartNewParams{Data: strings.NewReader("12345")})
			}
		})
	}
	wg.Wait()
	// Let what was started finish, so its parts and outputs exist too.
	for _, tenant := range tenants {
		eventually(t, tenant+"'s batches ending", 2*time.Minute, func() bool {
			n, err := rt.App.Store.Inflight(ctx, tenant)
			return err == nil && n == 0
		})
	}

	// The table.
	type it = map[string]types.AttributeValue
	var items []it
	in := &dynamodb.ScanInput{TableName: &rt.App.Env.Table}
	for {
		out, err := rt.App.DB.Scan(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, out.Items...)
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	str := func(i it, name string) string {
		var s string
		_ = attributevalue.Unmarshal(i[name], &s)
		return s
	}
	known := map[string]bool{"acme": true, "globex": true}
	batchOwner := map[string]string{}
	for _, i := range items {
		pk, sk := str(i, "pk"), str(i, "sk")
		if tn, ok := strings.CutPrefix(pk, "T#"); ok && strings.HasPrefix(sk, "BATCH#") {
			batchOwner[strings.TrimPrefix(sk, "BATCH#")] = tn
		}
	}
	perTenant := map[string]int{}
	for _, i := range items {
		pk, sk := str(i, "pk"), str(i, "sk")
		owner := ""
		switch {
		case strings.HasPrefix(pk, "T#"):
			owner = strings.TrimPrefix(pk, "T#")
		case strings.HasPrefix(pk, "USAGE#"):
			owner = strings.TrimPrefix(pk, "USAGE#")
		case strings.HasPrefix(pk, "USAGEBY#"):
			owner = strings.TrimPrefix(pk, "USAGEBY#")
		case strings.HasPrefix(pk, "B#"):
			owner = batchOwner[strings.TrimPrefix(pk, "B#")]
		case strings.HasPrefix(pk, "RL#"):
			owner = keyIDs[strings.TrimPrefix(pk, "RL#")]
		case strings.HasPrefix(pk, "KEY#") || pk == "KEYS":
			owner = str(i, "tenant")
		case strings.HasPrefix(pk, "READY#"):
			owner = batchOwner[str(i, "batch")] // an entry names its batch
		case strings.HasPrefix(pk, "LS#") || strings.HasPrefix(pk, "RB#") || strings.HasPrefix(pk, "KS#"):
			// A model's keys: their limiter states, rate budgets and drops
			// (docs/design.md "Rate budgets") are the service's, no tenant's.
			for _, name := range []string{"tenant", "batch", "key_id"} {
				if _, ok := i[name]; ok {
					t.Errorf("key item %s/%s holds %q: shared items must hold no tenant data", pk, sk, name)
				}
			}
			continue
		case strings.HasPrefix(pk, "MODEL#") && strings.HasPrefix(sk, "CAP#"):
			for name := range i {
				if name != "pk" && name != "sk" && name != "inflight" {
					t.Errorf("capacity item %s/%s holds %q: shared items must hold no tenant data", pk, sk, name)
				}
			}
			continue
		}
		if !known[owner] {
			t.Errorf("item %s/%s is not attributed to a tenant by its key (got %q)", pk, sk, owner)
			continue
		}
		perTenant[owner]++
		if tn := str(i, "tenant"); tn != "" && tn != owner {
			t.Errorf("item %s/%s of %s says tenant %s", pk, sk, owner, tn)
		}
		// Objects a record points at sit under its tenant's prefixes.
		var refs struct {
			Objects []string `dynamodbav:"objects"`
			Input   []struct {
				Key string `dynamodbav:"k"`
			} `dynamodbav:"input"`
		}
		_ = attributevalue.UnmarshalMap(i, &refs)
		for _, o := range refs.Input {
			refs.Objects = append(refs.Objects, o.Key)
		}
		for _, k := range refs.Objects {
			if m := objectKeyRE.FindStringSubmatch(k); m == nil || m[2] != owner {
				t.Errorf("item %s/%s of %s points at object %s outside its prefixes", pk, sk, owner, k)
			}
		}
	}

	// The bucket.
	objs, err := rt.App.Blobs.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	perTenantObjs := map[string]int{}
	for _, k := range objs {
		if strings.HasPrefix(k, "audit/") {
			continue // the service's audit trail: its entries name their tenant (docs/runbook.md "Audit trail")
		}
		m := objectKeyRE.FindStringSubmatch(k)
		if m == nil || !known[m[2]] {
			t.Errorf("object %s is not under files/, uploads/ or parts/ of a tenant", k)
			continue
		}
		perTenantObjs[m[2]]++
	}
	for _, tenant := range tenants {
		if perTenant[tenant] < 10 || perTenantObjs[tenant] < 5 {
			t.Errorf("%s: %d items, %d objects; the activity should have made more", tenant, perTenant[tenant], perTenantObjs[tenant])
		}
	}
	t.Logf("items per tenant %v, objects per tenant %v, %d items, %d objects", perTenant, perTenantObjs, len(items), len(objs))
}
