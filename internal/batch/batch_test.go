package batch

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/jsonl"
)

var allStatuses = []Status{Validating, Failed, InProgress, Finalizing, Completed, Expired, Cancelling, Cancelled, Scheduled}

// allowed is the lifecycle as the package documents it (see Status),
// written out independently of the transitions table.
var allowed = map[[2]Status]bool{
	{Validating, InProgress}: true,
	{Validating, Failed}:     true,
	{Validating, Cancelling}: true,
	{Validating, Expired}:    true,
	{InProgress, Finalizing}: true,
	{InProgress, Cancelling}: true,
	{Finalizing, Completed}:  true,
	{Finalizing, Expired}:    true,
	{Finalizing, Cancelled}:  true,
	{Finalizing, Failed}:     true,
	{Cancelling, Finalizing}: true,
	{Cancelling, Cancelled}:  true,
	{Scheduled, Cancelled}:   true,
}

// stampOf is the timestamp field a status sets when it is entered.
func stampOf(b *Batch, s Status) **int64 {
	switch s {
	case InProgress:
		return &b.InProgressAt
	case Finalizing:
		return &b.FinalizingAt
	case Completed:
		return &b.CompletedAt
	case Failed:
		return &b.FailedAt
	case Expired:
		return &b.ExpiredAt
	case Cancelling:
		return &b.CancellingAt
	case Cancelled:
		return &b.CancelledAt
	}
	return nil // validating and scheduled have none
}

// stamps lists every timestamp of b, nil or not.
func stamps(b *Batch) map[Status]*int64 {
	m := map[Status]*int64{}
	for _, s := range allStatuses {
		if p := stampOf(b, s); p != nil {
			m[s] = *p
		}
	}
	return m
}

// TestTransitions tries every pair of statuses: the allowed ones move the
// batch and stamp the state entered, every other one is refused and
// changes nothing.
func TestTransitions(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for _, from := range allStatuses {
		for _, to := range allStatuses {
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				t.Parallel()
				b := &Batch{ID: "batch_1", Status: from}
				err := b.To(to, now)
				if !allowed[[2]Status{from, to}] {
					if err == nil {
						t.Fatalf("allowed; the lifecycle refuses it")
					}
					if !strings.Contains(err.Error(), "batch_1") || !strings.Contains(err.Error(), string(from)) || !strings.Contains(err.Error(), string(to)) {
						t.Errorf("error %q does not name the batch and both states", err)
					}
					if b.Status != from {
						t.Errorf("refused, yet the status is now %s", b.Status)
					}
					for s, v := range stamps(b) {
						if v != nil {
							t.Errorf("refused, yet %s's timestamp was set", s)
						}
					}
					return
				}
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if b.Status != to {
					t.Fatalf("status %s, want %s", b.Status, to)
				}
				for s, v := range stamps(b) {
					switch {
					case s == to && (v == nil || *v != now.Unix()):
						t.Errorf("%s's timestamp: got %v, want %d", s, v, now.Unix())
					case s != to && v != nil:
						t.Errorf("%s's timestamp set by a move to %s", s, to)
					}
				}
			})
		}
	}
}

// The transitions table and Terminal agree: nothing leaves a terminal
// state, and every other state has a way out.
func TestTerminal(t *testing.T) {
	t.Parallel()
	terminal := []Status{Completed, Failed, Expired, Cancelled}
	for _, s := range allStatuses {
		if got, want := s.Terminal(), slices.Contains(terminal, s); got != want {
			t.Errorf("%s.Terminal() = %v, want %v", s, got, want)
		}
		if got := len(transitions[s]) == 0; got != s.Terminal() {
			t.Errorf("%s: terminal %v, yet %d transitions leave it", s, s.Terminal(), len(transitions[s]))
		}
		for _, next := range transitions[s] {
			if !allowed[[2]Status{s, next}] {
				t.Errorf("the table allows %s → %s, the lifecycle does not", s, next)
			}
		}
	}
	for _, s := range terminal {
		for _, next := range allStatuses {
			b := Batch{Status: s}
			if err := b.To(next, time.Now()); err == nil || b.Status != s {
				t.Errorf("%s → %s: left a terminal state", s, next)
			}
		}
	}
}

