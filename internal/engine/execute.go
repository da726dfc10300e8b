package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// Line is one line of an output or error file, as OpenAI writes them.
type Line struct {
	ID       string        `json:"id"`
	CustomID string        `json:"custom_id"`
	Response *LineResponse `json:"response"`
	Error    *LineError    `json:"error"`
	Fallback bool          `json:"fallback,omitempty"`
}

// LineResponse is the upstream's HTTP answer.
type LineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// LineError is a row that got no HTTP answer.
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// UsageEvent is one row's usage, written with its chunk's part.
type UsageEvent struct {
	Source       string `json:"source"`
	Tenant       string `json:"tenant"`
	KeyID        string `json:"key_id"`
	BatchID      string `json:"batch_id"`
	CustomID     string `json:"custom_id"`
	Model        string `json:"model"`
	Fallback     bool   `json:"fallback"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	TotalTokens  int64  `json:"total_tokens"`
	At           int64  `json:"at"`
}

// Error codes of rows that got no upstream answer.
const (
	CodeCancelled  = "batch_cancelled"
	CodeExpired    = "batch_expired"
	CodeDeadLetter = "dead_letter"
)

// Execute is the executor function's SQS handler (batch size 1).
func (e *Engine) Execute(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	for _, rec := range ev.Records {
		var m Message
		if err := json.Unmarshal([]byte(rec.Body), &m); err != nil || m.Type != MsgChunk {
			e.Log.ErrorContext(ctx, "undecodable work message dropped", "message_id", rec.MessageId)
			continue
		}
		if err := e.RunChunk(ctx, m, rec.ReceiptHandle); err != nil {
			e.Log.ErrorContext(ctx, "chunk failed", "batch_id", m.Batch, "chunk", m.Chunk,
				"receive_count", rec.Attributes["ApproximateReceiveCount"], "err", err)
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
		}
	}
	return resp, nil
}

// outcome is one row's result.
type outcome struct {
	customID string
	res      provider.Result
	code     string // set when the row got no HTTP answer
	message  string
}

// RunChunk runs one chunk's rows and commits its part. receipt, if set, is
// the work message's receipt handle, whose visibility is extended while the
// chunk runs.
func (e *Engine) RunChunk(ctx context.Context, m Message, receipt string) error {
	b, err := e.Store.GetBatch(ctx, m.Tenant, m.Batch)
	if errors.Is(err, store.ErrBatchNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	c, err := e.Store.GetChunk(ctx, m.Batch, m.Chunk)
	if err != nil {
		return err
	}
	switch c.State {
	case batch.ChunkDone:
		// A duplicate, or the redelivery of a run that died: remove what
		// runs that did not commit wrote, then make sure what follows a
		// commit happened.
		if err := e.sweepParts(ctx, c); err != nil {
			return err
		}
		return e.afterCommit(ctx, b)
	case batch.ChunkPending:
		return fmt.Errorf("chunk %d of %s is not released yet", c.Index, c.Batch)
	}
	data, err := e.readRange(ctx, b.Input, c.Start, c.End)
	if err != nil {
		return fmt.Errorf("read chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	reqs, err := jsonl.ParseRequests(data)
	if err != nil {
		return fmt.Errorf("parse chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	if len(reqs) != c.Rows {
		return fmt.Errorf("chunk %d of %s: %d rows in its range, %d planned", c.Index, c.Batch, len(reqs), c.Rows)
	}

	// Stop early enough to leave the chunk cleanly for redelivery.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		margin := max(2*time.Second, time.Until(dl)/10)
		var c2 context.CancelFunc
		runCtx, c2 = context.WithDeadline(runCtx, dl.Add(-margin))
		defer c2()
	}
	if receipt != "" {
		go e.heartbeat(runCtx, receipt)
	}
	status := e.watchStatus(runCtx, b)
	if isWorkflowChunk(c, reqs) {
		return e.runWorkflow(ctx, runCtx, b, c, reqs[0], status)
	}

	outs := make([]outcome, len(reqs))
	slots := max(c.Slots, 1)
	sem := make(chan struct{}, slots)
	var wg sync.WaitGroup
	fallback := ""
	if b.FallbackModel != nil {
		fallback = *b.FallbackModel
	}
	for i, r := range reqs {
		select {
		case sem <- struct{}{}:
		case <-runCtx.Done():
		}
		if runCtx.Err() != nil {
			break
		}
		outs[i].customID = r.CustomID
		// Row boundary: a cancel or the end of the window stops new rows.
		switch {
		case status.Load().(batch.Status) == batch.Cancelling || status.Load().(batch.Status) == batch.Cancelled:
			outs[i].code, outs[i].message = CodeCancelled, "the batch was cancelled before this request ran"
			<-sem
			continue
		case b.PastExpiry(e.now()):
			outs[i].code, outs[i].message = CodeExpired, "the batch's completion window ended before this request ran"
			<-sem
			continue
		}
		wg.Add(1)
		go func(i int, body json.RawMessage) {
			defer wg.Done()
			defer func() { <-sem }()
			outs[i].res = e.Provider.Do(runCtx, b.Endpoint, body, fallback)
		}(i, r.Body)
	}
	wg.Wait()
	if runCtx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("chunk %d of %s: %w", c.Index, c.Batch, errStop)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return e.commit(ctx, b, c, outs)
}

// heartbeat keeps the work message invisible while the chunk runs.
func (e *Engine) heartbeat(ctx context.Context, receipt string) {
	vis := e.Set.Queue(resources.Work).VisibilityTimeout
	t := time.NewTicker(vis / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := e.Queue.ExtendVisibility(ctx, resources.Work, receipt, vis); err != nil && ctx.Err() == nil {
				e.Log.WarnContext(ctx, "extend visibility", "err", err)
			}
		}
	}
}

// watchStatus keeps a cached copy of the batch's status fresh, so rows can
// check for a cancel without an AWS request each.
func (e *Engine) watchStatus(ctx context.Context, b batch.Batch) *atomic.Value {
	var v atomic.Value
	v.Store(b.Status)
	every := e.StatusRefresh
	if every <= 0 {
		every = 3 * time.Second
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if nb, err := e.Store.GetBatch(ctx, b.Tenant, b.ID); err == nil {
					v.Store(nb.Status)
				}
			}
		}
	}()
	return &v
}

// lineID is a stable id for a row's line.
func lineID(batchID string, row int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s:%d", batchID, row))
	return "batch_req_" + hex.EncodeToString(sum[:12])
}

// commit writes the chunk's part and commits it.
func (e *Engine) commit(ctx context.Context, b batch.Batch, c batch.Chunk, outs []outcome) error {
	return e.commitWith(ctx, b, c, outs, 0)
}

// commitWith is commit with deadLetters of the rows counted as dead letters.
func (e *Engine) commitWith(ctx context.Context, b batch.Batch, c batch.Chunk, outs []outcome, deadLetters int64) error {
	var out, errb, usage bytes.Buffer
	pattern := make([]byte, len(outs))
	cm := store.Commit{UsageByModel: map[string]store.UsageAgg{}, Day: e.now().UTC().Format("2006-01-02"), DeadLetters: deadLetters}
	enc := func(w *bytes.Buffer, v any) {
		line, _ := json.Marshal(v)
		w.Write(line)
		w.WriteByte('\n')
	}
	addUsage := func(o outcome) {
		u := o.res.Usage
		cm.Usage.InputTokens += u.InputTokens
		cm.Usage.OutputTokens += u.OutputTokens
		cm.Usage.TotalTokens += u.TotalTokens
		agg := cm.UsageByModel[o.res.Model]
		agg.Requests++
		agg.Input += u.InputTokens
		agg.Output += u.OutputTokens
		agg.Total += u.TotalTokens
		cm.UsageByModel[o.res.Model] = agg
		enc(&usage, UsageEvent{Source: "batch", Tenant: b.Tenant, KeyID: b.KeyID, BatchID: b.ID, CustomID: o.customID,
			Model: o.res.Model, Fallback: o.res.Fallback, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			TotalTokens: u.TotalTokens, At: e.now().Unix()})
	}
	for i, o := range outs {
		row := c.FirstRow + i
		l := Line{ID: lineID(b.ID, row), CustomID: o.customID}
		switch {
		case o.code != "":
			l.Error = &LineError{Code: o.code, Message: o.message}
			if o.code == CodeExpired {
				cm.Expired++
			}
			// A workflow record that failed after running requests used
			// upstream tokens all the same.
			if o.res.Model != "" && o.res.Usage != (provider.Usage{}) {
				addUsage(o)
			}
		case o.res.ErrCode != "":
			l.Error = &LineError{Code: o.res.ErrCode, Message: o.res.ErrMessage}
		default:
			l.Response = &LineResponse{StatusCode: o.res.StatusCode, RequestID: o.res.RequestID, Body: o.res.Body}
			l.Fallback = o.res.Fallback
			addUsage(o)
		}
		if l.Response != nil && l.Response.StatusCode >= 200 && l.Response.StatusCode < 300 {
			pattern[i] = 'o'
			cm.Completed++
			enc(&out, l)
		} else {
			pattern[i] = 'e'
			cm.Failed++
			enc(&errb, l)
		}
	}
	c.Attempt, c.Pattern = ids.Secret(6), string(pattern)
	c.OutBytes, c.ErrBytes = int64(out.Len()), int64(errb.Len())
	return e.commitParts(ctx, b, c, cm, map[string][]byte{"out": out.Bytes(), "err": errb.Bytes(), "usage": usage.Bytes()})
}

// commitParts writes a chunk's parts under its attempt's keys, then commits
// the chunk in one transaction. A duplicate that lost the race deletes the
// parts it wrote.
func (e *Engine) commitParts(ctx context.Context, b batch.Batch, c batch.Chunk, cm store.Commit, parts map[string][]byte) error {
	var written []string
	for kind, data := range parts {
		if len(data) == 0 {
			continue
		}
		k := c.Parts(kind)
		if err := e.Blobs.Put(ctx, k, bytes.NewReader(data), int64(len(data))); err != nil {
			return fmt.Errorf("write part %s: %w", k, err)
		}
		written = append(written, k)
	}
	if e.BeforeCommit != nil {
		if err := e.BeforeCommit(c); err != nil {
			return err
		}
	}
	cm.Chunk = c
	err := e.Store.CommitChunk(ctx, b.Tenant, cm)
	if errors.Is(err, store.ErrChunkDone) {
		e.Log.InfoContext(ctx, "duplicate chunk run discarded", "batch_id", b.ID, "chunk", c.Index)
		_ = e.Blobs.Delete(ctx, written...)
		return e.afterCommit(ctx, b)
	}
	if err != nil {
		return err
	}
	return e.afterCommit(ctx, b)
}

// afterCommit finalizes the batch if every chunk is done and lets the
// dispatcher use the capacity the chunk gave back.
func (e *Engine) afterCommit(ctx context.Context, b batch.Batch) error {
	nb, err := e.Store.GetBatch(ctx, b.Tenant, b.ID)
	if err != nil {
		return err
	}
	if nb.ChunksDone >= nb.ChunksTotal && !nb.Status.Terminal() {
		if err := e.send(ctx, resources.Finalize, Message{Type: MsgFinalize, Tenant: b.Tenant, Batch: b.ID}); err != nil {
			return err
		}
	}
	return e.send(ctx, resources.Dispatch, Message{Type: MsgRelease})
}

// sweepParts deletes the parts of a done chunk that its commit does not
// point to. A run that died between writing its parts and committing
// leaves them; the finalizer removes those it finds, but a duplicate run
// can write them after the batch was finalized. The dead run's message
// always comes back (here, or to the dead-letter handler), so sweeping on
// that delivery removes them.
func (e *Engine) sweepParts(ctx context.Context, c batch.Chunk) error {
	keys, err := e.Blobs.List(ctx, batch.ChunkPartsPrefix(c.Tenant, c.Batch, c.Index))
	if err != nil {
		return fmt.Errorf("list parts of chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	keep := map[string]bool{c.Parts("out"): true, c.Parts("err"): true, c.Parts("usage"): true}
	var stray []string
	for _, k := range keys {
		if !keep[k] {
			stray = append(stray, k)
		}
	}
	return e.Blobs.Delete(ctx, stray...)
}
