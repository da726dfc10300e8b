package localstack

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/openai/openai-go/v3"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/lambdasqs"
	"github.com/relaybatch/relay/internal/local/esm"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
)

// shortLease makes a chunk whose run died go to a new run within seconds
// (a three-second lease, found by the one-second tick), while the
// work queue's visibility timeout stays far above it: recovery comes from
// the lease, and a message that comes back late is stale.
func shortLease(o *localrun.Options) {
	queueTimes(o, resources.Work, time.Minute, 30*time.Second)
	wire := o.Wire
	o.Wire = func(a *app.App) {
		// Not shorter: on a loaded machine a live run's heartbeat (every
		// third of the lease) could come too late, and a takeover would
		// run its rows twice.
		a.Engine.Lease = 3 * time.Second
		if wire != nil {
			wire(a)
		}
	}
}

func chunkOf(ev events.SQSEvent) msg.Message {
	var m msg.Message
	if len(ev.Records) > 0 {
		json.Unmarshal([]byte(ev.Records[0].Body), &m)
	}
	return m
}

// messagesOf decodes every work message of an invocation.
func messagesOf(ev events.SQSEvent) []msg.Message {
	ms := make([]msg.Message, len(ev.Records))
	for i, r := range ev.Records {
		json.Unmarshal([]byte(r.Body), &ms[i])
	}
	return ms
}

// hasChunk reports whether an invocation carries chunk i's work message.
func hasChunk(ev events.SQSEvent, i int) bool {
	for _, m := range messagesOf(ev) {
		if m.Type == msg.Chunk && m.Chunk == i {
			return true
		}
	}
	return false
}

