package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

func TestProgressLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		p         progress
		wantBar   string
		wantPlain string
	}{
		{
			"running",
			progress{Label: "batch_1", Status: "in_progress", Done: 1200, Total: 5000, Rate: 40},
			"batch_1 in_progress [█████░░░░░░░░░░░░░░░░░░░]  1200/5000 rows  40.0 rows/s  ETA 1m35s",
			"batch_1 in_progress: 1200/5000 rows (24%), 40.0 rows/s, ETA 1m35s",
		},
		{
			"with failed rows",
			progress{Status: "in_progress", Done: 10, Total: 20, Failed: 3, Rate: 0.5},
			"in_progress [████████████░░░░░░░░░░░░]  10/20 rows  0.5 rows/s  ETA 20s  3 failed",
			"in_progress: 10/20 rows (50%), 0.5 rows/s, ETA 20s, 3 failed",
		},
		{
			"with the service's estimate",
			progress{Label: "batch_1", Status: "in_progress", Done: 1200, Total: 5000, Rate: 40, EndsAt: time.Date(2026, 5, 1, 14, 3, 5, 0, time.UTC)},
			"batch_1 in_progress [█████░░░░░░░░░░░░░░░░░░░]  1200/5000 rows  40.0 rows/s  ETA 1m35s (ends ~14:03:05Z)",
			"batch_1 in_progress: 1200/5000 rows (24%), 40.0 rows/s, ETA 1m35s (ends ~14:03:05Z)",
		},
		{
			"total not known yet",
			progress{Label: "batch_1", Status: "validating"},
			"batch_1 validating [░░░░░░░░░░░░░░░░░░░░░░░░]  0/? rows  -- rows/s  ETA --",
			"batch_1 validating: 0/? rows, -- rows/s, ETA --",
		},
		{
			"no rate yet",
			progress{Done: 0, Total: 100},
			"[░░░░░░░░░░░░░░░░░░░░░░░░]  0/100 rows  -- rows/s  ETA --",
			"0/100 rows (0%), -- rows/s, ETA --",
		},
		{
			"fast and long",
			progress{Label: "2 of 3 batches running", Done: 1000, Total: 1_000_000, Rate: 123.4},
			"2 of 3 batches running [░░░░░░░░░░░░░░░░░░░░░░░░]  1000/1000000 rows  123 rows/s  ETA 2h15m",
			"2 of 3 batches running: 1000/1000000 rows (0%), 123 rows/s, ETA 2h15m",
		},
		{
			"all done",
			progress{Status: "finalizing", Done: 7, Total: 7, Rate: 2},
			"finalizing [████████████████████████]  7/7 rows  2.0 rows/s  ETA 0s",
			"finalizing: 7/7 rows (100%), 2.0 rows/s, ETA 0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := progressLine(tt.p, true); got != tt.wantBar {
				t.Errorf("bar:\n got %q\nwant %q", got, tt.wantBar)
			}
			if got := progressLine(tt.p, false); got != tt.wantPlain {
				t.Errorf("plain:\n got %q\nwant %q", got, tt.wantPlain)
			}
		})
	}
}

func TestProgressFormatDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1400 * time.Millisecond, "1s"},
		{59 * time.Second, "59s"},
		{95 * time.Second, "1m35s"},
		{time.Hour + 5*time.Minute + 10*time.Second, "1h05m"},
		{50 * time.Hour, "50h00m"},
	}
	for _, tt := range tests {
		if got := formatDuration(tt.d); got != tt.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestProgressRateMeter(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	samples := []struct {
		after time.Duration
		done  int
		want  float64
	}{
		{0, 0, 0},
		{10 * time.Second, 0, 0}, // validating: does not count
		{12 * time.Second, 20, 10},
		{20 * time.Second, 100, 10},
		{30 * time.Second, 100, 5},
	}
	var m rateMeter
	for _, s := range samples {
		if got := m.observe(t0.Add(s.after), s.done); got != s.want {
			t.Errorf("after %v with %d done: rate = %v, want %v", s.after, s.done, got, s.want)
		}
	}
}

func TestProgressReporter(t *testing.T) {
	t.Parallel()
	batch := func(id, status string, total, completed, failed int) apiBatch {
		var b apiBatch
		b.ID, b.Status = id, openai.BatchStatus(status)
		b.RequestCounts.Total, b.RequestCounts.Completed, b.RequestCounts.Failed = int64(total), int64(completed), int64(failed)
		return b
	}
	steps := [][]apiBatch{
		{batch("b1", "in_progress", 10, 0, 0), batch("b2", "validating", 0, 0, 0)},
		{batch("b1", "in_progress", 10, 5, 0), batch("b2", "in_progress", 10, 0, 0)},
		{batch("b1", "completed", 10, 10, 0), batch("b2", "in_progress", 10, 5, 0)},
		{batch("b1", "completed", 10, 10, 0), batch("b2", "completed", 10, 9, 1)},
	}
	tests := []struct {
		name string
		tty  bool
		want []string
	}{
		{"terminal", true, []string{"\r\x1b[K2 of 2 batches running [", "5/20 rows", "\r\x1b[Kb1 completed: 10 rows\n", "b2 ended (completed): 9 of 10 rows completed, 1 failed"}},
		{"plain", false, []string{"b1 in_progress: 0/10 rows (0%)", "b2 validating: 0/? rows", "b2 in_progress: 0/10 rows", "b1 completed: 10 rows\n", "b2 ended (completed): 9 of 10 rows completed, 1 failed\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			now := time.Unix(0, 0)
			r := newProgressReporter(&buf, tt.tty, func() time.Time { return now })
			for _, bs := range steps {
				now = now.Add(2 * time.Second)
				r.update(bs)
			}
			r.clear()
			out := buf.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not contain %q:\n%q", w, out)
				}
			}
			if !tt.tty && strings.Contains(out, "\x1b") {
				t.Errorf("plain output has terminal escapes: %q", out)
			}
		})
	}
}
