package batches

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/store"
)

// maxUsageDetails bounds the records by day, key, batch and model a
// grouped GET /v1/usage reads for its one answer (docs/api.md "Usage").
const maxUsageDetails = 100_000

// UsageGroups are what GET /v1/usage may group by (docs/api.md "Usage").
var UsageGroups = []string{"day", "model", "key_id", "batch_id"}

// UsageLine is one row of GET /v1/usage: the dimensions it groups by (the
// others empty and left out), its sums and their cost.
type UsageLine struct {
	Day          string `json:"date,omitempty"`
	Model        string `json:"model,omitempty"`
	KeyID        string `json:"key_id,omitempty"`
	BatchID      string `json:"batch_id,omitempty"`
	Requests     int64  `json:"requests"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	TotalTokens  int64  `json:"total_tokens"`
	// CostUSD prices the tokens of the models with a price in relay.yaml;
	// null when none of them has one.
	CostUSD *float64 `json:"cost_usd"`
}

// ParseGroupBy reads GET /v1/usage's group_by: dimensions of UsageGroups,
// comma-separated; none is the daily usage per model.
func ParseGroupBy(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var dims []string
	for d := range strings.SplitSeq(v, ",") {
		d = strings.TrimSpace(d)
		if !slices.Contains(UsageGroups, d) {
			return nil, errs.Invalidf("group_by", "group_by %q: use a comma-separated list of %s", d, strings.Join(UsageGroups, ", "))
		}
		if !slices.Contains(dims, d) {
			dims = append(dims, d)
		}
	}
	return dims, nil
}

// Usage returns a tenant's usage between two times (their UTC days,
// inclusive), grouped by groupBy: none reads the daily aggregates per
// model, any other grouping the usage by key and batch.
func (s *Service) Usage(ctx context.Context, tenant string, from, to time.Time, groupBy []string) ([]UsageLine, error) {
	first, last := from.UTC().Format("2006-01-02"), to.UTC().Format("2006-01-02")
	var details []store.UsageDetail
	if len(groupBy) == 0 {
		rows, err := s.Store.Usage(ctx, tenant, first, last)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			details = append(details, store.UsageDetail{UsageRow: r})
		}
		groupBy = []string{"day", "model"}
	} else {
		var err error
		details, err = s.Store.UsageDetails(ctx, tenant, first, last, maxUsageDetails)
		if errors.Is(err, store.ErrTooMany) {
			return nil, errs.E(errs.Invalid, "usage_range_too_large", "start_time",
				"the range holds more than %d usage records by key and batch: ask for fewer days (start_time, end_time)", maxUsageDetails)
		}
		if err != nil {
			return nil, err
		}
	}
	return s.group(details, groupBy), nil
}

// group sums rows by the dimensions of groupBy, pricing each row's tokens
// by its model, in the order of the dimensions.
func (s *Service) group(rows []store.UsageDetail, groupBy []string) []UsageLine {
	has := func(d string) bool { return slices.Contains(groupBy, d) }
	lines := map[UsageLine]*UsageLine{}
	for _, r := range rows {
		var k UsageLine
		if has("day") {
			k.Day = r.Day
		}
		if has("model") {
			k.Model = r.Model
		}
		if has("key_id") {
			k.KeyID = r.KeyID
		}
		if has("batch_id") {
			k.BatchID = r.BatchID
		}
		l := lines[k]
		if l == nil {
			l = new(UsageLine)
			*l = k
			lines[k] = l
		}
		l.Requests += r.Requests
		l.InputTokens += r.InputTokens
		l.OutputTokens += r.OutputTokens
		l.TotalTokens += r.TotalTokens
		if usd, ok := s.price(r.UsageRow); ok {
			usd += ptrOr(l.CostUSD)
			l.CostUSD = &usd
		}
	}
	out := make([]UsageLine, 0, len(lines))
	for _, l := range lines {
		if l.CostUSD != nil {
			l.CostUSD = roundUSD(*l.CostUSD)
		}
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b UsageLine) int {
		return cmp.Or(cmp.Compare(a.Day, b.Day), cmp.Compare(a.Model, b.Model), cmp.Compare(a.KeyID, b.KeyID), cmp.Compare(a.BatchID, b.BatchID))
	})
	return out
}

// price is what usage row r's tokens cost at its model's price in
// relay.yaml; false when the model has none. GET /v1/usage's cost_usd and
// a batch's cost both price usage here.
func (s *Service) price(r store.UsageRow) (float64, bool) {
	m, ok := s.Models.Lookup(r.Model)
	if !ok || m.Price == nil {
		return 0, false
	}
	return r.USD(*m.Price), true
}

// roundUSD rounds a cost to a millionth of a dollar.
func roundUSD(usd float64) *float64 {
	usd = math.Round(usd*1e6) / 1e6
	return &usd
}

func ptrOr(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
