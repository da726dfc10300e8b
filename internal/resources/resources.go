// Package resources is the one definition of the service's stateful AWS
// resources and functions: table, bucket, queues, schedule group, and which
// function consumes which queue. The CDK app (infra/) and the local runtime
// (internal/local/localrun) both build from it, so local and AWS cannot drift.
package resources

import (
	"slices"
	"time"
)

// Table is the single DynamoDB table (docs/design.md "Data layout").
type Table struct {
	Name         string
	PartitionKey string
	SortKey      string
	TTLAttribute string
	Indexes      []Index
}

// Index is a global secondary index projecting all attributes.
type Index struct {
	Name         string
	PartitionKey string
	SortKey      string
}

// Queue is an SQS standard queue with its dead-letter queue.
type Queue struct {
	Name              string
	DLQName           string
	VisibilityTimeout time.Duration
	MaxReceiveCount   int
	Retention         time.Duration
	// DLQVisibility is the dead-letter queue's visibility timeout; zero is
	// DLQVisibilityTimeout (chaos runs shorten it).
	DLQVisibility time.Duration
}

// Function is one Lambda function and, when it has one, the queue it consumes.
type Function struct {
	Name    string // functions/<Name>/main.go
	Timeout time.Duration
	Memory  int // MiB
	// TmpSize is its /tmp in MiB (0: Lambda's 512): the executor spools a
	// chunk's lines there past part.SpillAt (docs/design.md "Memory").
	TmpSize int
	// Queue is the name of the queue feeding it (a Queue's Name or DLQName), empty if none.
	Queue string
	// BatchSize is the event source mapping's batch size.
	BatchSize int
	// MaxConcurrency caps concurrent invocations from the event source (0: none).
	MaxConcurrency int
	// Reserved is the function's reserved concurrency, which Lambda both
	// guarantees and enforces as its maximum (0: none, it draws from the
	// account's unreserved pool). See Concurrency.
	Reserved int
}

// Set is every resource of one deployment.
type Set struct {
	Prefix        string
	Table         Table
	Bucket        string
	Queues        []Queue
	ScheduleGroup string
	Functions     []Function
	// PartsExpiry is how long chunk parts (parts/) live without a record pointing at them.
	PartsExpiry time.Duration
	// AuditRetention is how long the audit trail's objects (audit/, see
	// internal/audit) are kept.
	AuditRetention time.Duration
}

// Queue keys, used with Set.Queue.
const (
	Dispatch = "dispatch"
	Work     = "work"
	Finalize = "finalize"
	Webhook  = "webhook"
)

// Index names.
const (
	ByStatus   = "by-status"   // gsi1: active batches, oldest first
	ByTemplate = "by-template" // gsi2: runs of a template, newest first
	ByLease    = "by-lease"    // gsi3 (sparse): claimed chunks by lease expiry
	ByDue      = "by-due"      // gsi4 (sparse): active batches by when the tick must look at them
)

// DefaultAuditRetention keeps the audit trail 400 days: a year and a
// month, what audits of a year need.
const DefaultAuditRetention = 400 * 24 * time.Hour

// Function timeouts; each queue's visibility timeout is larger than its consumer's.
const (
	executorTimeout = 5 * time.Minute
	// WorkMaxReceiveCount is how many times a chunk is tried before the
	// dead-letter path: SQS receives of one message, and runs of one chunk
	// counted on its item (a lease takeover sends a fresh message).
	WorkMaxReceiveCount = 3
)

