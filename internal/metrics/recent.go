package metrics

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// RecentWindow is how far back Recent counts.
const RecentWindow = 15 * time.Minute

// Recent counts the rows a process committed in the last RecentWindow by
// model and upstream answer: the figures of its metric lines (ChunkLines),
// kept for the panel's Operations page (internal/ops). A nil Recent counts
// nothing. Safe for concurrent use.
type Recent struct {
	mu      sync.Mutex
	minutes map[int64]map[string]Answers // unix minute → model → counts
}

// Answers are a model's rows by outcome and by their last upstream answer.
type Answers struct {
	Model     string `json:"model"`
	Completed int64  `json:"completed"`
	Failed    int64  `json:"failed"`
	Status4xx int64  `json:"upstream_4xx"`
	Status429 int64  `json:"upstream_429"`
	Status5xx int64  `json:"upstream_5xx"`
	NoAnswer  int64  `json:"no_answer"`
}

// Snapshot is Recent's counts over its window, by model (in name order).
type Snapshot struct {
	WindowSeconds int       `json:"window_seconds"`
	Models        []Answers `json:"models"`
}

// Add counts a committed chunk's figures f of model at now.
func (r *Recent) Add(model string, now time.Time, f Figures) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.minutes == nil {
		r.minutes = map[int64]map[string]Answers{}
	}
	m := now.Unix() / 60
	for k := range r.minutes {
		if k <= m-int64(RecentWindow/time.Minute) {
			delete(r.minutes, k)
		}
	}
	byModel := r.minutes[m]
	if byModel == nil {
		byModel = map[string]Answers{}
		r.minutes[m] = byModel
	}
	a := byModel[model]
	a.add(Answers{Model: model, Completed: f.Completed, Failed: f.Failed,
		Status4xx: f.Status4xx, Status429: f.Status429, Status5xx: f.Status5xx, NoAnswer: f.None})
	byModel[model] = a
}

// add adds b's counts to a, which takes b's model.
func (a *Answers) add(b Answers) {
	a.Model = b.Model
	a.Completed += b.Completed
	a.Failed += b.Failed
	a.Status4xx += b.Status4xx
	a.Status429 += b.Status429
	a.Status5xx += b.Status5xx
	a.NoAnswer += b.NoAnswer
}

// Snapshot sums the minutes within RecentWindow of now.
func (r *Recent) Snapshot(now time.Time) Snapshot {
	s := Snapshot{WindowSeconds: int(RecentWindow / time.Second), Models: []Answers{}}
	if r == nil {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sum := map[string]Answers{}
	m := now.Unix() / 60
	for k, byModel := range r.minutes {
		if k <= m-int64(RecentWindow/time.Minute) {
			continue
		}
		for name, a := range byModel {
			t := sum[name]
			t.add(a)
			sum[name] = t
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sum)) {
		s.Models = append(s.Models, sum[name])
	}
	return s
}
