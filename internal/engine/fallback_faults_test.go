package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// slowProvider answers through p after delay, or is cut short by ctx.
type slowProvider struct {
	p     Provider
	delay time.Duration
}

func (s slowProvider) Do(ctx context.Context, ep string, body json.RawMessage, route provider.Route) inference.Result {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return inference.Result{ErrCode: inference.CodeRequestCancelled, ErrMessage: "cut short"}
	}
	return s.p.Do(ctx, ep, body, route)
}

// workMessages are the chunk messages q was sent.
func workMessages(q *lockedQueue) []msg.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []msg.Message
	for _, m := range q.sent {
		if m.Type == msg.Chunk {
			out = append(out, m)
		}
	}
	return out
}

// TestSplitOfFallbackChunkStaysFallback: a chunk of fallback rows (model
// y, its rows' own model x) that stops for want of time splits; its rest
// is still a fallback chunk, run on y (Route.On). Before, plan.Split built
// the rest without Fallback, and its run sent the rows to x on y's slots.
func TestSplitOfFallbackChunkStaysFallback(t *testing.T) {
	t.Parallel()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 40, 2})
	c := table.chunkAt(0)
	c.Model, c.Fallback = "y", true
	table.putChunk(c)
	fp := &fallbackProvider{sent: map[string][]int{}}
	e.Provider = slowProvider{p: fp, delay: 20 * time.Millisecond}
	q := e.Queue.(*lockedQueue)
	ctx, cancel := context.WithTimeout(context.Background(), 2200*time.Millisecond)
	defer cancel()

	if failed, err := e.Execute(ctx, []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")}); err != nil || len(failed) > 0 {
		t.Fatalf("first invocation: failed %v, err %v", failed, err)
	}
	if len(table.committed()) != 1 {
		t.Fatalf("%d commits, want 1 (a split)", len(table.committed()))
	}
	rest := table.chunkAt(1)
	if rest.Model != "y" || !rest.Fallback {
		t.Errorf("split rest of a fallback chunk: model %q fallback %v, want model y, fallback true", rest.Model, rest.Fallback)
	}
	ms := workMessages(q)
	if len(ms) != 1 {
		t.Fatalf("work messages %v, want the rest's", ms)
	}
	body, _ := json.Marshal(ms[0])
	if failed, err := e.Execute(context.Background(), []msg.Delivery{{ID: "d1", Body: string(body), ReceiveCount: 1}}); err != nil || len(failed) > 0 {
		t.Fatalf("rest's invocation: failed %v, err %v", failed, err)
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if got := fp.sent["x"]; len(got) > 0 {
		t.Errorf("rows %v of the fallback chunk's rest sent to x on y's slots", got)
	}
}

// renumberTable answers a commit that adds a fallback chunk with
// ErrRenumber, its count taken by another commit each time, for the first
// renumbers calls: the batch's other chunks adding theirs at once.
type renumberTable struct {
	*runsTable
	mu        sync.Mutex
	renumbers int
}

func (f *renumberTable) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	f.mu.Lock()
	if cm.Fallback != nil && f.renumbers > 0 {
		f.renumbers--
		f.mu.Unlock()
		if _, err := f.UpdateBatch(ctx, tenant, f.id, func(b *batch.Batch) error { b.ChunksTotal++; return nil }); err != nil {
			return err
		}
		return store.ErrRenumber
	}
	f.mu.Unlock()
	return f.runsTable.CommitChunk(ctx, tenant, cm)
}

// TestCommitOutOfTriesIsAnError: a commit refused with ErrRenumber on each
// of its tries took no effect and is an error, so the run goes back to the
// queue. Before, it returned (false, nil): the run ended as a success, its
// chunk stayed claimed until its lease ended, and the takeover ran every
// row again.
func TestCommitOutOfTriesIsAnError(t *testing.T) {
	t.Parallel()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 6, 2})
	e.Provider = &fallbackProvider{sent: map[string][]int{}}
	e.Store = &renumberTable{runsTable: table, renumbers: commitTries}
	q := e.Queue.(*lockedQueue)

	failed, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")})

	if err != nil {
		t.Fatal(err)
	}
	if len(table.committed()) == 0 && len(failed) == 0 && len(workMessages(q)) == 0 {
		t.Fatalf("chunk 0 %s, no commit took effect, yet its delivery ended as a success (no failure, no message sent again)", table.chunkAt(0).State)
	}
}

// joinSeqTable fails JoinSeq the first time (a throttled Query).
type joinSeqTable struct {
	*runsTable
	mu    sync.Mutex
	fails int
}

func (f *joinSeqTable) JoinSeq(ctx context.Context, model string, prio int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return 0, errors.New("ThrottlingException: rate exceeded")
	}
	return 0, nil
}

// TestJoinSeqFailureCommitsAllTheSame: a throttled JoinSeq (the fallback
// entry's place in its model's turn) does not fail the commit: the entry
// goes at the front of its priority. Before, the run went back to the
// queue and its next delivery sent every row again.
func TestJoinSeqFailureCommitsAllTheSame(t *testing.T) {
	t.Parallel()
	e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 6, 2})
	fp := &fallbackProvider{sent: map[string][]int{}}
	e.Provider = fp
	e.Store = &joinSeqTable{runsTable: table, fails: 1}
	q := e.Queue.(*lockedQueue)

	if failed, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")}); err != nil || len(failed) > 0 {
		t.Fatalf("failed %v, err %v", failed, err)
	}
	// Its message's next delivery, if it was sent again.
	for _, m := range workMessages(q) {
		body, _ := json.Marshal(m)
		if _, err := e.Execute(context.Background(), []msg.Delivery{{ID: "d1", Body: string(body), ReceiveCount: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if n := len(fp.sent["x"]); n != 6 {
		t.Errorf("%d requests to x for its 6 rows (%v): the chunk ran again after a throttled JoinSeq", n, fp.sent["x"])
	}
}

// ambiguousTable takes a commit and reports an error (a timeout after the
// transaction took effect).
type ambiguousTable struct {
	*freeSlotsTable
	once sync.Once
}

func (f *ambiguousTable) CommitChunk(ctx context.Context, tenant string, cm sched.Commit) error {
	err := f.runsTable.CommitChunk(ctx, tenant, cm)
	fail := false
	f.once.Do(func() { fail = err == nil })
	if fail {
		return errors.New("RequestTimeout: the commit may have taken effect")
	}
	return err
}

// TestSettledFallbackCommitStartsTheFallback: a commit that adds a
// fallback chunk, took effect and failed (settle finds it ours) claims
// from the fallback model's capacity as a commit whose call succeeded
// does (startFallback). Before, the fallback chunk waited for the tick.
func TestSettledFallbackCommitStartsTheFallback(t *testing.T) {
	t.Parallel()
	e, table, ft := fallbackStartFixture(t)
	e.Store = &ambiguousTable{freeSlotsTable: ft}

	if failed, err := e.Execute(context.Background(), []msg.Delivery{workDelivery(t, table.chunkAt(0), "d0")}); err != nil || len(failed) > 0 {
		t.Fatalf("failed %v, err %v", failed, err)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if table.b().ChunksTotal != 2 || !slices.Contains(ft.asked, "y") {
		t.Fatalf("chunks %d, free capacity asked of %v: want the fallback chunk added and y's capacity asked", table.b().ChunksTotal, ft.asked)
	}
}
