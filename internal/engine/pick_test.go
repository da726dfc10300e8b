package engine

import (
	"context"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/sched"
)

// A plan that ran again after chunk 0 was claimed put an entry at chunk 0
// back (sorting before the one the claim moved to chunk 1): the commit of
// chunk 0 must not pick its own chunk (one transaction writing it twice,
// refused forever), nor any chunk a claim took. The stale entry goes.
func TestPickNeverItsOwnChunk(t *testing.T) {
	t.Parallel()
	stale := sched.Ready{Model: "m", Batch: "x", Seq: 0, Next: 0, Total: 3}
	moved := sched.Ready{Model: "m", Batch: "x", Seq: 1, Next: 1, Total: 3}
	f := newSchedTable([]sched.Ready{moved, stale})
	self := batch.Chunk{Batch: "x", Index: 0, State: batch.ChunkClaimed}
	f.putChunk(self)
	c, err := pick(context.Background(), f, "m", 4, 0, time.Unix(1000, 0), &self)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || c.Entry.Batch != "x" || c.Entry.Next != 1 || c.After != 2 {
		t.Fatalf("picked %+v, want chunk 1 of x", c)
	}
	if rs := f.entries("m"); len(rs) != 1 || rs[0].SK() != moved.SK() {
		t.Fatalf("ready index %+v, want only the moved entry", rs)
	}
}

// An entry of a mixed-model batch whose chunk (read for its NextSame)
// turns out taken is dropped, and the next entry picked.
func TestPickDropsEntryAtTakenChunk(t *testing.T) {
	t.Parallel()
	taken := sched.Ready{Model: "m", Batch: "x", Seq: 0, Next: 1, Total: 4, Mixed: true}
	other := sched.Ready{Model: "m", Batch: "y", Seq: 3, Next: 0, Total: 1}
	f := newSchedTable([]sched.Ready{taken, other}, batch.Chunk{Batch: "x", Index: 1, State: batch.ChunkDone, NextSame: 3})
	c, err := pick(context.Background(), f, "m", 4, 0, time.Unix(1000, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || c.Entry.Batch != "y" {
		t.Fatalf("picked %+v, want batch y's chunk", c)
	}
	if rs := f.entries("m"); len(rs) != 1 {
		t.Fatalf("ready index %+v, want the entry at the done chunk dropped", rs)
	}
}

// Entries that keep pointing at taken chunks end the pick after maxPicks
// drops, with no claim.
func TestPickBounded(t *testing.T) {
	t.Parallel()
	f := newSchedTable(nil, batch.Chunk{Batch: "x", State: batch.ChunkDone})
	for i := range maxPicks + 5 {
		f.putEntry(sched.Ready{Model: "m", Batch: "x", Seq: int64(i), Total: 2, Mixed: true})
	}
	c, err := pick(context.Background(), f, "m", 4, 0, time.Unix(1000, 0), nil)
	if err != nil || c != nil {
		t.Fatalf("pick: %+v %v, want no claim", c, err)
	}
	if rs := f.entries("m"); len(rs) != 5 {
		t.Fatalf("%d entries left, want 5 (maxPicks dropped)", len(rs))
	}
}
