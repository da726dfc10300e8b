// Package sched is the scheduling vocabulary (docs/design.md "Scheduling"):
// a model's ready entries and their order, the claim of a chunk, the commit
// of a finished one, the capacity quotas of a model and the usage a commit
// adds. It is plain values: internal/store keeps them in DynamoDB,
// internal/plan and internal/part make them, internal/engine decides with
// them.
package sched

import (
	"fmt"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

// capShardSlots bounds one capacity item's slots, so the writes on one
// item stay far below what DynamoDB sustains on a single item
// (docs/design.md "Hot items").
const capShardSlots = 1000

// Quotas splits slots (a model's max_concurrency) into capacity shards of at most capShardSlots,
// as evenly as possible; their sum is slots, so max_concurrency stays exact.
func Quotas(slots int) []int {
	q := make([]int, max((slots+capShardSlots-1)/capShardSlots, 1))
	for i := range q {
		q[i] = slots / len(q)
		if i < slots%len(q) {
			q[i]++
		}
	}
	return q
}

// priorityBase turns priorities (-maxPriority…maxPriority) into sort
// keys that put the highest first.
const priorityBase = 1_000_000

// Ready is one entry of a model's ready index: a batch with chunks of the
// model left to claim, Next the first of them.
type Ready struct {
	Model    string `dynamodbav:"model"`
	Tenant   string `dynamodbav:"tenant"`
	Batch    string `dynamodbav:"batch"`
	Priority int    `dynamodbav:"priority"`
	Seq      int64  `dynamodbav:"seq"`
	Next     int    `dynamodbav:"next"`
	// Mixed says the batch has chunks of other models too, or chunks
	// outside the chain (batch.Chunk.Invalid): the chunk after Next is then
	// read from Next's NextSame, not Next+1.
	Mixed bool `dynamodbav:"mixed"`
	Total int  `dynamodbav:"total"`
	// Fallback marks the entry of one chunk of fallback rows
	// (Commit.Fallback): its key is its own, so the claims that move the
	// batch's entry of the model on never write over it.
	Fallback bool `dynamodbav:"fallback,omitempty"`
}

// SK orders entries: highest priority first, then the batch that has had
// the fewest chunks of this model (its sequence), so equal priorities take
// turns.
func (r Ready) SK() string {
	sk := ReadyPrefix(r.Priority) + fmt.Sprintf("%012d#%s", r.Seq, r.Batch)
	if r.Fallback {
		sk += fmt.Sprintf("#f%09d", r.Next)
	}
	return sk
}

// ReadyPrefix begins the sort key of every entry of priority p.
func ReadyPrefix(p int) string { return fmt.Sprintf("%07d#", priorityBase-p) }

// Claim takes chunk Entry.Next for a run.
type Claim struct {
	Entry Ready
	// After is the entry's chunk after Next; -1 removes the entry.
	After int
	Run   string
	Slots int
	Shard int
	Lease time.Time
	// Exec, if set, is the execution that runs the claimed chunk: the
	// claim takes the run's fence for it (docs/design.md "Scheduling",
	// continuations), so it starts without a fence take of its own.
	Exec string
}

// Next is the work message of the claimed chunk.
func (c Claim) Next() batch.Next {
	return batch.Next{Tenant: c.Entry.Tenant, Batch: c.Entry.Batch, Chunk: c.Entry.Next, Run: c.Run, Attempt: 1}
}

// Stepped is the claim's entry moved on past its chunk, one turn later;
// false when the claim takes the entry's last chunk (the entry goes).
func (c Claim) Stepped() (Ready, bool) {
	if c.After < 0 {
		return Ready{}, false
	}
	next := c.Entry
	next.Next, next.Seq = c.After, c.Entry.Seq+1
	return next, true
}

// Moves is what claims cs, made one after another in one write, do to
// their model's ready index: the entries they take out of it, each as it
// was before the first claim of it, and those they leave in it, each
// stepped past the last claim of it. A claim of an entry an earlier claim
// stepped is a claim of that same entry.
func Moves(cs []Claim) (taken, left []Ready) {
	origin := map[string]int{} // an entry's key now → its index in taken
	last := map[int]Ready{}    // index in taken → the entry left, if any
	for _, c := range cs {
		i, ok := origin[c.Entry.SK()]
		if ok {
			delete(origin, c.Entry.SK())
		} else {
			i = len(taken)
			taken = append(taken, c.Entry)
		}
		delete(last, i)
		if next, ok := c.Stepped(); ok {
			origin[next.SK()], last[i] = i, next
		}
	}
	for i := range taken {
		if r, ok := last[i]; ok {
			left = append(left, r)
		}
	}
	return taken, left
}

// Commit is what a finished chunk adds to its batch, and where its slots go.
type Commit struct {
	Chunk       batch.Chunk // with Run, Attempt, Pattern, OutBytes, ErrBytes set
	Completed   int64
	Failed      int64
	Expired     int64 // rows that got batch_expired
	Cancelled   int64 // rows that got batch_cancelled
	DeadLetters int64
	Usage       batch.Usage
	// UsageByModel aggregates per model for the tenant's daily usage, and
	// its usage by key (KeyID, the batch's) and batch.
	UsageByModel map[string]UsageAgg
	KeyID        string
	Day          string // YYYY-MM-DD (UTC) the usage is recorded under
	// ChunksTotal is the batch's; Last says this commit is its last chunk's
	// (then FinalizeDue is recorded for the tick).
	ChunksTotal int
	Last        bool
	FinalizeDue time.Time
	// Next claims the chunk the slots go on to; nil gives them back.
	Next *Claim
	// Fallback, if set, is a new chunk of the rows of Chunk owed their
	// fallback (docs/design.md "Scheduling", fallback rows): Chunk is then
	// cut to its other rows (plan.Split), and the commit is never its
	// batch's last.
	Fallback *FallbackChunk
	// ReleaseCost says the chunk's batch has a max_cost: the commit takes
	// the chunk's cost hold out of it (batch.Batch.CostHolds), its usage
	// counting instead.
	ReleaseCost bool
}

// FallbackChunk is a chunk a commit adds, pending, with its ready entry.
type FallbackChunk struct {
	// Chunk's Index is the batch's chunk count, the commit's condition.
	Chunk batch.Chunk
	// Ready is the chunk's entry in its model's index: Next its index,
	// Total one more, so its claim removes it (engine's following).
	Ready Ready
}

// UsageAgg is one model's requests and tokens: in a part (part.Part's
// ByModel), and what its commit adds to the tenant's daily usage. Native
// and Fallback are the shares of them that a provider's batch API
// answered (billed at its discount) and that the model answered as
// another's fallback: a batch's modes (docs/api.md "Extensions").
type UsageAgg struct {
	Requests, Input, Output, Total int64
	Native, Fallback               ModeAgg
}

// ModeAgg is the requests and tokens of one mode of a model's usage.
type ModeAgg struct {
	Requests, Input, Output int64
}

// Add adds u to a.
func (a *UsageAgg) Add(u UsageAgg) {
	a.Requests += u.Requests
	a.Input += u.Input
	a.Output += u.Output
	a.Total += u.Total
	a.Native.add(u.Native)
	a.Fallback.add(u.Fallback)
}

func (m *ModeAgg) add(u ModeAgg) {
	m.Requests += u.Requests
	m.Input += u.Input
	m.Output += u.Output
}
