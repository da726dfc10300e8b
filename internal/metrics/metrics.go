// Package metrics is the service's CloudWatch metrics: their names, shared
// with the stack's dashboard and alarms (infra/observability.go), and the
// embedded metric format lines the functions log them as, which CloudWatch
// Logs turns into metrics with no API call and no IAM permission
// (docs/runbook.md "Metrics").
package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/resources"
)

// Dimensions. Every metric carries resources.MetricDimension (the
// deployment's prefix); model and tenant metrics one of these too, chunk
// durations Function and Model.
const (
	Model    = "Model"
	Tenant   = "Tenant"
	Function = "Function"
)

// ChunkDuration (dimensions Prefix, Function, Model) is a chunk's time in
// the function that ran it, from taking it up to its commit, in
// milliseconds: one value per commit that took effect.
const ChunkDuration = "ChunkDuration"

// Per model (dimensions Prefix, Model): rows as their chunks commit, by
// outcome and by the upstream's last answer, their time upstream, and the
// model's capacity in use (published by the tick).
const (
	RowsCompleted = "RowsCompleted"
	RowsFailed    = "RowsFailed"
	Fallbacks     = "Fallbacks"
	// Upstream4xx counts rows whose last answer was a 4xx other than 429,
	// Upstream429 and Upstream5xx the others; NoAnswer rows that got none
	// (a timeout, a connection error, never sent).
	Upstream4xx      = "Upstream4xx"
	Upstream429      = "Upstream429"
	Upstream5xx      = "Upstream5xx"
	NoAnswer         = "NoAnswer"
	UpstreamLatency  = "UpstreamLatency" // milliseconds, one value per sent row
	Tokens           = "Tokens"
	InFlight         = "InFlight"
	Capacity         = "Capacity"
	maxValuesPerLine = 100 // CloudWatch's limit on one metric's values in a line
)

// Per model (dimensions Prefix, Model), from an executor's upstream pool
// (internal/ratelimit) as it happens: a circuit of the model (one of its
// keys) that opened, and a key dropped from its pool for answering
// 401/403 (docs/design.md "Rate budgets"). Each line counts one.
const (
	CircuitsOpened = "CircuitsOpened"
	KeysDropped    = "KeysDropped"
)

// UpstreamLine counts one event name (CircuitsOpened, KeysDropped) of
// model's key env.
func UpstreamLine(prefix, model, name, env string, now time.Time) []any {
	v := map[string]any{resources.MetricDimension: prefix, Model: model, name: 1}
	return line(now, []string{resources.MetricDimension, Model}, v, "key_env", env)
}

// Per tenant (dimensions Prefix, Tenant).
const (
	TenantRows   = "TenantRows"
	TenantTokens = "TenantTokens"
)

// ModelNames are the per-model metrics a chunk's commit publishes.
var ModelNames = []string{RowsCompleted, RowsFailed, Fallbacks, Upstream4xx, Upstream429, Upstream5xx, NoAnswer, UpstreamLatency, Tokens}

// Figures are one model's rows of a committed chunk.
type Figures struct {
	Completed, Failed, Fallbacks          int64
	Status4xx, Status429, Status5xx, None int64
	Tokens                                int64
	LatencyMS                             []float64
}

