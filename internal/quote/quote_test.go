package quote

import (
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/config"
)

func TestCount(t *testing.T) {
	t.Parallel()
	chat := ParsePrompt([]byte(`{"model":"m","max_tokens":50,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello  there world"},{"type":"image_url"}]}]}`))
	if chat.MaxTokens != 50 || chat.Messages != 2 {
		t.Fatalf("prompt %+v, want max_tokens 50 and 2 messages", chat)
	}
	tests := []struct {
		name string
		tok  config.Tokenizer
		p    Prompt
		want int64
	}{
		// The mock's count: 5 words and one a message.
		{"words", config.TokensWords, chat, 7},
		// o200k_base: "be brief" 2, "hello  there world" 4, and 3 a message + 3.
		{"o200k", config.TokensO200k, chat, 15},
		{"cl100k", config.TokensCl100k, Prompt{Texts: []string{"hello world"}}, 2},
		// 26 bytes over 4, rounded up, and 3 a message + 3.
		{"bytes", config.TokensBytes, chat, 7 + 9},
		{"embedding token arrays", config.TokensWords, ParsePrompt([]byte(`{"input":[[1,2,3],[4]]}`)), 4},
		{"completion prompt", config.TokensWords, ParsePrompt([]byte(`{"prompt":"one two three"}`)), 3},
		{"anthropic system", config.TokensWords, ParsePrompt([]byte(`{"system":[{"type":"text","text":"a b"}],"messages":[{"role":"user","content":"c"}]}`)), 4},
		{"responses input", config.TokensWords, ParsePrompt([]byte(`{"instructions":"x y","input":[{"role":"user","content":"z"}],"max_output_tokens":9}`)), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Count(tt.tok, tt.p); got != tt.want {
				t.Fatalf("Count(%s) = %d, want %d", tt.tok, got, tt.want)
			}
		})
	}
}

func TestEstimate(t *testing.T) {
	t.Parallel()
	priced := config.Model{Name: "a", MaxConcurrency: 10, Batch: config.Direct, Tokenizer: config.TokensWords,
		Price: &config.Price{InputPerMTok: 1, OutputPerMTok: 4}}
	native := config.Model{Name: "b", MaxConcurrency: 5, Batch: config.Native, Tokenizer: config.TokensWords,
		Price: &config.Price{InputPerMTok: 2, OutputPerMTok: 8}}
	tallies := map[string]*Tally{
		"a": {Rows: 100, InputTokens: 1_000_000, MaxOutputTokens: 500_000},
		"b": {Rows: 20, InputTokens: 500_000, MaxOutputTokens: 100_000},
	}
	models := map[string]Model{
		"a": {Config: priced, Latency: time.Second, LatencySource: LatencyConfigured, QueuedRows: 50},
		"b": {Config: native, Latency: 2 * time.Second, LatencySource: LatencyDefault},
	}
	q := Estimate("/v1/chat/completions", tallies, models, 24*time.Hour)
	if q.Rows != 120 || q.InputTokens != 1_500_000 || q.MaxOutputTokens != 600_000 || q.Execution != "hybrid" {
		t.Fatalf("quote %+v", q)
	}
	// a: 1 USD of input, 2 of output; b: 1 of input, 0.8 of output.
	d := q.Modes.Direct
	if d.CostUSD.Min != 2 || *d.CostUSD.Max != 4.8 {
		t.Fatalf("direct cost %+v, want 2 to 4.8", *d.CostUSD)
	}
	if n := q.Modes.Native.CostUSD; n.Min != 1 || *n.Max != 2.4 {
		t.Fatalf("native cost %+v, want 1 to 2.4", *n)
	}
	if h := q.Modes.Hybrid.CostUSD; h.Min != 1 || *h.Max != 4.8 {
		t.Fatalf("hybrid cost %+v, want 1 to 4.8", *h)
	}
	// a: (100 + 50 queued) / 10 slots = 15 rounds of 1 s; b: 20 / 5 = 4 of 2 s.
	if *d.DurationSeconds != 15 || q.Models[1].DirectSeconds != 8 || d.MaxDurationSeconds != 86400 {
		t.Fatalf("direct duration %v (models %+v), want 15 s", *d.DurationSeconds, q.Models)
	}
	if q.Modes.Native.DurationSeconds != nil {
		t.Fatalf("native duration %v, want null: a provider batch's turnaround is not known", *q.Modes.Native.DurationSeconds)
	}

	// A row without max_tokens leaves the most unbounded; a model without
	// a price, the cost unknown.
	tallies["a"].RowsWithoutMaxTokens = 1
	if q := Estimate("/v1/chat/completions", tallies, models, time.Hour); q.Modes.Direct.CostUSD.Max != nil || q.RowsWithoutMaxTokens != 1 {
		t.Fatalf("cost %+v, want no max", q.Modes.Direct.CostUSD)
	}
	m := models["b"]
	m.Config.Price = nil
	models["b"] = m
	if q := Estimate("/v1/chat/completions", tallies, models, time.Hour); q.Modes.Direct.CostUSD != nil {
		t.Fatalf("cost %+v, want null", q.Modes.Direct.CostUSD)
	}
}
