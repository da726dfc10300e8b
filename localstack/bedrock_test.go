package localstack

import (
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/relaybatch/relay/internal/local/localrun"
)

// bedrockModels are Bedrock models whose runtime endpoint is the mock,
// signed for with the runtime's AWS credentials (no api_key_env).
const bedrockModels = `
models:
  - {name: gpt-oss, provider: bedrock, shape: openai, region: us-east-1, base_url: http://MOCK, upstream_model: "openai.gpt-oss-120b-1:0", max_concurrency: 8, timeout: 5s}
  - {name: claude-bedrock, provider: bedrock, shape: anthropic, region: us-east-1, base_url: http://MOCK, upstream_model: "anthropic.claude-haiku-4-5-20251001-v1:0", max_concurrency: 8, timeout: 5s}
`

func withBedrockModels(t *testing.T) func(*localrun.Options) { return withModels(t, bedrockModels) }

// A batch of chat rows and a message batch of Claude requests run on
// Bedrock models: every request signed (the mock refuses others), usage
// counted, throttled requests retried.
func TestBedrockBatches(t *testing.T) {
	t.Parallel()
	var mockAddr string
	rt := runtime(t, withBedrockModels(t), func(o *localrun.Options) { mockAddr = o.MockAddr })

	// Unsigned, the mock's Bedrock endpoint refuses the request.
	req, _ := http.NewRequest(http.MethodPost, "http://"+mockAddr+"/openai/v1/chat/completions", strings.NewReader(`{"model":"x","messages":[]}`))
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned request: got %v %v, want 403", res, err)
	}

	c, _ := client(t, rt, "bedrock")
	rows := nRows(6, "bedrock chat")
	for i := range rows {
		rows[i].model = "gpt-oss"
	}
	rows[0].content = "[[mock:429x=2]] throttled chat"
	f := upload(t, c, "bedrock.jsonl", jsonlRows(rows))
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != "completed" || b.RequestCounts.Completed != int64(len(rows)) {
		t.Fatalf("chat batch %s with counts %+v, want completed with %d rows", b.Status, b.RequestCounts, len(rows))
	}
	out, _ := checkInvariant(t, c, b, idsOf(rows))
	for id, l := range out {
		if l.Response == nil || l.Response.StatusCode != 200 || !strings.Contains(string(l.Response.Body), `"model":"openai.gpt-oss-120b-1:0"`) {
			t.Errorf("row %s: got %+v, want a 200 from the Bedrock model", id, l.Response)
		}
	}
	if b.Usage.InputTokens == 0 || b.Usage.OutputTokens == 0 || b.Usage.TotalTokens != b.Usage.InputTokens+b.Usage.OutputTokens {
		t.Errorf("chat batch usage %+v, want tokens counted", b.Usage)
	}

	ac, _ := anthropicClient(t, rt, "bedrock")
	reqs := []anthropic.MessageBatchNewParamsRequest{
		msgRequest("m0", "claude-bedrock", "[[mock:429x=1]] throttled claude"),
		msgRequest("m1", "claude-bedrock", "hello claude one"),
		msgRequest("m2", "claude-bedrock", "hello claude two"),
	}
	mb := waitEnded(t, ac, newMessageBatch(t, ac, reqs...).ID)
	results := messageResults(t, ac, mb, []string{"m0", "m1", "m2"})
	for id, r := range results {
		msg := r.Result.Message
		if r.Result.Type != "succeeded" || msg.Model != "anthropic.claude-haiku-4-5-20251001-v1:0" || msg.Usage.InputTokens == 0 || msg.Usage.OutputTokens == 0 {
			t.Errorf("request %s: got %s", id, r.RawJSON())
		}
	}

	st := rt.Mock.Stats()
	if got := st.ByPath["/openai/v1/chat/completions"]; got != int64(len(rows))+2+1 {
		t.Errorf("chat requests at the mock: %d, want %d rows, 2 throttled retries and the unsigned one", got, len(rows))
	}
	if got := st.ByPath["/model/anthropic.claude-haiku-4-5-20251001-v1:0/invoke"]; got != int64(len(reqs))+1 {
		t.Errorf("InvokeModel requests at the mock: %d, want %d and 1 throttled retry", got, len(reqs))
	}
	if st.ByStatus[http.StatusTooManyRequests] != 3 || st.ByStatus[http.StatusForbidden] != 1 {
		t.Errorf("statuses at the mock %v, want 3 throttled and only the unsigned request refused", st.ByStatus)
	}
}
