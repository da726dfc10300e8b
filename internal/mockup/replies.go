package mockup

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// object is a JSON object; encoding/json sorts its keys, so the same
// answer always has the same bytes.
type object = map[string]any

// created is the timestamp of every answer: fixed, because a clock would
// make two identical requests differ (2025-01-01T00:00:00Z).
const created = 1735689600

// embeddingSize is small on purpose: the vectors only have to be stable
// and distinct, not useful.
const embeddingSize = 8

func chatCompletion(req *request) object {
	var p prompt
	p.addMessages(req.body["messages"])
	if call := nextToolCall(req.body); call != nil {
		return object{
			"id": "chatcmpl-" + req.id(), "object": "chat.completion", "created": created, "model": req.model,
			"choices": []object{{
				"index":         0,
				"message":       object{"role": "assistant", "content": nil, "refusal": nil, "tool_calls": []object{call}},
				"logprobs":      nil,
				"finish_reason": "tool_calls",
			}},
			"usage":              openAIUsage(p.tokens, 1),
			"system_fingerprint": "fp_mockup",
			"service_tier":       "default",
		}
	}
	reply, replyWords := p.echo()
	return object{
		"id":      "chatcmpl-" + req.id(),
		"object":  "chat.completion",
		"created": created,
		"model":   req.model,
		"choices": []object{{
			"index":         0,
			"message":       object{"role": "assistant", "content": reply, "refusal": nil, "annotations": []any{}},
			"logprobs":      nil,
			"finish_reason": "stop",
		}},
		"usage":              openAIUsage(p.tokens, replyWords),
		"system_fingerprint": "fp_mockup",
		"service_tier":       "default",
	}
}

func completion(req *request) object {
	prompts := inputs(req.body["prompt"])
	if len(prompts) == 0 {
		prompts = []input{{}}
	}
	// Like OpenAI, one choice per prompt.
	choices := make([]object, len(prompts))
	promptTokens, completionTokens := 0, 0
	for i, in := range prompts {
		text := "echo: " + in.text
		choices[i] = object{"text": text, "index": i, "logprobs": nil, "finish_reason": "stop"}
		promptTokens += in.tokens
		completionTokens += words(text)
	}
	return object{
		"id":      "cmpl-" + req.id(),
		"object":  "text_completion",
		"created": created,
		"model":   req.model,
		"choices": choices,
		"usage":   openAIUsage(promptTokens, completionTokens),
	}
}

// openAIUsage reports half the prompt as cached and half the completion
// as reasoning, so that the details have something to add up.
func openAIUsage(prompt, completion int) object {
	return object{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
		"prompt_tokens_details":     object{"cached_tokens": prompt / 2},
		"completion_tokens_details": object{"reasoning_tokens": completion / 2}}
}

func embeddings(req *request) object {
	asBase64 := req.body["encoding_format"] == "base64"
	ins := inputs(req.body["input"])
	data := make([]object, len(ins))
	tokens := 0
	for i, in := range ins {
		vec := vector(in.seed)
		var encoded any = vec
		if asBase64 {
			encoded = base64Vector(vec)
		}
		data[i] = object{"object": "embedding", "index": i, "embedding": encoded}
		tokens += in.tokens
	}
	return object{
		"object": "list",
		"data":   data,
		"model":  req.model,
		"usage":  object{"prompt_tokens": tokens, "total_tokens": tokens},
	}
}

// moderationCategories are the categories of OpenAI's moderation model;
// the mock flags nothing.
var moderationCategories = []string{
	"harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
	"self-harm", "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence", "violence/graphic",
}

