package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/resources"
)

func TestRowsByModel(t *testing.T) {
	t.Parallel()
	usage := []byte(`{"status":"completed","model":"a","attempts":1,"last_status":200,"total_tokens":10,"latency_ms":120}
{"status":"failed","model":"a","attempts":4,"last_status":429,"latency_ms":900}
{"status":"completed","model":"b","fallback":true,"attempts":5,"last_status":200,"total_tokens":7,"latency_ms":1500}
{"status":"failed","model":"a","attempts":1,"last_status":400,"latency_ms":30}
{"status":"failed","model":"a","attempts":2,"last_status":503,"latency_ms":300}
{"status":"failed","model":"a","attempts":0,"last_status":null}
{"status":"failed","model":"a","attempts":3,"last_status":null,"error":{"code":"dead_letter","message":"x"}}
`)
	got, err := Rows(usage)
	if err != nil {
		t.Fatal(err)
	}
	a, b := got["a"], got["b"]
	if a == nil || b == nil || len(got) != 2 {
		t.Fatalf("models %v, want a and b", got)
	}
	want := Figures{Completed: 1, Failed: 5, Status4xx: 1, Status429: 1, Status5xx: 1, None: 2, Tokens: 10, LatencyMS: []float64{120, 900, 30, 300}}
	if fmt.Sprint(*a) != fmt.Sprint(want) {
		t.Errorf("a: %+v, want %+v", *a, want)
	}
	if b.Completed != 1 || b.Fallbacks != 1 || b.Tokens != 7 || len(b.LatencyMS) != 1 {
		t.Errorf("b: %+v", *b)
	}
	if _, err := Rows([]byte("{not json\n")); err == nil {
		t.Error("a line that is not JSON: no error")
	}
}

// emf is one embedded metric format line as CloudWatch reads it.
type emf struct {
	AWS struct {
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	} `json:"_aws"`
	fields map[string]any
}

func logged(t *testing.T, attrs []any) emf {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", attrs...)
	var e emf
	if err := json.Unmarshal(buf.Bytes(), &e); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(buf.Bytes(), &e.fields)
	return e
}

// A chunk's lines are valid embedded metric format: each declared metric
// and dimension is a field of the line, latencies at most 100 a line, and
// the lines' values add up to the chunk's figures.
func TestChunkLines(t *testing.T) {
	t.Parallel()
	f := Figures{Completed: 240, Failed: 10, Fallbacks: 3, Status429: 2, Tokens: 999}
	for i := range 250 {
		f.LatencyMS = append(f.LatencyMS, float64(i))
	}
	lines := ChunkLines("relay", "gpt-x", "batch_1", time.Unix(1, 0), f)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (250 latencies, 100 a line)", len(lines))
	}
	var latencies int
	var completed float64
	for _, l := range lines {
		e := logged(t, l)
		m := e.AWS.CloudWatchMetrics
		if len(m) != 1 || m[0].Namespace != resources.MetricNamespace || fmt.Sprint(m[0].Dimensions) != "[[Prefix Model]]" {
			t.Fatalf("metric directive %+v", m)
		}
		if e.fields["Prefix"] != "relay" || e.fields["Model"] != "gpt-x" || e.fields["batch_id"] != "batch_1" {
			t.Errorf("dimensions and batch: %v", e.fields)
		}
		for _, d := range m[0].Metrics {
			v, ok := e.fields[d.Name]
			if !ok {
				t.Errorf("metric %s declared, no field", d.Name)
			}
			if d.Name == UpstreamLatency {
				if vs := v.([]any); len(vs) > maxValuesPerLine {
					t.Errorf("%d latencies in a line", len(vs))
				} else {
					latencies += len(vs)
				}
				if d.Unit != "Milliseconds" {
					t.Errorf("latency unit %q", d.Unit)
				}
			}
			if d.Name == RowsCompleted {
				completed += v.(float64)
			}
		}
	}
	if latencies != 250 || completed != 240 {
		t.Errorf("lines hold %d latencies and %v completed rows, want 250 and 240", latencies, completed)
	}
	e := logged(t, CapacityLine("relay", "gpt-x", time.Unix(1, 0), 7, 8))
	if e.fields[InFlight] != 7.0 || e.fields[Capacity] != 8.0 || len(e.AWS.CloudWatchMetrics[0].Metrics) != 2 {
		t.Errorf("capacity line %v", e.fields)
	}
}

// A chunk's duration is one value in milliseconds under its function and
// model.
func TestChunkDurationLine(t *testing.T) {
	t.Parallel()
	e := logged(t, ChunkDurationLine("relay", "executor", "gpt-x", "batch_1", time.Unix(1, 0), 1500*time.Millisecond))
	m := e.AWS.CloudWatchMetrics
	if len(m) != 1 || fmt.Sprint(m[0].Dimensions) != "[[Prefix Function Model]]" || len(m[0].Metrics) != 1 ||
		m[0].Metrics[0].Name != ChunkDuration || m[0].Metrics[0].Unit != "Milliseconds" {
		t.Fatalf("metric directive %+v", m)
	}
	if e.fields[ChunkDuration] != 1500.0 || e.fields["Function"] != "executor" || e.fields["Model"] != "gpt-x" || e.fields["batch_id"] != "batch_1" {
		t.Errorf("fields %v", e.fields)
	}
}

// An upstream event (a circuit opened, a key dropped) is a count of one
// under the model, the key named in a field: what its alarm sums.
func TestUpstreamLine(t *testing.T) {
	t.Parallel()
	for _, name := range []string{CircuitsOpened, KeysDropped} {
		e := logged(t, UpstreamLine("relay", "gpt-x", name, "OPENAI_KEY_2", time.Unix(1, 0)))
		m := e.AWS.CloudWatchMetrics
		if len(m) != 1 || fmt.Sprint(m[0].Dimensions) != "[[Prefix Model]]" || len(m[0].Metrics) != 1 || m[0].Metrics[0].Name != name {
			t.Fatalf("%s: metric directive %+v", name, m)
		}
		if e.fields[name] != 1.0 || e.fields["Model"] != "gpt-x" || e.fields["key_env"] != "OPENAI_KEY_2" {
			t.Errorf("%s: fields %v", name, e.fields)
		}
	}
}

// Recent sums a model's committed figures over its window and forgets
// what is older.
func TestRecent(t *testing.T) {
	t.Parallel()
	var r Recent
	t0 := time.Unix(1_800_000_000, 0)
	r.Add("a", t0, Figures{Completed: 3, Failed: 2, Status429: 1, Status5xx: 1})
	r.Add("a", t0.Add(5*time.Minute), Figures{Failed: 4, Status4xx: 4})
	r.Add("b", t0.Add(6*time.Minute), Figures{Completed: 1, None: 0})
	s := r.Snapshot(t0.Add(10 * time.Minute))
	want := `[{a 3 6 4 1 1 0} {b 1 0 0 0 0 0}]`
	if fmt.Sprint(s.Models) != want || s.WindowSeconds != 900 {
		t.Fatalf("snapshot %v, want %s over 900 s", s, want)
	}
	if s := r.Snapshot(t0.Add(RecentWindow + 2*time.Minute)); fmt.Sprint(s.Models) != `[{a 0 4 4 0 0 0} {b 1 0 0 0 0 0}]` {
		t.Errorf("after the first minute left the window: %v", s.Models)
	}
	var none *Recent
	none.Add("a", t0, Figures{Completed: 1})
	if s := none.Snapshot(t0); len(s.Models) != 0 {
		t.Errorf("nil Recent: %v", s)
	}
}
