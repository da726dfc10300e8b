package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/webhook"
)

// toolModel answers with a tool call while the conversation has fewer
// tool messages than calls, then with text; every round costs 10+2.
func toolModel(calls int, sent *[]string) func(context.Context, json.RawMessage) inference.Result {
	return func(_ context.Context, body json.RawMessage) inference.Result {
		*sent = append(*sent, string(body))
		n := 0
		for _, m := range gjson.GetBytes(body, "messages").Array() {
			if m.Get("role").Str == "tool" {
				n++
			}
		}
		msg := `{"role":"assistant","content":"done"}`
		if n < calls {
			msg = fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"f","arguments":"{}"}}]}`, n+1)
		}
		return inference.Result{StatusCode: 200, Model: "m", Attempts: 1, Body: json.RawMessage(`{"choices":[{"message":` + msg + `}]}`),
			Usage: inference.Usage{InputTokens: 10, OutputTokens: 2, TotalTokens: 12}}
	}
}

func TestRunTools(t *testing.T) {
	t.Parallel()
	body := json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"go"}]}`)
	answer := func(_ context.Context, _ *Tools, call json.RawMessage) (string, error) {
		return "result of " + gjson.GetBytes(call, "id").Str, nil
	}
	t.Run("rounds until the model answers", func(t *testing.T) {
		t.Parallel()
		var sent []string
		res := RunTools(context.Background(), body, &Tools{MaxRounds: 8}, toolModel(2, &sent), answer)
		if len(sent) != 3 || res.StatusCode != 200 || res.Attempts != 3 || res.Usage.TotalTokens != 36 || res.Usage.InputTokens != 30 {
			t.Fatalf("sent %d, got %+v; want 3 rounds summed", len(sent), res)
		}
		last := gjson.Get(sent[2], "messages")
		if n := len(last.Array()); n != 5 || last.Get("4.role").Str != "tool" || last.Get("4.tool_call_id").Str != "call_2" ||
			last.Get("4.content").Str != "result of call_2" || last.Get("3.tool_calls.0.id").Str != "call_2" {
			t.Fatalf("the last round's messages: %s", last.Raw)
		}
	})
	t.Run("max_rounds ends it", func(t *testing.T) {
		t.Parallel()
		var sent []string
		res := RunTools(context.Background(), body, &Tools{MaxRounds: 1}, toolModel(5, &sent), answer)
		if len(sent) != 2 || !gjson.GetBytes(res.Body, "choices.0.message.tool_calls").Exists() || res.Usage.TotalTokens != 24 {
			t.Fatalf("sent %d, got %+v; want one tool round, then the answer as it is", len(sent), res)
		}
	})
	t.Run("a failed tool call", func(t *testing.T) {
		t.Parallel()
		var sent []string
		broken := func(context.Context, *Tools, json.RawMessage) (string, error) {
			return "", errors.New("the tool endpoint answered 500")
		}
		res := RunTools(context.Background(), body, &Tools{MaxRounds: 8}, toolModel(2, &sent), broken)
		if len(sent) != 1 || res.ErrCode != CodeToolCallFailed || !strings.Contains(res.ErrMessage, "500") || res.Usage.TotalTokens != 12 {
			t.Fatalf("sent %d, got %+v; want tool_call_failed with the first round's usage", len(sent), res)
		}
		if r := resultOf(Request{ID: "x"}, res); r.StatusCode != 502 || r.Usage.InputTokens != 10 {
			t.Fatalf("the callback's result: %+v, want 502 with the usage", r)
		}
	})
}

// A tool endpoint answering near its 10 MiB cap every round grew the
// conversation without bound (rounds × calls × 10 MiB, per slot); the
// conversation a round sends is capped at MaxAnswer.
func TestRunToolsBoundsTheConversation(t *testing.T) {
	t.Parallel()
	body := json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"go"}]}`)
	big := strings.Repeat("x", 3<<20)
	answer := func(context.Context, *Tools, json.RawMessage) (string, error) { return big, nil }
	var sent []string
	res := RunTools(context.Background(), body, &Tools{MaxRounds: 32}, toolModel(32, &sent), answer)
	for i, s := range sent {
		if len(s) > MaxAnswer {
			t.Fatalf("round %d sent %d bytes, more than %d", i+1, len(s), MaxAnswer)
		}
	}
	if res.ErrCode != CodeToolCallFailed || !strings.Contains(res.ErrMessage, "larger than") || res.Usage.TotalTokens != int64(12*len(sent)) {
		t.Fatalf("sent %d, got %+v; want tool_call_failed naming the size, with the rounds' usage", len(sent), res)
	}
}

// A tool endpoint at an address the policy refuses is refused at dial
// time, before any request, and the error names tool calls; so does the
// 400 of a tool_config whose URL names such an address.
func TestToolCallRefusedAddress(t *testing.T) {
	t.Parallel()
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls++ }))
	defer srv.Close()
	client := webhook.NewClient(egress.Policy{AllowHTTP: true}).HTTP
	_, err := CallTool(context.Background(), client, &Tools{URL: srv.URL, Authorization: "a"}, json.RawMessage(`{"id":"c"}`))
	if err == nil || !strings.Contains(err.Error(), "loopback address; tool calls only go to public addresses") || calls != 0 {
		t.Fatalf("got %v after %d requests, want a refusal naming tool calls", err, calls)
	}
	_, problem := parseTools([]byte(`{"relay":{"tool_config":{"url":"https://10.0.0.1/t","authorization":"a"}}}`), egress.Policy{})
	if !strings.Contains(problem, "relay.tool_config.url") || !strings.Contains(problem, "tool calls only go to public addresses") {
		t.Errorf("tool_config at a private address: %q", problem)
	}
}
