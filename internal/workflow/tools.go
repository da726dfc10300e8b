package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/inference"
)

// Tools is a step request's relay.tool_config (docs/api.md "Workflow
// records"): the tool calls its model asks for are answered by the
// caller's HTTPS endpoint URL, under the callback's address policy and
// with Authorization, for at most MaxRounds rounds, all inside the
// request's one slot; the whole exchange is one request.
type Tools struct {
	URL           string
	Authorization string
	MaxRounds     int
}

// DefaultToolRounds and maxToolRounds bound a request's tool rounds.
const (
	DefaultToolRounds = 8
	maxToolRounds     = 32
	// toolTimeout bounds one call of the tool endpoint.
	toolTimeout = 60 * time.Second
)

// parseTools reads relay.tool_config of a step request's body; nil when it
// has none. A problem is a message for the request's 400.
func parseTools(body []byte, policy egress.Policy) (*Tools, string) {
	tc := gjson.GetBytes(body, "relay.tool_config")
	if !tc.Exists() {
		return nil, ""
	}
	if !tc.IsObject() {
		return nil, "relay.tool_config must be an object"
	}
	t := &Tools{MaxRounds: DefaultToolRounds}
	var bad string
	tc.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "url", "authorization":
			if v.Type != gjson.String {
				bad = "relay.tool_config." + k.Str + " must be a string"
			} else if k.Str == "url" {
				t.URL = v.Str
			} else {
				t.Authorization = v.Str
			}
		case "max_rounds":
			if n := v.Int(); v.Type != gjson.Number || float64(n) != v.Num || n < 1 || n > maxToolRounds {
				bad = fmt.Sprintf("relay.tool_config.max_rounds must be an integer from 1 to %d", maxToolRounds)
			} else {
				t.MaxRounds = int(n)
			}
		default:
			bad = fmt.Sprintf("relay.tool_config has no field %q (known: url, authorization, max_rounds)", k.Str)
		}
		return bad == ""
	})
	switch {
	case bad != "":
		return nil, bad
	case t.Authorization == "" || !validHeaderValue(t.Authorization):
		return nil, "relay.tool_config.authorization is required: a valid HTTP header value the tool endpoint checks"
	}
	if err := checkURL(t.URL, policy); err != nil {
		msg := replaceName(err.Message, "relay.workflow.url", "relay.tool_config.url")
		return nil, replaceName(msg, "workflow callbacks only go", "tool calls only go")
	}
	return t, ""
}

func replaceName(msg, from, to string) string {
	return string(bytes.ReplaceAll([]byte(msg), []byte(from), []byte(to)))
}

// RunTools runs one step request with its tool rounds: send the body
// upstream; while a 2xx answer asks for tool calls and rounds are left,
// answer each call with the tool endpoint (call) and send the
// conversation again. The result is the last answer, with the usage and
// attempts of every round summed: one request. The conversation is
// capped at MaxAnswer, as the step request was: the tool answers cannot
// grow it past that (rounds × calls × 10 MiB in one slot otherwise).
func RunTools(ctx context.Context, body json.RawMessage, t *Tools,
	send func(ctx context.Context, body json.RawMessage) inference.Result,
	call func(ctx context.Context, t *Tools, toolCall json.RawMessage) (string, error)) inference.Result {
	var sum inference.Usage
	attempts := 0
	for round := 1; ; round++ {
		res := send(ctx, body)
		sum = addUsage(sum, res.Usage)
		attempts += res.Attempts
		res.Usage, res.Attempts = sum, attempts
		msg := gjson.GetBytes(res.Body, "choices.0.message")
		calls := msg.Get("tool_calls")
		if !res.OK() || !calls.IsArray() || len(calls.Array()) == 0 || round > t.MaxRounds || ctx.Err() != nil {
			return res
		}
		next, err := sjson.SetRawBytes(bytes.Clone(body), "messages.-1", []byte(msg.Raw))
		for _, c := range calls.Array() {
			if err != nil {
				break
			}
			var content string
			if content, err = call(ctx, t, json.RawMessage(c.Raw)); err == nil {
				tm, _ := json.Marshal(map[string]string{"role": "tool", "tool_call_id": c.Get("id").Str, "content": content})
				next, err = sjson.SetRawBytes(next, "messages.-1", tm)
			}
			if err == nil && len(next) > MaxAnswer {
				err = fmt.Errorf("the conversation with the tool answers is larger than %d bytes", MaxAnswer)
			}
		}
		if err != nil {
			return inference.Result{Model: res.Model, Usage: sum, Attempts: attempts, ErrCode: CodeToolCallFailed,
				ErrMessage: fmt.Sprintf("tool round %d: %v", round, err)}
		}
		body = next
	}
}

// CodeToolCallFailed is a step request whose tool endpoint did not answer
// a tool call (a 502 to the callback).
const CodeToolCallFailed = "tool_call_failed"

func addUsage(a, b inference.Usage) inference.Usage {
	return inference.Usage{InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens,
		TotalTokens: a.TotalTokens + b.TotalTokens, CachedTokens: a.CachedTokens + b.CachedTokens, ReasoningTokens: a.ReasoningTokens + b.ReasoningTokens}
}

// CallTool POSTs one tool call, {"id","type","function":{"name","arguments"}}
// as the model gave it, to the tool endpoint with its Authorization, over
// client (the callback's, so its address policy), and returns the
// answer's body as the tool message's content: a JSON string's text, any
// other JSON as it is.
func CallTool(ctx context.Context, client *http.Client, t *Tools, toolCall json.RawMessage) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, t.URL, bytes.NewReader(toolCall))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Authorization", t.Authorization)
	resp, err := client.Do(req)
	var refused *egress.RefusedError
	switch {
	case errors.As(err, &refused):
		return "", fmt.Errorf("call the tool endpoint: its address is %s", refused.Explain("tool calls"))
	case err != nil:
		return "", fmt.Errorf("call the tool endpoint: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("read the tool endpoint's answer: %w", err)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return "", fmt.Errorf("the tool endpoint answered %s", resp.Status)
	case len(data) > MaxAnswer:
		return "", errors.New("the tool endpoint's answer is larger than 10 MiB")
	}
	if s := gjson.ParseBytes(data); s.Type == gjson.String {
		return s.Str, nil
	}
	return string(bytes.TrimSpace(data)), nil
}
