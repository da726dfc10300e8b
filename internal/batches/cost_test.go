package batches

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/store"
)

// A batch's cost prices its usage as GET /v1/usage does, and only when
// every model of it has a price.
func TestBatchCost(t *testing.T) {
	t.Parallel()
	ms, err := config.ParseModels([]byte(`models:
- {name: a, provider: openai, base_url: http://x/v1, price: {input_per_mtok: 1, output_per_mtok: 2}}
- {name: b, provider: openai, base_url: http://x/v1, price: {input_per_mtok: 10, output_per_mtok: 0}}
- {name: free, provider: openai, base_url: http://x/v1}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{Models: ms}
	row := func(day, model string, in, out int64) store.UsageDetail {
		return store.UsageDetail{UsageRow: store.UsageRow{Day: day, Model: model, Requests: 1, InputTokens: in, OutputTokens: out, TotalTokens: in + out}, BatchID: "batch_1"}
	}
	priced := []store.UsageDetail{row("2026-01-01", "a", 1_000_000, 500_000), row("2026-01-02", "a", 1, 0), row("2026-01-02", "b", 100_000, 7)}
	for _, tt := range []struct {
		name string
		rows []store.UsageDetail
		want *float64
	}{
		{"every model priced", priced, roundUSD(1 + 1 + 1e-6 + 1)},
		{"one model without a price", append(slices.Clone(priced), row("2026-01-02", "free", 5, 5)), nil},
		{"an unknown model", []store.UsageDetail{row("2026-01-02", "gone", 5, 5)}, nil},
		{"no usage yet", nil, nil},
	} {
		got, _ := s.batchCost(tt.rows)
		if (got == nil) != (tt.want == nil) || got != nil && math.Abs(*got-*tt.want) > 1e-9 {
			t.Errorf("%s: cost %v, want %v", tt.name, deref(got), deref(tt.want))
		}
	}
	// The same pricing as GET /v1/usage?group_by=batch_id.
	cost, _ := s.batchCost(priced)
	if lines := s.group(priced, []string{"batch_id"}); len(lines) != 1 || *lines[0].CostUSD != *cost {
		t.Errorf("group_by=batch_id %+v, cost %v: they differ", lines, *cost)
	}
}

// A batch's modes split its rows and cost by how they ran: rows a
// provider's batch API answered at half the price, rows a fallback model
// answered at its own, the rest direct; they add up to the batch's cost,
// which GET /v1/usage prices the same.
func TestBatchModes(t *testing.T) {
	t.Parallel()
	ms, err := config.ParseModels([]byte(`models:
- {name: a, provider: openai, base_url: http://x/v1, fallback: b, price: {input_per_mtok: 1, output_per_mtok: 2}}
- {name: b, provider: openai, base_url: http://x/v1, price: {input_per_mtok: 10, output_per_mtok: 0}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{Models: ms}
	rows := []store.UsageDetail{
		{UsageRow: store.UsageRow{Model: "a", Requests: 10, InputTokens: 1_000_000, OutputTokens: 500_000,
			NativeRequests: 4, NativeInputTokens: 400_000, NativeOutputTokens: 200_000}},
		{UsageRow: store.UsageRow{Model: "b", Requests: 3, InputTokens: 100_000,
			FallbackRequests: 3, FallbackInputTokens: 100_000}},
	}
	cost, modes := s.batchCost(rows)
	want := batch.Modes{Native: batch.ModeUse{Rows: 4, Cost: 0.4}, Direct: batch.ModeUse{Rows: 6, Cost: 1.2}, Fallback: batch.ModeUse{Rows: 3, Cost: 1}}
	if modes == nil || *modes != want {
		t.Fatalf("modes %+v, want %+v", modes, want)
	}
	if lines := s.group(rows, []string{"batch_id"}); cost == nil || *cost != 2.6 || *lines[0].CostUSD != *cost {
		t.Errorf("cost %v, usage's %v; want 2.6 for both", deref(cost), *lines[0].CostUSD)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// A batch's usage is read on the days from its creation to its end (now,
// while it runs), the last maxCostDays of them.
func TestCostDays(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	unix := func(s string) *int64 { u := at(s).Unix(); return &u }
	now := at("2026-01-05T10:00:00Z")
	for _, tt := range []struct {
		name string
		b    batch.Batch
		want []string
	}{
		{"running, created today", batch.Batch{CreatedAt: at("2026-01-05T00:00:01Z").Unix()}, []string{"2026-01-05"}},
		{"ended over midnight", batch.Batch{CreatedAt: at("2026-01-01T23:00:00Z").Unix(), CompletedAt: unix("2026-01-02T01:00:00Z")},
			[]string{"2026-01-01", "2026-01-02"}},
		{"cancelled", batch.Batch{CreatedAt: at("2026-01-03T12:00:00Z").Unix(), CancelledAt: unix("2026-01-03T13:00:00Z")}, []string{"2026-01-03"}},
		{"long ago, still running", batch.Batch{CreatedAt: at("2025-12-01T00:00:00Z").Unix()},
			[]string{"2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05"}},
	} {
		if got := costDays(tt.b, now); !slices.Equal(got, tt.want) {
			t.Errorf("%s: days %v, want %v", tt.name, got, tt.want)
		}
	}
}

// tooManyUsage is a table whose usage records by key and batch pass any cap.
type tooManyUsage struct{ Store }

func (tooManyUsage) UsageDetails(_ context.Context, _, _, _ string, max int) ([]store.UsageDetail, error) {
	if max <= 0 {
		return make([]store.UsageDetail, 1<<20), nil
	}
	return nil, store.ErrTooMany
}

// A grouped usage read past its cap is the client's 400, naming the range.
func TestUsageRangeTooLarge(t *testing.T) {
	t.Parallel()
	s := &Service{Store: tooManyUsage{}}
	_, err := s.Usage(context.Background(), "acme", time.Unix(0, 0), time.Now(), []string{"batch_id"})
	var e *errs.Error
	if !errors.As(err, &e) || e.Kind != errs.Invalid || e.Code != "usage_range_too_large" || e.Param != "start_time" {
		t.Fatalf("got %v, want 400 usage_range_too_large", err)
	}
}
