package provider

import (
	"encoding/json"
	"testing"
	"time"
)

// A message batch and its results lines read as the client of the
// Message Batches API needs them, from the objects the service serves.
func TestMessageBatchesObjects(t *testing.T) {
	t.Parallel()
	var mb MessageBatch
	if err := json.Unmarshal([]byte(`{"id":"msgbatch_1","type":"message_batch","processing_status":"ended",
		"request_counts":{"processing":0,"succeeded":3,"errored":1,"canceled":1,"expired":2},"created_at":"2026-12-01T10:00:00Z"}`), &mb); err != nil {
		t.Fatal(err)
	}
	if mb.ID != "msgbatch_1" || mb.Requests != 7 || !mb.Ended || !mb.Created.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("message batch %+v", mb)
	}
	var errored MessageResult
	if err := json.Unmarshal([]byte(`{"custom_id":"g-r3","result":{"type":"errored","error":{"type":"error","error":{"type":"not_found_error","message":"no"},"request_id":null}}}`), &errored); err != nil {
		t.Fatal(err)
	}
	if errored.CustomID != "g-r3" || errored.Outcome != "errored" || errored.ErrorType != "not_found_error" ||
		string(errored.Error) != `{"type":"error","error":{"type":"not_found_error","message":"no"},"request_id":null}` {
		t.Errorf("errored result %+v (%s)", errored, errored.Error)
	}
	if got := AnthropicStatus(errored.ErrorType); got != 404 {
		t.Errorf("status of not_found_error: %d, want 404", got)
	}
	if got := AnthropicStatus("overloaded_error"); got != 529 {
		t.Errorf("status of overloaded_error: %d, want 529", got)
	}
	var ok MessageResult
	if err := json.Unmarshal([]byte(`{"custom_id":"g-r0","result":{"type":"succeeded","message":{"id":"msg_1"}}}`), &ok); err != nil {
		t.Fatal(err)
	}
	if ok.Outcome != "succeeded" || string(ok.Message) != `{"id":"msg_1"}` || ok.Error != nil {
		t.Errorf("succeeded result %+v", ok)
	}
}
