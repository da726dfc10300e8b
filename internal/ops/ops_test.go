package ops

import (
	"slices"
	"testing"

	"github.com/relaybatch/relay/internal/sched"
)

// ReportModel adds a model's shards up against their quotas and names one
// holding more than its quota.
func TestReportModel(t *testing.T) {
	t.Parallel()
	quotas := sched.Quotas(1500) // two shards of 750
	r := ReportModel("m", quotas, map[int]int{0: 750, 1: 751}, nil)
	if r.Capacity != 1500 || r.InFlight != 1501 || len(r.Shards) != 2 || !slices.Equal(r.OverQuota, []int{1}) || r.Waiting == nil {
		t.Errorf("report %+v, want capacity 1500, 1501 in flight, shard 1 over its quota", r)
	}
	if r := ReportModel("m", quotas, nil, nil); r.InFlight != 0 || r.OverQuota != nil {
		t.Errorf("idle model: %+v", r)
	}
}
