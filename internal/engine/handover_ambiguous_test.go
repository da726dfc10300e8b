package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// afterHandOver is a runsTable whose first HandOver takes effect and then
// fails, as an AWS call that timed out after its write.
type afterHandOver struct {
	*runsTable
	once sync.Once
}

func (f *afterHandOver) HandOver(ctx context.Context, b string, i int, run, exec string, until time.Time) error {
	err := f.runsTable.HandOver(ctx, b, i, run, exec, until)
	f.once.Do(func() {
		if err == nil {
			err = errors.New("RequestTimeout: the hand-over took effect")
		}
	})
	return err
}

// TestHandOverThatTookEffectSendsTheMessage: a commit claims chunk 1 for
// the invocation (its fence taken with the claim), which no longer runs it
// when the commit lands; the hand-over of its fence to its work message
// takes effect although its call fails. The message is still sent, so its
// delivery runs the chunk at once. Before, SendAgain returned the
// hand-over's error and sent nothing: chunk 1 waited, claimed, for its
// lease's end and a takeover (an attempt).
func TestHandOverThatTookEffectSendsTheMessage(t *testing.T) {
	t.Parallel()
	e, table, _ := continuationFixture(t)
	e.Store = &afterHandOver{runsTable: table}
	executeRefusingContinuation(t, e, table)

	sent := false
	for _, m := range workMessages(e.Queue.(*lockedQueue)) {
		sent = sent || (m.Chunk == 1 && m.Run == table.chunkAt(1).Run)
	}
	if !sent {
		t.Errorf("chunk 1 %s, no work message: left to its lease's end", table.chunkAt(1).State)
	}
}