// Define returns the resources of a deployment whose names start with prefix.
func Define(prefix string) Set {
	q := func(key string, vis time.Duration, maxReceive int) Queue {
		return Queue{
			Name:              prefix + "-" + key,
			DLQName:           prefix + "-" + key + "-dlq",
			VisibilityTimeout: vis,
			MaxReceiveCount:   maxReceive,
			Retention:         4 * 24 * time.Hour,
		}
	}
	return Set{
		Prefix: prefix,
		Table: Table{
			Name:         prefix,
			PartitionKey: "pk",
			SortKey:      "sk",
			TTLAttribute: "ttl",
			Indexes: []Index{
				{Name: ByStatus, PartitionKey: "gsi1pk", SortKey: "gsi1sk"},
				{Name: ByTemplate, PartitionKey: "gsi2pk", SortKey: "gsi2sk"},
				{Name: ByLease, PartitionKey: "gsi3pk", SortKey: "gsi3sk"},
				{Name: ByDue, PartitionKey: "gsi4pk", SortKey: "gsi4sk"},
			},
		},
		Bucket: prefix + "-data",
		Queues: []Queue{
			q(Dispatch, 2*time.Minute, 5),
			q(Work, executorTimeout+time.Minute, WorkMaxReceiveCount),
			q(Finalize, 6*time.Minute, 5),
			// Ten receives, not five: a webhook message fails only on the
			// store or the queue, and nothing re-sends it from the DLQ (a
			// plan's and a finalize's are re-sent by the tick), while its
			// attempt is recorded once, so a receive more is harmless. Five
			// took one to its DLQ in make chaos (seed 99) under the run's
			// throttles.
			q(Webhook, time.Minute, 10),
		},
		ScheduleGroup: prefix,
		// Reservations and maxima: Concurrency. A queue-fed function's
		// event source runs no more than its reservation, since a throttled
		// invocation would count as a receive of its messages.
		Functions: []Function{
			// Buffered routes are cut at 29 s by API Gateway; streamed ones
			// (file content, results) may take up to 15 minutes. 100 is the
			// stage's throttle (100 requests/s) at 1 s each.
			{Name: "api", Timeout: 15 * time.Minute, Memory: 512, Reserved: 100},
			{Name: "dispatcher", Timeout: time.Minute, Memory: 512, Queue: prefix + "-" + Dispatch, BatchSize: 10, MaxConcurrency: 5, Reserved: 5},
			// An executor invocation runs the rows of up to 10 chunks (SQS's
			// most) through one pool of their slots: a row waiting on its
			// upstream costs a goroutine and a connection, so the more rows
			// an invocation holds, the fewer GB-seconds a row takes
			// (docs/design.md "Memory"). Upstream concurrency is bounded by the
			// models' max_concurrency (capacity is claimed per chunk), so the
			// event source runs up to their total (SizedFor), unreserved.
			{Name: "executor", Timeout: executorTimeout, Memory: 512, TmpSize: 4096, Queue: prefix + "-" + Work, BatchSize: WorkBatch, MaxConcurrency: MaxExecutorConcurrency},
			{Name: "deadletter", Timeout: time.Minute, Memory: 256, Queue: prefix + "-" + Work + "-dlq", BatchSize: 1, MaxConcurrency: minSQSConcurrency, Reserved: minSQSConcurrency},
			{Name: "finalizer", Timeout: 5 * time.Minute, Memory: 512, Queue: prefix + "-" + Finalize, BatchSize: 1, MaxConcurrency: 20, Reserved: 20},
			// Up to 100 attempts at once, each cut at webhook.DefaultTimeout;
			// a receiver that keeps failing is skipped (its circuit).
			{Name: "webhook", Timeout: 30 * time.Second, Memory: 256, Queue: prefix + "-" + Webhook, BatchSize: 10, MaxConcurrency: 10, Reserved: 10},
			{Name: "scheduler", Timeout: time.Minute, Memory: 256, Reserved: 10},
		},
		// 30 days of an output file's life (output_expires_after at most,
		// or the default) from its creation, which comes up to a batch's
		// 24-hour window and the finalize's hour after its parts were
		// written: 32 days (docs/design.md "Data layout").
		PartsExpiry:    32 * 24 * time.Hour,
		AuditRetention: DefaultAuditRetention,
	}
}

// Queue returns the queue with the given key (Dispatch, Work, …).
func (s Set) Queue(key string) Queue {
	for _, q := range s.Queues {
		if q.Name == s.Prefix+"-"+key {
			return q
		}
	}
	panic("resources: no queue " + key)
}

// Function returns the function with the given name.
func (s Set) Function(name string) Function {
	for _, f := range s.Functions {
		if f.Name == name {
			return f
		}
	}
	panic("resources: no function " + name)
}

// Concurrency budget (docs/architecture.md "Concurrency"). An account has
// AccountConcurrency Lambda executions per region by default, shared by
// every function in it; Lambda keeps unreservedMinimum of them unreserved.
// Every function but the executor reserves what it may use, so neither an
// executor fleet nor a flood of API requests can starve the others; the
// reservations add up to well under the account's limit, and the executor,
// unreserved, stops at MaxExecutorConcurrency, within what they leave.
const (
	// WorkBatch is the executor's batch size, SQS's most: the work
	// messages, so the chunks, one invocation takes at most (a claim's
	// slots grow with it on a large model, plan.Limits.SlotsFor).
	WorkBatch              = 10
	AccountConcurrency     = 1000
	MaxExecutorConcurrency = 500
	unreservedMinimum      = 100
	// minSQSConcurrency is the smallest maximum an SQS event source takes.
	minSQSConcurrency = 2
)

// ReservedConcurrency is the reservations of all the functions.
func (s Set) ReservedConcurrency() int {
	n := 0
	for _, f := range s.Functions {
		n += f.Reserved
	}
	return n
}

// SizedFor is s with the executor's maximum concurrency sized for models
// whose max_concurrency add up to slots (0: unknown, MaxExecutorConcurrency).
func (s Set) SizedFor(slots int) Set {
	fns := slices.Clone(s.Functions)
	for i, f := range fns {
		if f.Name == "executor" && slots > 0 {
			fns[i].MaxConcurrency = min(max(slots, minSQSConcurrency), MaxExecutorConcurrency)
		}
	}
	s.Functions = fns
	return s
}
