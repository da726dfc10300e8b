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
