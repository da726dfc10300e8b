package mockup

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/relaybatch/relay/internal/anthropic/wire"
)

// Anthropic's Message Batches, the other half of batchAPI.

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// messageRequest is a request of a message batch.
type messageRequest struct {
	CustomID string          `json:"custom_id"`
	Params   json.RawMessage `json:"params"`
}

func (a *batchAPI) createMessageBatch(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Requests []messageRequest `json:"requests"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 256<<20)).Decode(&in); err != nil || len(in.Requests) == 0 {
		writeJSON(w, http.StatusBadRequest, errorBody(shapeAnthropic, http.StatusBadRequest, "requests: a non-empty list is required", ""))
		return
	}
	now := a.now()
	exp := rfc3339(now.Add(24 * time.Hour))
	a.mu.Lock()
	mb := &wire.MessageBatch{ID: a.newID("msgbatch_mock"), Type: "message_batch", ProcessingStatus: wire.ProcessingInProgress,
		CreatedAt: rfc3339(now), ExpiresAt: &exp}
	mb.RequestCounts.Processing = int64(len(in.Requests))
	a.anth[mb.ID] = mb
	a.started[mb.ID], a.msgs[mb.ID] = now, in.Requests
	a.order = append(a.order, mb.ID)
	out := *mb
	a.mu.Unlock()
	a.s.countBatch(false)
	time.AfterFunc(a.delay(), func() {
		a.mu.Lock()
		ending := a.ending[mb.ID]
		a.ending[mb.ID] = true
		a.mu.Unlock()
		if !ending {
			a.endMessageBatch(mb, len(in.Requests))
		}
	})
	writeJSON(w, http.StatusOK, out)
}

// endMessageBatch writes message batch mb's results, its first done
// requests run and the rest canceled, and ends it.
func (a *batchAPI) endMessageBatch(mb *wire.MessageBatch, done int) {
	a.mu.Lock()
	reqs := a.msgs[mb.ID]
	a.mu.Unlock()
	var res bytes.Buffer
	var counts wire.MessageRequestCounts
	for i, q := range reqs {
		o := a.messageOutcome(q.Params, i >= done, &counts)
		line, _ := json.Marshal(wire.MessageResult{CustomID: q.CustomID, Result: o})
		res.Write(append(line, '\n'))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ended := rfc3339(a.now())
	url := "/v1/messages/batches/" + mb.ID + "/results"
	mb.ProcessingStatus, mb.EndedAt, mb.ResultsURL, mb.RequestCounts = wire.ProcessingEnded, &ended, &url, counts
	a.result[mb.ID] = res.Bytes()
}

// messageOutcome runs one request of a message batch (not one canceled)
// and counts its result.
func (a *batchAPI) messageOutcome(params json.RawMessage, canceled bool, counts *wire.MessageRequestCounts) wire.MessageOutcome {
	if canceled {
		counts.Canceled++
		return wire.MessageOutcome{Type: "canceled"}
	}
	status, body, _, expired := a.s.runRow("/v1/messages", params)
	switch {
	case expired:
		counts.Expired++
		return wire.MessageOutcome{Type: "expired"}
	case status < 300:
		counts.Succeeded++
		raw, _ := json.Marshal(body)
		return wire.MessageOutcome{Type: "succeeded", Message: raw}
	}
	counts.Errored++
	msg, _ := body["error"].(object)["message"].(string)
	return wire.MessageOutcome{Type: "errored", Error: &wire.ErrorResponse{Type: "error",
		Error: wire.ErrorObject{Type: wire.ErrorType(status), Message: msg}}}
}

func (a *batchAPI) getMessageBatch(w http.ResponseWriter, _ *http.Request, mb *wire.MessageBatch) {
	writeJSON(w, http.StatusOK, mb)
}

// cancelMessageBatch cancels a message batch in progress: it is canceling
// while the results of the requests it had finished are written, then
// ended.
func (a *batchAPI) cancelMessageBatch(w http.ResponseWriter, _ *http.Request, mb *wire.MessageBatch) {
	a.s.countBatch(true)
	if mb.ProcessingStatus == wire.ProcessingInProgress && !a.ending[mb.ID] {
		now := rfc3339(a.now())
		mb.ProcessingStatus, mb.CancelInitiatedAt = wire.ProcessingCanceling, &now
		a.ending[mb.ID] = true
		go a.endMessageBatch(mb, a.finished(len(a.msgs[mb.ID]), a.started[mb.ID]))
	}
	writeJSON(w, http.StatusOK, mb)
}

func (a *batchAPI) messageResults(w http.ResponseWriter, _ *http.Request, mb *wire.MessageBatch) {
	if !mb.Ended() {
		writeJSON(w, http.StatusBadRequest, errorBody(shapeAnthropic, http.StatusBadRequest, "the message batch has not ended", ""))
		return
	}
	w.Header().Set("Content-Type", "application/x-jsonl")
	_, _ = w.Write(a.result[mb.ID])
}

func (a *batchAPI) listMessageBatches(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids, data, more := listed(a.order, a.anth, r, "after_id", func(mb *wire.MessageBatch) wire.MessageBatch { return *mb })
	var first, last *string
	if len(ids) > 0 {
		first, last = &ids[0], &ids[len(ids)-1]
	}
	writeJSON(w, http.StatusOK, object{"data": data, "has_more": more, "first_id": first, "last_id": last})
}