// Each timestamp is set once, when its state is first entered: later
// transitions, and entering a state whose time is already recorded, leave
// it alone.
func TestTimestampsSetOnce(t *testing.T) {
	t.Parallel()
	at := func(sec int64) time.Time { return time.Unix(sec, 0) }
	paths := [][]Status{
		{InProgress, Finalizing, Completed},
		{InProgress, Finalizing, Expired},
		{InProgress, Cancelling, Finalizing, Cancelled},
		{InProgress, Cancelling, Cancelled},
		{Cancelling, Finalizing, Cancelled},
		{Cancelling, Cancelled},
		{Failed},
		{Expired},
	}
	for _, path := range paths {
		b := &Batch{ID: "batch_1", Status: Validating}
		want := map[Status]int64{}
		for i, s := range path {
			sec := int64(100 * (i + 1))
			if err := b.To(s, at(sec)); err != nil {
				t.Fatalf("%v: %v", path, err)
			}
			want[s] = sec
			for st, v := range stamps(b) {
				w, entered := want[st]
				switch {
				case entered && (v == nil || *v != w):
					t.Errorf("%v, after %s: %s's timestamp %v, want %d", path, s, st, v, w)
				case !entered && v != nil:
					t.Errorf("%v, after %s: %s's timestamp set", path, s, st)
				}
			}
		}
	}

	// A state entered again (a record written back with its stamp, a
	// retried step) keeps its first time.
	first := int64(50)
	tests := []struct {
		from, to Status
		preset   func(b *Batch)
	}{
		{Validating, InProgress, func(b *Batch) { b.InProgressAt = &first }},
		{InProgress, Finalizing, func(b *Batch) { b.FinalizingAt = &first }},
		{Cancelling, Finalizing, func(b *Batch) { b.FinalizingAt = &first }},
		{Finalizing, Completed, func(b *Batch) { b.CompletedAt = &first }},
		{Validating, Cancelling, func(b *Batch) { b.CancellingAt = &first }},
		{Cancelling, Cancelled, func(b *Batch) { b.CancelledAt = &first }},
		{Validating, Failed, func(b *Batch) { b.FailedAt = &first }},
		{Finalizing, Expired, func(b *Batch) { b.ExpiredAt = &first }},
	}
	for _, tt := range tests {
		b := &Batch{Status: tt.from}
		tt.preset(b)
		if err := b.To(tt.to, at(999)); err != nil {
			t.Fatalf("%s → %s: %v", tt.from, tt.to, err)
		}
		if p := *stampOf(b, tt.to); p == nil || *p != first || p != &first {
			t.Errorf("%s → %s: the recorded time changed to %v", tt.from, tt.to, p)
		}
	}

	// Scheduled → cancelled stamps the cancel; a template has no other time.
	tpl := &Batch{Status: Scheduled}
	if err := tpl.To(Cancelled, at(7)); err != nil || tpl.CancelledAt == nil || *tpl.CancelledAt != 7 || tpl.CancellingAt != nil {
		t.Errorf("template cancel: %v, %+v", err, stamps(tpl))
	}
	// Each stamp is its own value, not shared with the next transition's.
	b := &Batch{Status: InProgress}
	_ = b.To(Finalizing, at(1))
	_ = b.To(Completed, at(2))
	if *b.FinalizingAt != 1 || *b.CompletedAt != 2 {
		t.Errorf("stamps share storage: finalizing %d, completed %d", *b.FinalizingAt, *b.CompletedAt)
	}
}

