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

func (a *batchAPI) createMessageBatch(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 256<<20)).Decode(&in); err != nil || len(in.Requests) == 0 {
		writeJSON(w, http.StatusBadRequest, errorBody(shapeAnthropic, http.StatusBadRequest, "requests: a non-empty list is required", ""))
		return
	}
	now := time.Now()
	exp := rfc3339(now.Add(24 * time.Hour))
	a.mu.Lock()
	mb := &wire.MessageBatch{ID: a.newID("msgbatch_mock"), Type: "message_batch", ProcessingStatus: wire.ProcessingInProgress,
		CreatedAt: rfc3339(now), ExpiresAt: &exp}
	mb.RequestCounts.Processing = int64(len(in.Requests))
	a.anth[mb.ID] = mb
	a.order = append(a.order, mb.ID)
	out := *mb
	a.mu.Unlock()
	a.s.countBatch(false)
	time.AfterFunc(a.delay(), func() {
		var res bytes.Buffer
		var counts wire.MessageRequestCounts
		a.mu.Lock()
		canceled := mb.ProcessingStatus != wire.ProcessingInProgress
		a.mu.Unlock()
		for _, q := range in.Requests {
			o := a.messageOutcome(q.Params, canceled, &counts)
			line, _ := json.Marshal(wire.MessageResult{CustomID: q.CustomID, Result: o})
			res.Write(append(line, '\n'))
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		ended := rfc3339(time.Now())
		url := "/v1/messages/batches/" + mb.ID + "/results"
		mb.ProcessingStatus, mb.EndedAt, mb.ResultsURL, mb.RequestCounts = wire.ProcessingEnded, &ended, &url, counts
		a.result[mb.ID] = res.Bytes()
	})
	writeJSON(w, http.StatusOK, out)
}

// messageOutcome runs one request of a message batch (none once it was
// cancelled) and counts its result.
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

func (a *batchAPI) cancelMessageBatch(w http.ResponseWriter, _ *http.Request, mb *wire.MessageBatch) {
	a.s.countBatch(true)
	if mb.ProcessingStatus == wire.ProcessingInProgress {
		now := rfc3339(time.Now())
		mb.ProcessingStatus, mb.CancelInitiatedAt = wire.ProcessingCanceling, &now
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