// event is what Rows reads of a row's generation (part.UsageEvent).
type event struct {
	Status      string `json:"status"`
	Model       string `json:"model"`
	Fallback    bool   `json:"fallback"`
	LastStatus  *int   `json:"last_status"`
	TotalTokens int64  `json:"total_tokens"`
	LatencyMS   int64  `json:"latency_ms"`
	Attempts    int    `json:"attempts"`
	Error       *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// sent says the row went upstream in the run that committed it: a row of
// a dead chunk carries its chunk's runs as attempts, but none of them
// answered.
func (e event) sent() bool {
	return e.Attempts > 0 && (e.Error == nil || e.Error.Code != part.CodeDeadLetter)
}

// Rows adds up a chunk's generations (its .usage lines, part.UsageEvent)
// by the model that served each row ("" for rows no model was named for).
func Rows(usage []byte) (map[string]*Figures, error) {
	out := map[string]*Figures{}
	dec := json.NewDecoder(bytes.NewReader(usage))
	for dec.More() {
		var e event
		if err := dec.Decode(&e); err != nil {
			return out, fmt.Errorf("metrics: generation: %w", err)
		}
		f := out[e.Model]
		if f == nil {
			f = &Figures{}
			out[e.Model] = f
		}
		f.add(e)
	}
	return out, nil
}

func (f *Figures) add(e event) {
	if e.Status == "completed" {
		f.Completed++
	} else {
		f.Failed++
	}
	if e.Fallback {
		f.Fallbacks++
	}
	switch st := e.LastStatus; {
	case st == nil:
		f.None++
	case *st == 429:
		f.Status429++
	case *st >= 500:
		f.Status5xx++
	case *st >= 400:
		f.Status4xx++
	}
	f.Tokens += e.TotalTokens
	if e.sent() {
		f.LatencyMS = append(f.LatencyMS, float64(e.LatencyMS))
	}
}

// line is the log attributes of one embedded metric format line: metrics
// of namespace resources.MetricNamespace under dims, with values, and
// props as plain fields (searchable in Logs Insights, not metrics).
func line(now time.Time, dims []string, values map[string]any, props ...any) []any {
	var defs []any
	for _, name := range sortedKeys(values) {
		if _, isDim := values[name].(string); isDim {
			continue
		}
		defs = append(defs, map[string]string{"Name": name, "Unit": unitOf(name)})
	}
	attrs := []any{"_aws", map[string]any{"Timestamp": now.UnixMilli(), "CloudWatchMetrics": []any{map[string]any{
		"Namespace": resources.MetricNamespace, "Dimensions": [][]string{dims}, "Metrics": defs,
	}}}}
	for _, name := range sortedKeys(values) {
		attrs = append(attrs, name, values[name])
	}
	return append(attrs, props...)
}

func unitOf(name string) string {
	if name == UpstreamLatency || name == ChunkDuration {
		return "Milliseconds"
	}
	return "Count"
}

// ChunkLines are the lines a committed chunk's rows of model publish, for
// the deployment of prefix: its counts in the first, its latencies 100 to
// a line. batch names the batch (a field, not a dimension).
func ChunkLines(prefix, model, batch string, now time.Time, f Figures) [][]any {
	dims := []string{resources.MetricDimension, Model}
	first := map[string]any{resources.MetricDimension: prefix, Model: model,
		RowsCompleted: f.Completed, RowsFailed: f.Failed, Fallbacks: f.Fallbacks,
		Upstream4xx: f.Status4xx, Upstream429: f.Status429, Upstream5xx: f.Status5xx, NoAnswer: f.None, Tokens: f.Tokens}
	lat := f.LatencyMS
	n := min(len(lat), maxValuesPerLine)
	if n > 0 {
		first[UpstreamLatency] = lat[:n]
	}
	lines := [][]any{line(now, dims, first, "batch_id", batch)}
	for lat = lat[n:]; len(lat) > 0; lat = lat[n:] {
		n = min(len(lat), maxValuesPerLine)
		more := map[string]any{resources.MetricDimension: prefix, Model: model, UpstreamLatency: lat[:n]}
		lines = append(lines, line(now, dims, more, "batch_id", batch))
	}
	return lines
}

// TenantLine is the line of a committed chunk's rows and tokens for its
// tenant.
func TenantLine(prefix, tenant, batch string, now time.Time, rows, tokens int64) []any {
	v := map[string]any{resources.MetricDimension: prefix, Tenant: tenant, TenantRows: rows, TenantTokens: tokens}
	return line(now, []string{resources.MetricDimension, Tenant}, v, "batch_id", batch)
}

// ChunkDurationLine is the line of a committed chunk of model's time in
// function (the executor: from its run's start in the invocation that
// committed it). batch names the batch (a field, not a dimension).
func ChunkDurationLine(prefix, function, model, batch string, now time.Time, d time.Duration) []any {
	v := map[string]any{resources.MetricDimension: prefix, Function: function, Model: model, ChunkDuration: float64(d.Milliseconds())}
	return line(now, []string{resources.MetricDimension, Function, Model}, v, "batch_id", batch)
}

// CapacityLine is a model's capacity in use, as the tick read it.
func CapacityLine(prefix, model string, now time.Time, inFlight, capacity int) []any {
	v := map[string]any{resources.MetricDimension: prefix, Model: model, InFlight: inFlight, Capacity: capacity}
	return line(now, []string{resources.MetricDimension, Model}, v)
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