func TestDue(t *testing.T) {
	t.Parallel()
	at := func(v int64) *int64 { return &v }
	cron := "* * * * *"
	grace := int64(Grace / time.Second)
	tests := []struct {
		name string
		b    Batch
		want int64
		ok   bool
	}{
		{"completed, settled", Batch{Status: Completed, ExpiresAt: at(10), FinalizeDue: 5, CompletedAt: at(900), Settled: true}, 0, false},
		{"failed, settled", Batch{Status: Failed, CreatedAt: 100, Settled: true}, 0, false},
		{"expired, settled", Batch{Status: Expired, CreatedAt: 100, Settled: true}, 0, false},
		{"cancelled, settled", Batch{Status: Cancelled, CreatedAt: 100, Settled: true}, 0, false},
		{"completed, follow-ups not recorded: after the grace", Batch{Status: Completed, CompletedAt: at(900), FinalizeDue: 5}, 900 + grace, true},
		{"cancelled, follow-ups not recorded", Batch{Status: Cancelled, CancellingAt: at(400), CancelledAt: at(450)}, 450 + grace, true},
		{"a cancelled template", Batch{Status: Cancelled, CancelledAt: at(450), Schedule: &cron}, 0, false},
		{"a template", Batch{Status: Scheduled, CreatedAt: 100}, 0, false},
		{"validating: the plan after the grace", Batch{Status: Validating, CreatedAt: 100}, 100 + grace, true},
		{"validating, plan leased: after the lease", Batch{Status: Validating, CreatedAt: 100, PlanLease: 300}, 300, true},
		{"validating, lease shorter than the grace", Batch{Status: Validating, CreatedAt: 100, PlanLease: 105}, 100 + grace, true},
		{"validating, window ends first", Batch{Status: Validating, CreatedAt: 100, PlanLease: 300, ExpiresAt: at(200)}, 200, true},
		{"validating, window ended: now", Batch{Status: Validating, CreatedAt: 100, ExpiresAt: at(110)}, 110, true},
		{"validating, recheck later than all", Batch{Status: Validating, CreatedAt: 100, ExpiresAt: at(110), Recheck: 500}, 500, true},
		{"cancelled before it planned", Batch{Status: Cancelling, CreatedAt: 100, CancellingAt: at(150)}, 100 + grace, true},
		{"planned, not started", Batch{Status: InProgress, CreatedAt: 100, ChunksTotal: 2, ExpiresAt: at(9000)}, 100 + grace, true},
		{"running: its window", Batch{Status: InProgress, ChunksTotal: 2, ChunksDone: 1, Started: true, ExpiresAt: at(9000)}, 9000, true},
		{"running without a window", Batch{Status: InProgress, ChunksTotal: 2, Started: true}, 0, false},
		{"every chunk done: the finalize", Batch{Status: InProgress, ChunksTotal: 2, ChunksDone: 2, Started: true, FinalizeDue: 700, ExpiresAt: at(9000)}, 700, true},
		{"finalizing with chunks left", Batch{Status: Finalizing, ChunksTotal: 2, ChunksDone: 1, Started: true, FinalizeDue: 800}, 800, true},
		{"cancelling: the drain after the grace", Batch{Status: Cancelling, ChunksTotal: 2, Started: true, CancellingAt: at(400), ExpiresAt: at(9000)}, 400 + grace, true},
		{"cancelling, every chunk done: the finalize", Batch{Status: Cancelling, ChunksTotal: 2, ChunksDone: 2, Started: true, CancellingAt: at(400), FinalizeDue: 450}, 450, true},
		{"rechecked later", Batch{Status: InProgress, ChunksTotal: 2, Started: true, ExpiresAt: at(9000), Recheck: 9100}, 9100, true},
		{"recheck earlier changes nothing", Batch{Status: InProgress, ChunksTotal: 2, Started: true, ExpiresAt: at(9000), Recheck: 10}, 9000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.b
			got, ok := b.Due()
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Due() = %d, %v; want %d, %v", got, ok, tt.want, tt.ok)
			}
			if !equalBatches(b, tt.b) {
				t.Fatal("Due changed the batch")
			}
		})
	}
}

func equalBatches(a, b Batch) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb) && a.Recheck == b.Recheck && a.PlanLease == b.PlanLease && a.FinalizeDue == b.FinalizeDue
}

