package quote

import (
	"encoding/json"
	"math"
	"strings"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
	"github.com/relaybatch/relay/internal/config"
)

// BytesPerToken is the bytes tokenizer's calibration: OpenAI's and
// Anthropic's guidance for English text is about four characters a token.
const BytesPerToken = 4.0

// Prompt is what a request sends as input: its texts (message contents,
// system, instructions, prompt, input) and its messages, each of which
// costs a few tokens of its own.
type Prompt struct {
	Texts    []string
	Messages int
	// Tokens are inputs given as token arrays (embeddings), counted as
	// they are.
	Tokens int
	// MaxTokens is the request's max_tokens (or max_completion_tokens,
	// max_output_tokens); 0 when it sets none.
	MaxTokens int64
}

// ParsePrompt reads the input of a request body in either API's shape, as
// the providers (and the mock, internal/mockup) read it.
func ParsePrompt(body []byte) Prompt {
	var b struct {
		Messages     []struct{ Content any } `json:"messages"`
		System       any                     `json:"system"`
		Instructions string                  `json:"instructions"`
		Prompt       any                     `json:"prompt"`
		Input        any                     `json:"input"`
		MaxTokens    int64                   `json:"max_tokens"`
		MaxCompl     int64                   `json:"max_completion_tokens"`
		MaxOutput    int64                   `json:"max_output_tokens"`
	}
	_ = json.Unmarshal(body, &b) // the scan validated the row
	p := Prompt{Messages: len(b.Messages), MaxTokens: max(b.MaxTokens, b.MaxCompl, b.MaxOutput)}
	for _, m := range b.Messages {
		p.Texts = append(p.Texts, textOf(m.Content))
	}
	if s := textOf(b.System); s != "" {
		p.Texts = append(p.Texts, s)
	}
	if b.Instructions != "" {
		p.Texts = append(p.Texts, b.Instructions)
	}
	p.inputs(b.Prompt)
	p.inputs(b.Input)
	return p
}

// inputs adds a prompt or input member: a string, an array of strings or
// token arrays, or (Responses API) an array of messages.
func (p *Prompt) inputs(v any) {
	switch x := v.(type) {
	case string:
		p.Texts = append(p.Texts, x)
	case []any:
		for _, e := range x {
			switch e := e.(type) {
			case string:
				p.Texts = append(p.Texts, e)
			case float64:
				p.Tokens++
			case []any:
				p.Tokens += len(e)
			case map[string]any:
				p.Messages++
				p.Texts = append(p.Texts, textOf(e["content"]))
			}
		}
	}
}

// textOf reads content given as a string or as an array of parts; parts
// other than text are skipped.
func textOf(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var texts []string
		for _, part := range c {
			if p, ok := part.(map[string]any); ok {
				if t, ok := p["text"].(string); ok {
					texts = append(texts, t)
				}
			}
		}
		return strings.Join(texts, " ")
	}
	return ""
}

// Count is p's input tokens by tokenizer t.
//
//   - words: the mock provider's count, whitespace-separated words plus
//     one a message (internal/mockup).
//   - o200k_base, cl100k_base: OpenAI's BPE over each text, plus the
//     chat format's three tokens a message and three for the reply's
//     priming (OpenAI's published counting recipe).
//   - bytes: the texts' bytes over BytesPerToken, plus three a message.
func Count(t config.Tokenizer, p Prompt) int64 {
	n := int64(p.Tokens)
	switch t {
	case config.TokensWords:
		for _, s := range p.Texts {
			n += int64(len(strings.Fields(s)))
		}
		return n + int64(p.Messages)
	case config.TokensO200k, config.TokensCl100k:
		enc := encoding(t)
		for _, s := range p.Texts {
			n += int64(len(enc.EncodeOrdinary(s)))
		}
	default:
		var bytes int
		for _, s := range p.Texts {
			bytes += len(s)
		}
		n += int64(math.Ceil(float64(bytes) / BytesPerToken))
	}
	if p.Messages > 0 {
		n += 3*int64(p.Messages) + 3
	}
	return n
}

var (
	encMu     sync.Mutex
	encodings = map[config.Tokenizer]*tiktoken.Tiktoken{}
)

// encoding loads BPE encoding t once, from the ranks embedded in the
// binary (tiktoken-go-loader): a quote never reaches the network.
func encoding(t config.Tokenizer) *tiktoken.Tiktoken {
	encMu.Lock()
	defer encMu.Unlock()
	if e, ok := encodings[t]; ok {
		return e
	}
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	e, err := tiktoken.GetEncoding(string(t))
	if err != nil {
		// The embedded ranks of a known encoding do not fail to load.
		panic("quote: load " + string(t) + ": " + err.Error())
	}
	encodings[t] = e
	return e
}
