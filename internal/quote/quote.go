// Package quote estimates a batch before it runs (docs/api.md "Quotes"):
// its rows and tokens per model, what it costs in each execution mode
// (direct, native, hybrid: README "Native, direct or hybrid") and how long
// it takes. The estimate is pure: internal/batches reads the input and the
// queue and hands them here.
package quote

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/relaybatch/relay/internal/config"
)

// Latency sources: where a model's latency figure comes from.
const (
	LatencyObserved   = "observed"   // requests this process saw the model answer
	LatencyConfigured = "configured" // the model's latency: in relay.yaml
	LatencyDefault    = "default"    // config.DefaultLatency
)

// Tally is one model's rows of a batch.
type Tally struct {
	Rows                 int
	InputTokens          int64
	MaxOutputTokens      int64 // the sum of the rows' max_tokens
	RowsWithoutMaxTokens int
}

// Add counts one row of prompt p by tokenizer t.
func (t *Tally) Add(tok config.Tokenizer, p Prompt) {
	t.Rows++
	t.InputTokens += Count(tok, p)
	if p.MaxTokens > 0 {
		t.MaxOutputTokens += p.MaxTokens
	} else {
		t.RowsWithoutMaxTokens++
	}
}

// Model is what the estimate knows of a model besides its rows.
type Model struct {
	Config        config.Model
	Latency       time.Duration
	LatencySource string
	// QueuedRows is the work ahead of the batch on the model: rows of
	// other batches waiting for its capacity.
	QueuedRows int
}

// Quote is the answer of a dry-run create (docs/api.md "Quotes").
type Quote struct {
	Object               string       `json:"object"` // "batch.quote"
	Endpoint             string       `json:"endpoint"`
	Rows                 int          `json:"rows"`
	InputTokens          int64        `json:"input_tokens"`
	MaxOutputTokens      int64        `json:"max_output_tokens"`
	RowsWithoutMaxTokens int          `json:"rows_without_max_tokens"`
	Execution            string       `json:"execution"` // the mode the models' batch: settings run it in
	Models               []ModelQuote `json:"models"`
	Modes                Modes        `json:"modes"`
}

// ModelQuote is a model's share of a quote.
type ModelQuote struct {
	Model                string  `json:"model"`
	Rows                 int     `json:"rows"`
	InputTokens          int64   `json:"input_tokens"`
	Tokenizer            string  `json:"tokenizer"`
	MaxOutputTokens      int64   `json:"max_output_tokens"`
	RowsWithoutMaxTokens int     `json:"rows_without_max_tokens"`
	Batch                string  `json:"batch"` // the model's batch: setting
	MaxConcurrency       int     `json:"max_concurrency"`
	LatencySeconds       float64 `json:"latency_seconds"`
	LatencySource        string  `json:"latency_source"`
	QueuedRows           int     `json:"queued_rows"`
	Price                *Price  `json:"price"`
	DirectSeconds        float64 `json:"direct_seconds"`
}

// Price is a model's price in USD per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
}

// Modes are the three ways the batch's rows can run.
type Modes struct {
	Direct Mode `json:"direct"`
	Native Mode `json:"native"`
	Hybrid Mode `json:"hybrid"`
}

// Mode is a mode's cost and duration. Cost is null when a model of the
// batch has no price; its max is null when a row sets no max_tokens (its
// output is not bounded). DurationSeconds is null when it cannot be
// estimated (native: a model of the batch sets no batch_turnaround;
// hybrid); MaxDurationSeconds is the completion window every mode ends
// within.
type Mode struct {
	CostUSD            *Range   `json:"cost_usd"`
	DurationSeconds    *float64 `json:"duration_seconds"`
	MaxDurationSeconds float64  `json:"max_duration_seconds"`
}

// Range is a cost from its least (no output) to its most (every row's
// max_tokens).
type Range struct {
	Min float64  `json:"min"`
	Max *float64 `json:"max"`
}