func moderation(req *request) object {
	ins := inputs(req.body["input"])
	if list, ok := req.body["input"].([]any); ok && len(ins) == 0 {
		// Multimodal input: an array of {type: "text", text} and image parts.
		ins = []input{textInput(textOf(list))}
	}
	results := make([]object, len(ins))
	for i := range ins {
		flags, scores, types := object{}, object{}, object{}
		for _, c := range moderationCategories {
			flags[c], scores[c], types[c] = false, 0.0, []string{"text"}
		}
		results[i] = object{"flagged": false, "categories": flags, "category_scores": scores, "category_applied_input_types": types}
	}
	return object{"id": "modr-" + req.id(), "model": req.model, "results": results}
}

// imageTokens is what the mock counts for each image it makes.
const imageTokens = 16

func imageGeneration(req *request) object {
	prompt, _ := req.body["prompt"].(string)
	n := 1
	if v, ok := req.body["n"].(float64); ok && v >= 1 {
		n = int(v)
	}
	data := make([]object, n)
	for i := range data {
		sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s", i, prompt))
		data[i] = object{"b64_json": base64.StdEncoding.EncodeToString(sum[:])}
	}
	in, out := words(prompt), n*imageTokens
	return object{
		"created": created,
		"data":    data,
		"usage": object{
			"input_tokens":         in,
			"output_tokens":        out,
			"total_tokens":         in + out,
			"input_tokens_details": object{"text_tokens": in, "image_tokens": 0},
		},
	}
}

func response(req *request) object {
	var p prompt
	instructions, _ := req.body["instructions"].(string)
	p.addText(instructions)
	switch in := req.body["input"].(type) {
	case string:
		p.addMessage("user", in)
	case []any:
		p.addMessages(in)
	}
	reply, out := p.echo()
	return object{
		"id":         "resp_" + req.id(),
		"object":     "response",
		"created_at": created,
		"status":     "completed",
		"model":      req.model,
		"output": []object{{
			"type":    "message",
			"id":      "msg_" + req.id(),
			"status":  "completed",
			"role":    "assistant",
			"content": []object{{"type": "output_text", "text": reply, "annotations": []any{}}},
		}},
		"usage": object{
			"input_tokens":          p.tokens,
			"output_tokens":         out,
			"total_tokens":          p.tokens + out,
			"input_tokens_details":  object{"cached_tokens": 0},
			"output_tokens_details": object{"reasoning_tokens": 0},
		},
		"completed_at":        created,
		"error":               nil,
		"incomplete_details":  nil,
		"instructions":        req.body["instructions"],
		"metadata":            object{},
		"parallel_tool_calls": true,
		"temperature":         1.0,
		"tool_choice":         "auto",
		"tools":               []any{},
		"top_p":               1.0,
	}
}

func message(req *request) object {
	var p prompt
	p.addText(textOf(req.body["system"]))
	p.addMessages(req.body["messages"])
	reply, out := p.echo()
	return object{
		"id":            "msg_" + req.id(),
		"type":          "message",
		"role":          "assistant",
		"model":         req.model,
		"content":       []object{{"type": "text", "text": reply}},
		"stop_reason":   "end_turn",
		"stop_sequence": nil,
		"container":     nil,
		"usage": object{
			"input_tokens":                p.tokens,
			"output_tokens":               out,
			"cache_creation_input_tokens": 0,
			"cache_read_input_tokens":     0,
			"service_tier":                "standard",
		},
	}
}

// prompt accumulates what the usage and the echo need from a conversation.
type prompt struct {
	tokens        int
	lastUser      string
	lastUserWords int
}

// echo is the reply to the conversation, "echo: " and its last user
// message, and its words: "echo:" and those of the message, which the
// space after "echo:" keeps apart.
func (p *prompt) echo() (string, int) { return "echo: " + p.lastUser, 1 + p.lastUserWords }

func (p *prompt) addText(s string) { p.tokens += words(s) }

func (p *prompt) addMessage(role string, content any) {
	text := textOf(content)
	n := words(text)
	p.tokens += n + 1
	if role == "user" {
		p.lastUser, p.lastUserWords = text, n
	}
}