func TestPastExpiry(t *testing.T) {
	t.Parallel()
	exp := int64(1000)
	tests := []struct {
		name      string
		expiresAt *int64
		now       time.Time
		want      bool
	}{
		{"no window", nil, time.Unix(1<<40, 0), false},
		{"before", &exp, time.Unix(999, 999_999_999), false},
		{"at the second", &exp, time.Unix(1000, 0), true},
		{"after", &exp, time.Unix(1001, 0), true},
	}
	for _, tt := range tests {
		b := Batch{ExpiresAt: tt.expiresAt}
		if got := b.PastExpiry(tt.now); got != tt.want {
			t.Errorf("%s: PastExpiry = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestOut(t *testing.T) {
	t.Parallel()
	errList := []jsonl.LineError{{Code: "invalid_json", Message: "line 2 is not JSON", Line: 2}}
	b := Batch{ID: "batch_1", Status: Failed, ErrorList: errList, Tenant: "acme", KeyID: "key_1", CSVModel: "m",
		Input: []Object{{Key: "k", Size: 1}}, ChunksTotal: 3, PlanLease: 9}
	out := b.Out()
	if out.Object != "batch" || out.Errors == nil || out.Errors.Object != "list" || !slices.Equal(out.Errors.Data, errList) {
		t.Fatalf("Out: object %q, errors %+v", out.Object, out.Errors)
	}
	if b.Object != "" || b.Errors != nil {
		t.Fatal("Out changed the batch it was called on")
	}
	if clean := (Batch{ID: "batch_2"}).Out(); clean.Errors != nil || clean.Object != "batch" {
		t.Fatalf("a batch without errors: %+v", clean)
	}

	// Clients see the OpenAI fields; the engine's own stay inside.
	raw, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "object", "endpoint", "errors", "input_file_id", "completion_window", "status", "output_file_id",
		"error_file_id", "created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
		"cancelling_at", "cancelled_at", "request_counts", "metadata"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("field %s missing from %s", f, raw)
		}
	}
	for _, f := range []string{"tenant", "key_id", "csv_model", "input", "chunks_total", "chunks_done", "recheck", "finalize_due",
		"started", "plan_lease", "expired_rows", "cancelled_rows", "output_expires_after", "Tenant", "ErrorList"} {
		if _, ok := fields[f]; ok {
			t.Errorf("internal field %s shown to clients", f)
		}
	}
}

func TestPartKeys(t *testing.T) {
	t.Parallel()
	c := Chunk{Tenant: "acme", Batch: "batch_1", Index: 2, Attempt: "run_9"}
	tests := []struct{ name, got, want string }{
		{"parts prefix", PartsPrefix("acme", "batch_1"), "parts/acme/batch_1/"},
		{"chunk parts prefix", ChunkPartsPrefix("acme", "batch_1", 2), "parts/acme/batch_1/000002-"},
		{"part key", PartKey("acme", "batch_1", 2, "run_9", "out"), "parts/acme/batch_1/000002-run_9.out"},
		{"committed part", c.Parts("err"), "parts/acme/batch_1/000002-run_9.err"},
		{"usage part", c.Parts("usage"), "parts/acme/batch_1/000002-run_9.usage"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	// Every part of a chunk is under its prefix, and under no other
	// chunk's: chunk 1's prefix is not a prefix of chunk 10's keys.
	for _, i := range []int{0, 1, 10, 100, 999_999} {
		k := PartKey("acme", "batch_1", i, "run", "out")
		for _, j := range []int{0, 1, 10, 100, 999_999} {
			if got := strings.HasPrefix(k, ChunkPartsPrefix("acme", "batch_1", j)); got != (i == j) {
				t.Errorf("part of chunk %d under chunk %d's prefix: %v", i, j, got)
			}
		}
		if !strings.HasPrefix(k, PartsPrefix("acme", "batch_1")) || strings.HasPrefix(PartKey("acme", "batch_10", i, "run", "out"), PartsPrefix("acme", "batch_1")) {
			t.Errorf("part %s: batch_1 and batch_10 share a prefix", k)
		}
	}
}

// Which terminal status a batch ends in, and that the lifecycle lets it
// get there from where it stands.
func TestFinalStatus(t *testing.T) {
	t.Parallel()
	at := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		b    Batch
		want Status
	}{
		{"every row completed", Batch{Status: InProgress, RequestCounts: Counts{Total: 3, Completed: 3}}, Completed},
		{"some rows failed", Batch{Status: InProgress, RequestCounts: Counts{Total: 3, Completed: 1, Failed: 2}}, Completed},
		{"every row failed", Batch{Status: InProgress, RequestCounts: Counts{Total: 3, Failed: 3}}, Completed},
		{"dead-lettered rows", Batch{Status: InProgress, RequestCounts: Counts{Total: 3, Completed: 2, Failed: 1}, DeadLetterCount: 1}, Completed},
		{"window passed after every row ran", Batch{Status: InProgress, ExpiresAt: at(1), RequestCounts: Counts{Total: 2, Completed: 2}}, Completed},
		{"a row got batch_expired", Batch{Status: InProgress, ExpiresAt: at(1), ExpiredRows: 1, RequestCounts: Counts{Total: 2, Completed: 1, Failed: 1}}, Expired},
		{"every row expired", Batch{Status: InProgress, ExpiredRows: 2, RequestCounts: Counts{Total: 2, Failed: 2}}, Expired},
		{"cancelled", Batch{Status: Cancelling, CancellingAt: at(5), CancelledRows: 2, RequestCounts: Counts{Total: 2, Failed: 2}}, Cancelled},
		{"cancelled after every row ran", Batch{Status: Cancelling, CancellingAt: at(5), RequestCounts: Counts{Total: 2, Completed: 2}}, Cancelled},
		{"cancelled and expired", Batch{Status: Cancelling, CancellingAt: at(5), ExpiredRows: 1, CancelledRows: 1}, Cancelled},
		{"already finalizing", Batch{Status: Finalizing, ExpiredRows: 1}, Expired},
		{"its input changed", Batch{Status: InProgress, ExpiredRows: 1, ErrorList: []jsonl.LineError{InputChanged("file-x")}}, Failed},
		{"its input changed, cancelled", Batch{Status: Cancelling, CancellingAt: at(5), ErrorList: []jsonl.LineError{InputChanged("file-x")}}, Cancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.b
			if got := FinalStatus(&b); got != tt.want {
				t.Fatalf("FinalStatus = %s, want %s", got, tt.want)
			}
			// FinalizeBatch moves it to finalizing, then to its status.
			if b.Status != Finalizing {
				if err := b.To(Finalizing, time.Unix(10, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.To(FinalStatus(&b), time.Unix(11, 0)); err != nil || !b.Status.Terminal() {
				t.Fatalf("to %s: %v", tt.want, err)
			}
		})
	}
}

// An input that cannot run fails its batch, unless the batch was being
// cancelled: then it ends cancelled.
func TestInvalidInputStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ from, want Status }{
		{Validating, Failed},
		{Cancelling, Cancelled},
	} {
		if got := InvalidInputStatus(tt.from); got != tt.want {
			t.Errorf("from %s: %s, want %s", tt.from, got, tt.want)
		}
		b := Batch{Status: tt.from}
		if err := b.To(InvalidInputStatus(tt.from), time.Unix(1, 0)); err != nil {
			t.Errorf("from %s: %v", tt.from, err)
		}
	}
}

func TestETA(t *testing.T) {
	t.Parallel()
	start := int64(1_000_000)
	now := time.Unix(start+100, 0)
	tests := []struct {
		name string
		b    Batch
		want int64 // 0: null
	}{
		// 250 of 1000 rows in 100 s: 750 left take 300 s.
		{"a quarter done", Batch{Status: InProgress, InProgressAt: &start, RequestCounts: Counts{Total: 1000, Completed: 200, Failed: 50}}, start + 400},
		{"no row settled yet", Batch{Status: InProgress, InProgressAt: &start, RequestCounts: Counts{Total: 1000}}, 0},
		{"validating", Batch{Status: Validating, RequestCounts: Counts{Total: 1000, Completed: 10}}, 0},
		{"finalizing", Batch{Status: Finalizing, InProgressAt: &start, RequestCounts: Counts{Total: 10, Completed: 10}}, 0},
		{"every row settled", Batch{Status: InProgress, InProgressAt: &start, RequestCounts: Counts{Total: 10, Completed: 10}}, start + 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.b.ETA(now)
			switch {
			case tt.want == 0 && got != nil:
				t.Fatalf("got %d, want null", *got)
			case tt.want != 0 && (got == nil || *got != tt.want):
				t.Fatalf("got %v, want %d", got, tt.want)
			}
		})
	}
}

// NextStep is what the tick does with a due batch and what relay admin
// batch requeue sends: the plan, the expiry of an unplanned batch, the
// finalize (of a terminal batch: its follow-ups), the drain, or nothing
// while its chunks carry it.
func TestNextStep(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	at := func(v int64) *int64 { return &v }
	for _, tt := range []struct {
		name string
		b    Batch
		want Step
	}{
		{"terminal", Batch{Status: Completed, ChunksTotal: 2, ChunksDone: 2, Started: true, Settled: true}, StepNone},
		{"terminal, follow-ups not recorded", Batch{Status: Completed, ChunksTotal: 2, ChunksDone: 2, Started: true}, StepFinalize},
		{"a template", Batch{Status: Scheduled, ExpiresAt: at(10)}, StepNone},
		{"validating", Batch{Status: Validating, ExpiresAt: at(5000)}, StepPlan},
		{"validating, window ended", Batch{Status: Validating, ExpiresAt: at(1000)}, StepExpire},
		{"cancelled before it planned", Batch{Status: Cancelling, ExpiresAt: at(10)}, StepPlan},
		{"planned, not started", Batch{Status: InProgress, ChunksTotal: 2, ExpiresAt: at(10)}, StepPlan},
		{"running", Batch{Status: InProgress, ChunksTotal: 2, ChunksDone: 1, Started: true, ExpiresAt: at(5000)}, StepNone},
		{"running past its window", Batch{Status: InProgress, ChunksTotal: 2, ChunksDone: 1, Started: true, ExpiresAt: at(1000)}, StepDrain},
		{"cancelling", Batch{Status: Cancelling, ChunksTotal: 2, Started: true}, StepDrain},
		{"every chunk done", Batch{Status: InProgress, ChunksTotal: 2, ChunksDone: 2, Started: true, ExpiresAt: at(10)}, StepFinalize},
		{"finalizing with chunks left", Batch{Status: Finalizing, ChunksTotal: 2, ChunksDone: 1, Started: true}, StepFinalize},
	} {
		if got := tt.b.NextStep(now); got != tt.want {
			t.Errorf("%s: NextStep = %d, want %d", tt.name, got, tt.want)
		}
	}
}
