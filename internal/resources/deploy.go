package resources

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Settings the Set's fields leave implicit, shared by the CDK app and the
// local runtime like the rest of this package.

const (
	// DLQVisibilityTimeout is every dead-letter queue's visibility timeout:
	// larger than the timeout of the function draining one (deadletter).
	DLQVisibilityTimeout = 2 * time.Minute
	// DLQRetention is SQS's maximum. A standard queue's message keeps its
	// first enqueue time when redriven, so a DLQ must outlive its source.
	DLQRetention = 14 * 24 * time.Hour
)

// DLQ is q's dead-letter queue as a queue of its own (no redrive).
func (q Queue) DLQ() Queue {
	return Queue{Name: q.DLQName, VisibilityTimeout: cmp.Or(q.DLQVisibility, DLQVisibilityTimeout), Retention: DLQRetention}
}

// ExpiryTag is the S3 object tag that puts an object under one of the
// bucket's expiry lifecycle rules. Its values come from ExpiryTagFor: input
// files, upload parts and chunk parts carry the class their lifetime needs
// (docs/design.md "Expiry").
const ExpiryTag = "relay-expiry"

// ExpiryRule is one S3 lifecycle rule: objects under Prefix, and carrying
// ExpiryTag=TagValue when TagValue is set, expire After their creation.
type ExpiryRule struct {
	ID       string
	Prefix   string
	TagValue string
	After    time.Duration
}

// expiryDays are the classes an object's lifetime is rounded up to: S3
// lifecycle counts whole days, and one rule serves each class. Every day
// up to 35 (30 days of expires_after, plus a batch's window), then a few
// longer ones for a cancelled template's old input.
var expiryDays = func() []int {
	var ds []int
	for d := 1; d <= 35; d++ {
		ds = append(ds, d)
	}
	return append(ds, 45, 60, 90, 120, 180, 270, 365, 540, 730)
}()

// BucketExpiry is the bucket's lifecycle: chunk parts that no record points
// to (or whose records keep them no longer), and objects tagged with an
// expiry class.
func (s Set) BucketExpiry() []ExpiryRule {
	rules := []ExpiryRule{{ID: "parts", Prefix: "parts/", After: s.PartsExpiry}, {ID: "audit", Prefix: "audit/", After: s.AuditRetention}}
	for _, d := range expiryDays {
		tag := fmt.Sprintf("%dd", d)
		rules = append(rules, ExpiryRule{ID: "expiry-" + tag, TagValue: tag, After: time.Duration(d) * 24 * time.Hour})
	}
	return rules
}

// ExpiryOf is how long after their creation objects of class tag live.
func ExpiryOf(tag string) (time.Duration, bool) {
	var days int
	if _, err := fmt.Sscanf(tag, "%dd", &days); err != nil || !slices.Contains(expiryDays, days) {
		return 0, false
	}
	return time.Duration(days) * 24 * time.Hour, true
}

// ExpiryTagFor is the ExpiryTag value for an object that must live at
// least d from its creation: the shortest class that is long enough. ok is
// false when d is longer than every class (the object then has no
// lifecycle expiry).
func ExpiryTagFor(d time.Duration) (tag string, ok bool) {
	for _, days := range expiryDays {
		if time.Duration(days)*24*time.Hour >= d {
			return fmt.Sprintf("%dd", days), true
		}
	}
	return "", false
}

// Metrics the functions publish (CloudWatch embedded metric format in their
// JSON logs, so no IAM permission is needed) and the stack alarms on. Each
// carries the dimension MetricDimension with the Set's Prefix as value.
const (
	MetricNamespace = "Relay"
	MetricDimension = "Prefix"
	// MetricOldestBatchAge is the age in seconds of the oldest batch not yet
	// in a terminal state, published by the dispatcher on every tick.
	MetricOldestBatchAge = "OldestBatchAgeSeconds"
)

// OldestBatchAge is the log attributes that publish MetricOldestBatchAge,
// age seconds at now, for the deployment of prefix.
func OldestBatchAge(prefix string, now time.Time, age int64) []any {
	return []any{"_aws", map[string]any{"Timestamp": now.UnixMilli(), "CloudWatchMetrics": []any{map[string]any{
		"Namespace": MetricNamespace, "Dimensions": [][]string{{MetricDimension}},
		"Metrics": []any{map[string]string{"Name": MetricOldestBatchAge, "Unit": "Seconds"}},
	}}}, MetricDimension, prefix, MetricOldestBatchAge, age}
}
