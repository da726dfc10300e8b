package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/resources"
)

// TestDeadLetterOfADeletedInput: a chunk out of attempts whose input was
// deleted meanwhile is closed by the dead-letter function all the same,
// its rows named by number (docs/design.md "Message types", dead). Before,
// reading its custom ids failed (blob.ErrNotFound was not taken for a
// range that never reads again, as a replaced object is): the dead message
// came back, the chunk's lease ended, the tick took it over into a new
// dead message, and so on: the chunk never closed, its batch never ended
// and its slots were held for good.
func TestDeadLetterOfADeletedInput(t *testing.T) {
	t.Parallel()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 3, 2})
	c := table.chunkAt(0)
	c.Attempts = resources.WorkMaxReceiveCount + 1
	table.putChunk(c)
	e.Blobs = &goneAfter{memBucket: e.Blobs.(*memBucket)}
	m := msg.ForChunk(batch.Next{Tenant: c.Tenant, Batch: c.Batch, Chunk: c.Index, Run: c.Run, Attempt: c.Attempts})
	m.Type = msg.Dead
	body, _ := json.Marshal(m)

	failed, err := e.DeadLetter(context.Background(), []msg.Delivery{{ID: "dl", Body: string(body), ReceiveCount: 1}})

	if err != nil || len(failed) > 0 {
		t.Fatalf("DeadLetter: failed %v, err %v: want the chunk closed", failed, err)
	}
	if got := table.chunkAt(0); got.State != batch.ChunkDone || len(table.committed()) != 1 || table.committed()[0].DeadLetters != 3 {
		t.Fatalf("chunk %s, %d commits: want it committed with 3 dead letters", got.State, len(table.committed()))
	}
	usage, _ := e.Blobs.(*goneAfter).object(table.chunkAt(0).Parts("usage"))
	evs, err := part.ReadUsage(bytes.NewReader(usage))
	if err != nil {
		t.Fatal(err)
	}
	var dead []part.DeadLetter
	for _, ev := range evs {
		dead = append(dead, ev.DeadLetter())
	}
	if len(dead) != 3 || dead[2] != (part.DeadLetter{Row: 2, Reason: part.CodeDeadLetter, Error: part.DeadLetterMessage, Attempts: 3, Model: "x"}) {
		t.Errorf("dead letters %+v, want rows 0-2 by number, of model x, after their chunk's 3 runs", dead)
	}
}
