package store

import (
	"errors"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

// TestSchedFallbackEntryKeepsItsKey: a batch has chunks of model m (its
// entry at the head of m's index) and a chunk of another model whose rows
// fall back to m. The commit joins m's turn (JoinSeq: the head's sequence,
// the batch's own entry); the fallback entry's key names its chunk
// (Ready.Fallback), so the claims that move the batch's own entry of m on
// never write over it. Before, the keys were the same, the commit moved
// the fallback entry to the next sequence, and the next claim of the
// batch's own entry put its successor there, unconditionally: the fallback
// chunk stayed pending with no entry and the batch never ended (until its
// expiry drained it).
func TestSchedFallbackEntryKeepsItsKey(t *testing.T) {
	t.Parallel()
	s := newSchedTable(t)
	lease := time.Now().Add(time.Minute)
	// Chunks 0..2 of m: chunk 0 claimed (the entry moves to chunk 1, seq 1).
	c0 := s.claim(s.addBatch("batch_o", 0, 3), "run-0", 2, lease)

	// Chunk 0 stands in for a chunk of model z whose rows 2 and 4 are owed
	// m: its commit adds them as chunk 3 of m.
	cm := commitOf(c0, "att-0")
	cm.Completed = 3
	cm.Chunk.Pattern, cm.Chunk.Rows, cm.Chunk.Start, cm.Chunk.End, cm.Chunk.FirstRow = "ooo", 3, 0, 20, 0
	cm.Chunk.Spans = batch.Spans{{Start: 0, End: 10, Row: 0, Rows: 2}, {Start: 15, End: 20, Row: 3, Rows: 1}}
	cm.Chunk.Slots = 0 // a chunk of z: it gives z's slots back, none of m's
	seq, err := s.JoinSeq(s.ctx, "m", 0)
	if err != nil {
		t.Fatal(err)
	}
	fb := fallbackOf("batch_o", 3, seq)
	fb.Chunk.Model, fb.Ready.Model = "m", "m"
	cm.Fallback = fb
	for try := 0; ; try++ {
		err := s.CommitChunk(s.ctx, tenant, cm)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrRenumber) || try > 3 {
			t.Fatalf("commit with a fallback chunk of m: %v", err)
		}
		cm.Fallback.Ready.Seq++ // as Engine.commit does
	}

	// m's capacity claims the batch's chunks of m in turn.
	claimed := map[int]bool{}
	for range 6 {
		r, ok, err := s.ReadyHead(s.ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if err := s.ClaimFromPool(s.ctx, 8, claimOf(r, "run-m", 1, lease)); err != nil {
			t.Fatalf("claim %+v: %v", r, err)
		}
		claimed[r.Next] = true
	}
	if c := s.chunk("batch_o", 3); c.State == batch.ChunkPending && !claimed[3] {
		t.Fatalf("fallback chunk 3 still pending and m's ready index is empty (claimed %v): its entry was overwritten by a claim of its batch's own entry of m; the batch never ends", claimed)
	}
}
