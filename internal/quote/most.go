package quote

import (
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/tidwall/gjson"
)

// RowMost is the most row r may cost in USD (docs/api.md "Extensions",
// max_cost): its input tokens, counted by its model's tokenizer, and its
// max_tokens, on the priciest of its model and the fallbacks it may move
// to (the model's own and fallback, the batch's). A row that sets no
// max_tokens is bounded by its input alone.
func RowMost(models *config.Models, r jsonl.Row, fallback string) float64 {
	m, _ := models.Lookup(r.Model)
	p := ParsePrompt([]byte(gjson.GetBytes(r.JSON, "body").Raw))
	in := Count(m.Tokenizer, p)
	var most float64
	for _, name := range []string{r.Model, m.Fallback, fallback} {
		if fm, ok := models.Lookup(name); ok && fm.Price != nil {
			most = max(most, fm.Price.USD(in, p.MaxTokens))
		}
	}
	return most
}
