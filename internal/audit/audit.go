// Package audit is the audit trail (docs/runbook.md "Audit trail"): who did
// what — every state-changing API call and every chunk of rows run — kept in
// the bucket as hash-chained JSONL objects. Each writer (a function's
// execution environment, the local runtime) keeps a chain of its own, so
// no item is written by all of them: an object's first line names its
// chain, its place in it and the SHA-256 of the chain's previous object, and
// Verify finds the first object that was altered, removed or put in.
package audit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/ids"
)

// Prefix is where the bucket keeps the trail: Prefix<chain>/<seq:012>.jsonl.
const Prefix = "audit/"

// Entry is one action.
type Entry struct {
	Time   int64  `json:"time"` // unix milliseconds
	Tenant string `json:"tenant"`
	// KeyID is the key that acted: the caller of an API call, the
	// submitter of a batch whose rows a worker ran.
	KeyID string `json:"key_id"`
	// OnBehalfOf is set for work a function did for a key, not at its
	// call: rows run are on behalf of the batch's submitter.
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	Batch      string `json:"batch_id,omitempty"`
	// Action is an API call's method and route ("POST /v1/batches") or
	// "rows.run".
	Action string `json:"action"`
	// Outcome is an API call's HTTP status, or the rows' counts.
	Outcome string `json:"outcome"`
	Target  string `json:"target,omitempty"` // the path's object id, a chunk
}

// The actions and actors the functions record besides API calls.
const (
	RowsRun  = "rows.run" // a chunk of rows ran, on behalf of its batch's submitter
	Executor = "service:executor"
)

// header is an object's first line.
type header struct {
	Chain string `json:"chain"`
	Seq   int64  `json:"seq"`
	Prev  string `json:"prev"` // hex SHA-256 of the chain's previous object, "" for the first
	Count int    `json:"count"`
	// Sum is the hex SHA-256 of the object's entry lines: an entry of a
	// chain's last object altered by accident shows too (one altered on
	// purpose can have its Sum made again: nothing links to it yet).
	Sum string `json:"sum"`
}

// Putter writes an object (blob.Store).
type Putter interface {
	Put(ctx context.Context, key string, body []byte) error
}

// Chain is one writer's chain. Add keeps entries; Flush writes them as the
// chain's next object. Safe for concurrent use: an Add never waits for a
// Flush's write.
type Chain struct {
	put Putter
	id  string

	mu      sync.Mutex // guards pending
	pending []Entry

	flushMu sync.Mutex // guards seq and prev: one Flush writes at a time
	seq     int64
	prev    string
}

// NewChain starts a chain named after now (so chains list in the order
// they began) and a random part.
func NewChain(put Putter, now time.Time) *Chain {
	return &Chain{put: put, id: now.UTC().Format("20060102T150405") + "-" + ids.Secret(6)}
}

// Add keeps e for the next Flush.
func (c *Chain) Add(e Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, e)
}

// Flush writes the entries kept so far as the chain's next object; nothing
// when there are none. On an error they are kept again, and a later Flush
// writes them at the same place.
func (c *Chain) Flush(ctx context.Context) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	es := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(es) == 0 {
		return nil
	}
	body, err := encode(header{Chain: c.id, Seq: c.seq, Prev: c.prev, Count: len(es)}, es)
	if err == nil {
		err = c.put.Put(ctx, Key(c.id, c.seq), body)
	}
	if err != nil {
		c.mu.Lock()
		c.pending = append(es, c.pending...)
		c.mu.Unlock()
		return fmt.Errorf("audit: write %s: %w", Key(c.id, c.seq), err)
	}
	c.seq, c.prev = c.seq+1, digest(body)
	return nil
}

// Key is the key of a chain's object seq.
func Key(chain string, seq int64) string { return fmt.Sprintf("%s%s/%012d.jsonl", Prefix, chain, seq) }

func encode(h header, es []Entry) ([]byte, error) {
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	for _, e := range es {
		if err := enc.Encode(e); err != nil {
			return nil, err
		}
	}
	h.Sum = digest(lines.Bytes())
	head, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return slices.Concat(head, []byte("\n"), lines.Bytes()), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Object is a stored object of the trail.
type Object struct {
	Key  string
	Body []byte
}

// Break is where a chain stops verifying.
type Break struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// Verify checks every chain among objs: each object parses, sits where its
// header says, counts its entries, and names the digest of the object
// before it, from seq 0 on. It returns the first break of each chain, by
// key, and the entries of the objects that verified.
func Verify(objs []Object) ([]Break, []Entry) {
	byChain := map[string][]Object{}
	for _, o := range objs {
		chain, _, _ := strings.Cut(strings.TrimPrefix(o.Key, Prefix), "/")
		byChain[chain] = append(byChain[chain], o)
	}
	var breaks []Break
	var entries []Entry
	for _, chain := range slices.Sorted(maps.Keys(byChain)) {
		os := byChain[chain]
		slices.SortFunc(os, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
		prev := ""
		for seq, o := range os {
			es, reason := check(o, chain, int64(seq), prev)
			if reason != "" {
				breaks = append(breaks, Break{Key: o.Key, Reason: reason})
				break
			}
			entries = append(entries, es...)
			prev = digest(o.Body)
		}
	}
	return breaks, entries
}

// check verifies one object as the chain's seq-th after prev.
func check(o Object, chain string, seq int64, prev string) ([]Entry, string) {
	if o.Key != Key(chain, seq) {
		return nil, fmt.Sprintf("object %d of chain %s is missing: the next is %s", seq, chain, o.Key)
	}
	head, lines, _ := bytes.Cut(o.Body, []byte("\n"))
	var h header
	if json.Unmarshal(head, &h) != nil {
		return nil, "no header line"
	}
	switch {
	case h.Chain != chain || h.Seq != seq:
		return nil, fmt.Sprintf("its header says chain %s object %d", h.Chain, h.Seq)
	case h.Prev != prev:
		return nil, "the previous object's digest differs: it or the one before was altered"
	case h.Sum != digest(lines):
		return nil, "its entries' digest differs: an entry was altered"
	}
	sc := bufio.NewScanner(bytes.NewReader(lines))
	sc.Buffer(nil, 16<<20)
	var es []Entry
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Sprintf("entry %d is not JSON", len(es)+1)
		}
		es = append(es, e)
	}
	if len(es) != h.Count {
		return nil, fmt.Sprintf("%d entries, its header says %d", len(es), h.Count)
	}
	return es, ""
}
