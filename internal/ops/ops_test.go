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

// An overview names only the caller's tenant's batches.
func TestOverviewOfATenant(t *testing.T) {
	t.Parallel()
	o := Overview{
		Models: []ModelReport{{Model: "m", InFlight: 3, Waiting: []sched.Ready{{Model: "m", Tenant: "acme", Batch: "a1"}, {Model: "m", Tenant: "rival", Batch: "r1"}}}},
		Stuck:  []ClaimedChunk{{Tenant: "rival", Batch: "r1"}, {Tenant: "acme", Batch: "a2"}},
	}
	got := Of(o, "acme")
	if len(got.Models) != 1 || len(got.Models[0].Waiting) != 1 || got.Models[0].Waiting[0].Batch != "a1" || got.Models[0].InFlight != 3 {
		t.Errorf("models %+v, want acme's waiting batch only and the model's figures", got.Models)
	}
	if len(got.Stuck) != 1 || got.Stuck[0].Batch != "a2" {
		t.Errorf("stuck %+v, want acme's only", got.Stuck)
	}
	if len(o.Models[0].Waiting) != 2 || len(o.Stuck) != 2 {
		t.Errorf("Of changed the overview it was given: %+v", o)
	}
}
