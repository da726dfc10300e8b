package engine

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/quote"
)

// TestCutChunkHoldsItsOwnRowsMost: the rows a commit leaves to a new chunk
// (fallback rows here; a split's rest likewise) are held at their own
// most, not at the whole chunk's: the answered rows' cost is in the usage
// already, and counted twice it refused the batch's next chunks
// cost_limit_reached under a max_cost they fit (docs/api.md "Extensions",
// max_cost).
func TestCutChunkHoldsItsOwnRowsMost(t *testing.T) {
	t.Parallel()
	e, table, _ := fallbackStartFixture(t)
	models, err := config.ParseModels([]byte("models:\n" +
		"  - {name: x, provider: openai, base_url: http://m/v1, api_key_env: K, max_concurrency: 2, fallback: y, price: {input_per_mtok: 1, output_per_mtok: 3}}\n" +
		"  - {name: y, provider: openai, base_url: http://m/v1, api_key_env: K, max_concurrency: 2, price: {input_per_mtok: 2, output_per_mtok: 3}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.Models = models
	// Rows of different sizes, each with its most (quote.RowMost), which
	// the plan sums into its chunk's.
	var input bytes.Buffer
	var most []float64
	for i := range 6 {
		line := fmt.Sprintf(`{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"x","n":%d,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}}`,
			i, i, 100*(i+1), strings.Repeat("word ", 10*(i+1)))
		input.WriteString(line + "\n")
		most = append(most, quote.RowMost(models, jsonl.Row{Model: "x", JSON: []byte(line)}, ""))
	}
	e.Blobs.(*memBucket).put("in", input.Bytes())
	ceiling := 10.0
	b := table.b()
	b.MaxCost, b.CostHolds = &ceiling, map[string]float64{}
	b.Input = []batch.Object{{Key: "in", Size: int64(input.Len())}}
	table.putBatch(b)
	c := table.chunkAt(0)
	c.End = int64(input.Len())
	for _, m := range most {
		c.MostCost += m
	}
	table.putChunk(c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	if failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, c, "d0")}); err != nil || len(failed) > 0 {
		t.Fatalf("x's run: failed %v, err %v", failed, err)
	}
	fb := table.chunkAt(1)
	if want := most[1] + most[3] + most[5]; fb.Rows != 3 || math.Abs(fb.MostCost-want) > 1e-12 {
		t.Fatalf("fallback chunk of %d rows holds most $%g, want $%g (its rows'; the whole chunk's is $%g)", fb.Rows, fb.MostCost, want, c.MostCost)
	}
}
