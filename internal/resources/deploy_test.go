package resources

import (
	"testing"
	"time"
)

func TestExpiryTagFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want string
		ok   bool
	}{
		{time.Hour, "1d", true},
		{24 * time.Hour, "1d", true},
		{25 * time.Hour, "2d", true},
		{8 * 24 * time.Hour, "8d", true},
		{31*24*time.Hour + time.Second, "32d", true},
		{36 * 24 * time.Hour, "45d", true},
		{731 * 24 * time.Hour, "", false},
	} {
		got, ok := ExpiryTagFor(c.d)
		if got != c.want || ok != c.ok {
			t.Errorf("ExpiryTagFor(%v) = %q, %v; want %q, %v", c.d, got, ok, c.want, c.ok)
		}
	}
}

// Every tag ExpiryTagFor hands out has a lifecycle rule that keeps the
// object at least as long as asked.
func TestBucketExpiryCoversEveryTag(t *testing.T) {
	t.Parallel()
	rules := map[string]time.Duration{}
	for _, r := range Define("relay").BucketExpiry() {
		if r.TagValue != "" {
			rules[r.TagValue] = r.After
		}
	}
	for d := time.Hour; d <= 730*24*time.Hour; d += time.Hour {
		tag, _ := ExpiryTagFor(d)
		after, ok := rules[tag]
		if !ok || after < d || after >= d+max(d, 24*time.Hour) {
			t.Fatalf("ExpiryTagFor(%v) = %q, whose rule expires after %v", d, tag, after)
		}
	}
}

// A DLQ drained by a function keeps a message invisible longer than that
// function may run, and outlives its source queue's messages.
func TestDLQOutlastsItsConsumer(t *testing.T) {
	t.Parallel()
	s := Define("relay")
	for _, q := range s.Queues {
		d := q.DLQ()
		if d.Name != q.DLQName || d.Retention < q.Retention {
			t.Errorf("%s: DLQ %+v", q.Name, d)
		}
		for _, f := range s.Functions {
			if f.Queue == d.Name && d.VisibilityTimeout <= f.Timeout {
				t.Errorf("%s: visibility %v, consumer %s runs up to %v", d.Name, d.VisibilityTimeout, f.Name, f.Timeout)
			}
		}
	}
}

// No function may starve the others of the account's Lambda concurrency
// (docs/architecture.md "Concurrency"): every function but the executor
// has a reservation, which is also its maximum; a queue-fed one polls no
// more than it may run; the reservations stay well under an account's
// default limit, and the executor's maximum fits in what they leave.
func TestConcurrencyBudget(t *testing.T) {
	t.Parallel()
	s := Define("relay")
	for _, f := range s.Functions {
		switch {
		case f.Name == "executor":
			if f.Reserved != 0 || f.MaxConcurrency <= 0 || f.MaxConcurrency > MaxExecutorConcurrency {
				t.Errorf("executor: reserved %d, maximum %d; want no reservation and a maximum up to %d", f.Reserved, f.MaxConcurrency, MaxExecutorConcurrency)
			}
		case f.Reserved <= 0:
			t.Errorf("%s: no reserved concurrency", f.Name)
		case f.Queue != "" && (f.MaxConcurrency < minSQSConcurrency || f.MaxConcurrency > f.Reserved):
			t.Errorf("%s: event source maximum %d, reserved %d: want %d to the reservation", f.Name, f.MaxConcurrency, f.Reserved, minSQSConcurrency)
		}
	}
	if got := s.ReservedConcurrency(); got > AccountConcurrency/4 {
		t.Errorf("reservations add up to %d of an account's %d", got, AccountConcurrency)
	}
	if free := AccountConcurrency - s.ReservedConcurrency() - unreservedMinimum; MaxExecutorConcurrency > free {
		t.Errorf("executor maximum %d, but the reservations leave %d", MaxExecutorConcurrency, free)
	}
}

// The executor's maximum follows the models: an invocation with work holds
// at least one of their slots, so more than their total never all run.
func TestSizedForModels(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ slots, want int }{
		{0, MaxExecutorConcurrency}, {1, minSQSConcurrency}, {96, 96}, {100_000, MaxExecutorConcurrency},
	} {
		if got := Define("relay").SizedFor(c.slots).Function("executor").MaxConcurrency; got != c.want {
			t.Errorf("SizedFor(%d): executor maximum %d, want %d", c.slots, got, c.want)
		}
	}
	if Define("relay").SizedFor(10).Function("dispatcher") != Define("relay").Function("dispatcher") {
		t.Error("SizedFor changed another function")
	}
}
