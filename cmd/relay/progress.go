package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// progress is one report on rows finishing: rows done (completed or
// failed) of the total, and the rate they finish at.
type progress struct {
	Label               string // what progresses: a batch id, "3 batches"; may be empty
	Status              string // a batch status; may be empty
	Done, Total, Failed int
	Rate                float64 // rows per second; 0 while unknown
	// EndsAt is the service's estimated_completion_at (docs/api.md
	// "Extensions"); zero while it has none.
	EndsAt time.Time
}

const barWidth = 24

// progressLine renders p on one line: with a bar for a terminal, as plain
// text for a log.
//
//	in_progress [██████░░░░░░░░░░░░░░░░░░] 1200/5000 rows  40.0 rows/s  ETA 1m35s  3 failed
//	batch_abc in_progress: 1200/5000 rows (24%), 40.0 rows/s, ETA 1m35s, 3 failed
func progressLine(p progress, bar bool) string {
	head := strings.TrimSpace(p.Label + " " + p.Status)
	rows := fmt.Sprintf("%d/%s rows", p.Done, "?")
	if p.Total > 0 {
		rows = fmt.Sprintf("%d/%d rows", p.Done, p.Total)
	}
	rate := "-- rows/s"
	if p.Rate > 0 {
		rate = formatRate(p.Rate) + " rows/s"
	}
	eta := "ETA --"
	if d, ok := p.eta(); ok {
		eta = "ETA " + formatDuration(d)
	}
	if !p.EndsAt.IsZero() {
		eta += " (ends ~" + p.EndsAt.UTC().Format("15:04:05Z") + ")"
	}
	if bar {
		fields := []string{p.bar(), rows, rate, eta}
		if head != "" {
			fields[0] = head + " " + fields[0]
		}
		if p.Failed > 0 {
			fields = append(fields, fmt.Sprintf("%d failed", p.Failed))
		}
		return strings.Join(fields, "  ")
	}
	if p.Total > 0 {
		rows += fmt.Sprintf(" (%d%%)", p.Done*100/p.Total)
	}
	fields := []string{rows, rate, eta}
	if p.Failed > 0 {
		fields = append(fields, fmt.Sprintf("%d failed", p.Failed))
	}
	s := strings.Join(fields, ", ")
	if head != "" {
		s = head + ": " + s
	}
	return s
}

func (p progress) bar() string {
	filled := 0
	if p.Total > 0 {
		filled = min(barWidth, p.Done*barWidth/p.Total)
	}
	return "[" + strings.Repeat("█", filled) + strings.Repeat("░", barWidth-filled) + "]"
}

// eta is how long the rows left take at the current rate.
func (p progress) eta() (time.Duration, bool) {
	if p.Total <= 0 {
		return 0, false
	}
	left := p.Total - p.Done
	if left <= 0 {
		return 0, true
	}
	if p.Rate <= 0 {
		return 0, false
	}
	return time.Duration(math.Ceil(float64(left)/p.Rate)) * time.Second, true
}

func formatRate(r float64) string {
	if r < 100 {
		return fmt.Sprintf("%.1f", r)
	}
	return fmt.Sprintf("%.0f", r)
}

// formatDuration is short and stable: 45s, 1m35s, 2h05m.
func formatDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// rateMeter estimates rows per second from samples of rows done. It
// measures from the last sample before rows started finishing, so time a
// batch spends validating or queued does not dilute the rate.
type rateMeter struct {
	t0    time.Time
	d0    int
	seen  bool
	moved bool
}

func (m *rateMeter) observe(t time.Time, done int) float64 {
	if !m.seen || (!m.moved && done <= m.d0) {
		m.t0, m.d0, m.seen = t, done, true
		return 0
	}
	m.moved = true
	dt := t.Sub(m.t0).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(done-m.d0) / dt
}

// progressReporter shows batches being waited for on stderr: on a
// terminal one bar for all of them, redrawn in place; elsewhere a line per
// batch when its status changes, or now and then while rows finish.
type progressReporter struct {
	w     io.Writer
	tty   bool
	now   func() time.Time
	every time.Duration // least time between plain lines of one batch

	total  rateMeter
	meters map[string]*rateMeter
	last   map[string]plainMark
	ended  map[string]bool
	drawn  bool // the bar is on the current line
}

type plainMark struct {
	at     time.Time
	status string
	done   int
}

func newProgressReporter(w io.Writer, tty bool, now func() time.Time) *progressReporter {
	return &progressReporter{
		w: w, tty: tty, now: now, every: 10 * time.Second,
		meters: map[string]*rateMeter{}, last: map[string]plainMark{}, ended: map[string]bool{},
	}
}

// update reports the latest state of every batch waited for; a batch
// without a status has not been fetched yet.
func (r *progressReporter) update(bs []apiBatch) {
	t := r.now()
	for _, b := range bs {
		if b.terminal() && !r.ended[b.ID] {
			r.ended[b.ID] = true
			r.println(endLine(b))
		}
	}
	if r.tty {
		r.drawBar(t, bs)
		return
	}
	for _, b := range bs {
		if b.terminal() || b.Status == "" {
			continue
		}
		m := r.meters[b.ID]
		if m == nil {
			m = &rateMeter{}
			r.meters[b.ID] = m
		}
		rate := m.observe(t, b.done())
		last, seen := r.last[b.ID]
		if seen && last.status == string(b.Status) && (last.done == b.done() || t.Sub(last.at) < r.every) {
			continue
		}
		r.last[b.ID] = plainMark{at: t, status: string(b.Status), done: b.done()}
		fmt.Fprintln(r.w, progressLine(b.progress(rate), false))
	}
}

// endLine reports a batch that ended. Those that did not fully succeed are
// explained once, by the error waiting returns.
func endLine(b apiBatch) string {
	if line, ok := outcome(b); ok {
		return line
	}
	n := b.RequestCounts
	return fmt.Sprintf("%s ended (%s): %d of %d rows completed, %d failed", b.ID, b.Status, n.Completed, n.Total, n.Failed)
}

func (r *progressReporter) drawBar(t time.Time, bs []apiBatch) {
	p := progress{}
	running := 0
	for _, b := range bs {
		if b.Status == "" { // not fetched yet
			running++
			continue
		}
		p.Done += b.done()
		p.Total += int(b.RequestCounts.Total)
		p.Failed += int(b.RequestCounts.Failed)
		if !b.terminal() {
			running++
			p.Status = string(b.Status)
		}
	}
	p.Rate = r.total.observe(t, p.Done)
	if running == 0 {
		r.clear()
		return
	}
	if len(bs) > 1 {
		p.Label, p.Status = fmt.Sprintf("%d of %d batches running", running, len(bs)), ""
	}
	fmt.Fprint(r.w, "\r\x1b[K"+progressLine(p, true))
	r.drawn = true
}

// println prints a line above the bar.
func (r *progressReporter) println(s string) {
	r.clear()
	fmt.Fprintln(r.w, s)
}

func (r *progressReporter) clear() {
	if r.drawn {
		fmt.Fprint(r.w, "\r\x1b[K")
		r.drawn = false
	}
}