// Estimate quotes a batch of endpoint whose rows tally as tallies (by
// model), on models (by name), within window.
func Estimate(endpoint string, tallies map[string]*Tally, models map[string]Model, window time.Duration) Quote {
	q := Quote{Object: "batch.quote", Endpoint: endpoint, Models: []ModelQuote{}}
	names := make([]string, 0, len(tallies))
	for name := range tallies {
		names = append(names, name)
	}
	slices.Sort(names)
	var direct float64
	turnaround, turnaroundKnown := 0.0, true
	costs := costSum{}
	native, directModels := 0, 0
	for _, name := range names {
		t, m := tallies[name], models[name]
		mq := ModelQuote{
			Model: name, Rows: t.Rows, InputTokens: t.InputTokens, Tokenizer: string(m.Config.Tokenizer),
			MaxOutputTokens: t.MaxOutputTokens, RowsWithoutMaxTokens: t.RowsWithoutMaxTokens, Batch: string(m.Config.Batch),
			MaxConcurrency: m.Config.MaxConcurrency, LatencySeconds: m.Latency.Seconds(), LatencySource: m.LatencySource,
			QueuedRows: m.QueuedRows, DirectSeconds: DirectSeconds(t.Rows, m),
		}
		if p := m.Config.Price; p != nil {
			mq.Price = &Price{InputPerMTok: p.InputPerMTok, OutputPerMTok: p.OutputPerMTok}
		}
		costs.add(mq)
		direct = max(direct, mq.DirectSeconds)
		turnaround = max(turnaround, m.Config.BatchTurnaround.Seconds())
		turnaroundKnown = turnaroundKnown && m.Config.BatchTurnaround > 0
		if m.Config.Native() {
			native++
		} else {
			directModels++
		}
		q.Rows += t.Rows
		q.InputTokens += t.InputTokens
		q.MaxOutputTokens += t.MaxOutputTokens
		q.RowsWithoutMaxTokens += t.RowsWithoutMaxTokens
		q.Models = append(q.Models, mq)
	}
	switch {
	case native == 0:
		q.Execution = "direct"
	case directModels == 0:
		q.Execution = "native"
	default:
		q.Execution = "hybrid"
	}
	w := window.Seconds()
	q.Modes.Direct = Mode{CostUSD: costs.scaled(1, 1), DurationSeconds: &direct, MaxDurationSeconds: w}
	q.Modes.Native = Mode{CostUSD: costs.scaled(config.NativeDiscount, config.NativeDiscount), MaxDurationSeconds: w}
	if turnaroundKnown && len(names) > 0 {
		q.Modes.Native.DurationSeconds = &turnaround
	}
	q.Modes.Hybrid = Mode{CostUSD: costs.scaled(config.NativeDiscount, 1), MaxDurationSeconds: w}
	return q
}

// DirectSeconds is how long m takes to run rows directly after the work
// queued on it: rounds of max_concurrency requests, each the latency.
func DirectSeconds(rows int, m Model) float64 {
	if rows == 0 {
		return 0
	}
	slots := max(m.Config.MaxConcurrency, 1)
	rounds := math.Ceil(float64(rows+m.QueuedRows) / float64(slots))
	return rounds * m.Latency.Seconds()
}

// DirectTime is how long rows take to run directly on m with nothing
// queued ahead: DirectSeconds at m's latency, else DefaultLatency.
func DirectTime(m config.Model, rows int) time.Duration {
	qm := Model{Config: m, Latency: cmp.Or(m.Latency, config.DefaultLatency)}
	return time.Duration(DirectSeconds(rows, qm) * float64(time.Second))
}

// costSum adds up the models' costs at the direct price.
type costSum struct {
	min, max  float64
	unpriced  bool // a model has no price: no cost at all
	unbounded bool // a row has no max_tokens: no max
}

func (c *costSum) add(m ModelQuote) {
	if m.Price == nil {
		c.unpriced = true
		return
	}
	in := float64(m.InputTokens) * m.Price.InputPerMTok / 1e6
	c.min += in
	c.max += in + float64(m.MaxOutputTokens)*m.Price.OutputPerMTok/1e6
	c.unbounded = c.unbounded || m.RowsWithoutMaxTokens > 0
}

// scaled is the cost range with its least at lo times the direct price
// and its most at hi times it.
func (c costSum) scaled(lo, hi float64) *Range {
	if c.unpriced {
		return nil
	}
	r := &Range{Min: round(c.min * lo)}
	if !c.unbounded {
		v := round(c.max * hi)
		r.Max = &v
	}
	return r
}

// round keeps a cost to a millionth of a dollar.
func round(usd float64) float64 { return math.Round(usd*1e6) / 1e6 }

// Reservation is what the quoted batch reserves of its tenant's budget
// (docs/api.md "Budgets, revocation and allow-lists", reservations): its
// input tokens and every row's max_tokens (a row without max_tokens
// reserves its input only), and the most its mode may cost (the least when
// the most is not bounded; hybrid at the direct price).
func (q Quote) Reservation() (tokens int64, usd float64) {
	mode := q.Modes.Direct
	if q.Execution == "native" {
		mode = q.Modes.Native
	}
	if c := mode.CostUSD; c != nil {
		usd = c.Min
		if c.Max != nil {
			usd = *c.Max
		}
	}
	return q.InputTokens + q.MaxOutputTokens, usd
}