func (p *prompt) addMessages(v any) {
	list, _ := v.([]any)
	for _, m := range list {
		msg, _ := m.(map[string]any)
		role, _ := msg["role"].(string)
		p.addMessage(role, msg["content"])
	}
}

// textOf reads message content given either as a string or as an array of
// parts, which OpenAI and Anthropic both allow; non-text parts are skipped.
func textOf(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var texts []string
		for _, part := range c {
			p, _ := part.(map[string]any)
			if t, ok := p["text"].(string); ok {
				texts = append(texts, t)
			}
		}
		return strings.Join(texts, " ")
	}
	return ""
}

// words is the mock's token count: len(strings.Fields(s)), the runs of
// runes that are not unicode.IsSpace, counted without building them.
func words(s string) int {
	n, inWord := 0, false
	for i := 0; i < len(s); {
		space, size := asciiSpace[s[i]], 1
		if s[i] >= utf8.RuneSelf {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:]) // RuneError on invalid UTF-8, as a range over s
			space = unicode.IsSpace(r)
		}
		if !space && !inWord {
			n++
		}
		inWord, i = !space, i+size
	}
	return n
}

// asciiSpace are the ASCII runes unicode.IsSpace reports, by byte.
var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// input is one embedding input or completion prompt.
type input struct {
	text   string
	tokens int
	seed   []byte // what the embedding vector derives from
}

// inputs reads the forms OpenAI accepts for input and prompt: a string, an
// array of strings, an array of tokens, or an array of token arrays.
func inputs(v any) []input {
	switch x := v.(type) {
	case string:
		return []input{textInput(x)}
	case []any:
		if isTokens(x) {
			return []input{tokenInput(x)}
		}
		var out []input
		for _, e := range x {
			switch e := e.(type) {
			case string:
				out = append(out, textInput(e))
			case []any:
				out = append(out, tokenInput(e))
			}
		}
		return out
	}
	return nil
}

func textInput(s string) input { return input{text: s, tokens: words(s), seed: []byte(s)} }

func tokenInput(tokens []any) input {
	seed, _ := json.Marshal(tokens)
	return input{tokens: len(tokens), seed: seed}
}

func isTokens(x []any) bool {
	for _, e := range x {
		if _, ok := e.(float64); !ok {
			return false
		}
	}
	return len(x) > 0
}

// vector derives a unit-length vector from the sha256 of seed. It is
// float32 so that the float and base64 encodings carry the same numbers.
func vector(seed []byte) []float32 {
	sum := sha256.Sum256(seed)
	raw := make([]float64, embeddingSize)
	var norm float64
	for i := range raw {
		raw[i] = float64(binary.BigEndian.Uint32(sum[4*i:]))/math.MaxUint32*2 - 1
		norm += raw[i] * raw[i]
	}
	norm = math.Sqrt(norm)
	vec := make([]float32, embeddingSize)
	for i, x := range raw {
		vec[i] = float32(x / norm)
	}
	return vec
}

// base64Vector is OpenAI's encoding_format "base64": little-endian float32s.
func base64Vector(vec []float32) string {
	b := make([]byte, 0, 4*len(vec))
	for _, x := range vec {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// nextToolCall is the tool call a chat completion with tools answers: each
// function of "tools" in turn, one a round, until the conversation holds
// as many tool messages as there are tools; then nil, and the usual echo.
func nextToolCall(body map[string]any) object {
	tools, _ := body["tools"].([]any)
	msgs, _ := body["messages"].([]any)
	answered := 0
	for _, m := range msgs {
		if msg, _ := m.(map[string]any); msg["role"] == "tool" {
			answered++
		}
	}
	if answered >= len(tools) {
		return nil
	}
	tool, _ := tools[answered].(map[string]any)
	fn, _ := tool["function"].(map[string]any)
	name, _ := fn["name"].(string)
	return object{"id": fmt.Sprintf("call_%d", answered+1), "type": "function",
		"function": object{"name": name, "arguments": fmt.Sprintf(`{"round":%d}`, answered+1)}}
}
