package ops

import (
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/ratelimit"
)

// A key's report adds up the states the executors published in the last
// minute: concurrency limits summed (at most max_concurrency), 429s
// summed, the worst circuit and the slowest pace; older states and other
// keys' do not count, and a key an executor dropped is dropped.
func TestReportKey(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	m := config.Model{Name: "m", MaxConcurrency: 16, RPM: 600}
	state := func(env string, age time.Duration, conc int, limited int64, circuit ratelimit.CircuitState, rpm float64) ratelimit.Published {
		return ratelimit.Published{Executor: "x", At: now.Add(-age), KeyState: ratelimit.KeyState{Env: env, State: "live", Circuit: circuit,
			Concurrency: conc, LimitedPerMinute: limited, RPM: rpm}}
	}
	tests := []struct {
		name    string
		env     string
		dropped map[string]ratelimit.DroppedKey
		states  []ratelimit.Published
		want    KeyReport
	}{
		{"no executor", "A", nil, nil,
			KeyReport{Env: "A", State: "live", RPM: 600, RPMInUse: 7, Concurrency: 16, Circuit: ratelimit.Closed}},
		{"two executors", "A", nil, []ratelimit.Published{
			state("A", time.Second, 4, 3, ratelimit.Closed, 399), state("A", 2*time.Second, 5, 2, ratelimit.HalfOpen, 570),
			state("A", 2*time.Minute, 16, 100, ratelimit.Open, 10), state("B", time.Second, 16, 100, ratelimit.Open, 10)},
			KeyReport{Env: "A", State: "live", RPM: 600, RPMInUse: 7, Executors: 2, Concurrency: 9, Limited: 5, Circuit: ratelimit.HalfOpen, PaceRPM: 399}},
		{"dropped, limits over the cap", "B", map[string]ratelimit.DroppedKey{"B": {Env: "B", Status: 401}}, []ratelimit.Published{
			state("B", time.Second, 16, 0, ratelimit.Open, 570), state("B", time.Second, 16, 1, ratelimit.Closed, 570)},
			KeyReport{Env: "B", State: "dropped", Status: 401, RPM: 600, RPMInUse: 7, Executors: 2, Concurrency: 16, Limited: 1, Circuit: ratelimit.Open, PaceRPM: 570}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ReportKey(m, tt.env, tt.dropped, 7, 0, tt.states, now)
			got.UpdatedAt = nil
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