// checkAccounting asserts the invariant and what the engine keeps beside
// it: usage counted once per answered row, and no part file left behind.
func checkAccounting(t testing.TB, rt *localrun.Runtime, c openai.Client, key string, b *openai.Batch, ids []string) (out, errs map[string]resultLine) {
	t.Helper()
	out, errs = checkInvariant(t, c, b, ids)
	answered := int64(0)
	for _, l := range out {
		if l.Response != nil {
			answered++
		}
	}
	for _, l := range errs {
		if l.Response != nil {
			answered++
		}
	}
	var usage struct {
		Data []struct {
			Requests int64 `json:"requests"`
		} `json:"data"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/usage"), &usage)
	var requests int64
	for _, d := range usage.Data {
		requests += d.Requests
	}
	if requests != answered {
		t.Errorf("usage counts %d requests, %d rows got an answer: usage must count each row once", requests, answered)
	}
	ctx := context.Background()
	chunks, err := rt.App.Store.Chunks(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string]bool{}
	for _, ch := range chunks {
		for _, kind := range []string{"out", "err", "usage"} {
			committed[ch.Parts(kind)] = true
		}
	}
	p, _ := rt.App.Store.GetBatch(ctx, "acme", b.ID)
	keys, err := rt.App.Blobs.List(ctx, batch.PartsPrefix(p.Tenant, b.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !committed[k] {
			t.Errorf("part %s is left behind: no committed chunk points to it", k)
		}
	}
	return out, errs
}

func TestFaultExecutorKilledMidChunk(t *testing.T) {
	t.Parallel()
	var crashed atomic.Bool
	rt := runtime(t, shortLease)
	// The chunk's rows have run and its parts are written; the executor dies
	// before it commits. Its lease runs out and a new run takes the chunk.
	rt.App.Engine.BeforeCommit = func(c batch.Chunk) error {
		if c.Index == 1 && crashed.CompareAndSwap(false, true) {
			return errors.New("simulated crash before commit")
		}
		return nil
	}
	c, key := client(t, rt, "acme")
	rows := nRows(30, "crash")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if !crashed.Load() || b.Status != "completed" {
		t.Fatalf("crashed=%v status=%s", crashed.Load(), b.Status)
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
	if got := rt.Mock.Stats().Requests; got != int64(len(rows))+10 {
		t.Fatalf("upstream requests: got %d, want %d (the crashed chunk's 10 rows ran twice)", got, len(rows)+10)
	}
}

func TestFaultDuplicateDelivery(t *testing.T) {
	t.Parallel()
	var once sync.Once
	var wg sync.WaitGroup
	var rt *localrun.Runtime
	rt = runtime(t, func(o *localrun.Options) {
		o.OnInvoke = func(fn string, ev events.SQSEvent) error {
			m := chunkOf(ev)
			switch {
			case fn == "executor" && hasChunk(ev, 0):
				// The same chunk message, delivered twice at once.
				once.Do(func() {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rt.App.Engine.Execute(context.Background(), lambdasqs.Deliveries(ev))
					}()
				})
			case fn == "finalizer":
				// A finalize message delivered twice.
				wg.Add(1)
				go func() {
					defer wg.Done()
					rt.App.Engine.FinalizeBatch(context.Background(), m.Tenant, m.Batch)
				}()
			}
			return nil
		}
	})
	c, key := client(t, rt, "acme")
	rows := nRows(25, "twice")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	wg.Wait()
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	checkAccounting(t, rt, c, key, b, idsOf(rows))
	// Finalizing again changes nothing.
	if err := rt.App.Engine.FinalizeBatch(context.Background(), "acme", b.ID); err != nil {
		t.Fatal(err)
	}
	again, err := c.Batches.Get(context.Background(), b.ID)
	if err != nil || again.CompletedAt != b.CompletedAt || again.OutputFileID != b.OutputFileID || again.RequestCounts.Completed != b.RequestCounts.Completed {
		t.Fatalf("after a repeated finalize: got %+v, want it unchanged", again)
	}
}

func TestFaultPoisonChunk(t *testing.T) {
	t.Parallel()
	var crashes atomic.Int64
	rt := runtime(t, shortLease, func(o *localrun.Options) {
		o.OnInvoke = func(fn string, ev events.SQSEvent) error {
			if fn == "executor" && hasChunk(ev, 2) {
				crashes.Add(1)
				return esm.ErrCrash // this chunk's executor dies every time
			}
			return nil
		}
		// The crash is injected per delivered message: chunk 2 must not
		// run as chunk 1's continuation, which has none.
		wire := o.Wire
		o.Wire = func(a *app.App) {
			if wire != nil {
				wire(a)
			}
			a.Engine.NoContinuations = true
		}
	})
	c, key := client(t, rt, "acme")
	rows := nRows(40, "poison")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	_, errs := checkAccounting(t, rt, c, key, b, idsOf(rows))
	for i := 20; i < 30; i++ {
		l := errs[rows[i].id]
		if l.Error == nil || l.Error.Code != "dead_letter" || l.Response != nil {
			t.Fatalf("row %s: got %+v, want a dead_letter error line", rows[i].id, l)
		}
	}
	if b.RequestCounts.Failed != 10 || crashes.Load() != int64(resources.WorkMaxReceiveCount) {
		t.Fatalf("failed %d (want 10), crashes %d (want %d)", b.RequestCounts.Failed, crashes.Load(), resources.WorkMaxReceiveCount)
	}
	var dl struct {
		Data []struct {
			CustomID string `json:"custom_id"`
			Error    string `json:"error"`
		} `json:"data"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+b.ID+"/dead_letters"), &dl)
	if len(dl.Data) != 10 || dl.Data[0].CustomID != rows[20].id {
		t.Fatalf("dead letters: got %+v", dl.Data)
	}
	var full struct {
		DeadLetterCount int64 `json:"dead_letter_count"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+b.ID), &full)
	if full.DeadLetterCount != 10 {
		t.Fatalf("dead_letter_count: got %d", full.DeadLetterCount)
	}
}

func TestFault429Storm(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	// A model that answers nothing but 429s, beside rows of a working model
	// that get three 429s each before an answer.
	rows := nRows(12, "[[mock:429x=3]] storm")
	for i := range rows[:6] {
		rows[i].model = "storm-ratelimited"
	}
	rt.Mock.SetOptions(mockup.Options{RetryAfter: 100 * time.Millisecond})
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID).ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	out, errs := checkAccounting(t, rt, c, key, b, idsOf(rows))
	for _, r := range rows[:6] {
		l := errs[r.id]
		if l.Response == nil || l.Response.StatusCode != 429 || l.Error != nil {
			t.Fatalf("storm row %s: got %+v, want the upstream's 429 kept", r.id, l)
		}
	}
	for _, r := range rows[6:] {
		if l := out[r.id]; l.Response == nil || l.Response.StatusCode != 200 || l.Fallback {
			t.Fatalf("row %s: got %+v, want a 200 from its own model after three 429s", r.id, l)
		}
	}
	if rt.Mock.Stats().ByStatus[429] < 6*4+6*3 {
		t.Fatalf("the mock answered too few 429s: %v", rt.Mock.Stats().ByStatus)
	}
}
