package lambdasqs

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/msg"
)

func record(id, count string) events.SQSMessage {
	r := events.SQSMessage{MessageId: id, ReceiptHandle: "rh-" + id, Body: `{"id":"` + id + `"}`}
	if count != "-" {
		r.Attributes = map[string]string{"ApproximateReceiveCount": count, "SentTimestamp": "1795946751000"}
	}
	return r
}

func TestReceiveCount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		attr string // "-": no attributes at all
		want int
	}{
		{"1", 1},
		{"2", 2},
		{"17", 17},
		{"-", 1},  // absent: received once
		{"", 1},   // empty
		{"0", 1},  // not a receive count
		{"-3", 1}, // nor this
		{"x", 1},  // nor this
		{" 4", 1}, // SQS sends bare digits
	} {
		if got := ReceiveCount(record("m", tt.attr)); got != tt.want {
			t.Errorf("ApproximateReceiveCount %q: got %d, want %d", tt.attr, got, tt.want)
		}
	}
}

func TestDeliveries(t *testing.T) {
	t.Parallel()
	ev := events.SQSEvent{Records: []events.SQSMessage{record("a", "1"), record("b", "3"), record("c", "-")}}
	want := []msg.Delivery{
		{ID: "a", Body: `{"id":"a"}`, ReceiptHandle: "rh-a", ReceiveCount: 1},
		{ID: "b", Body: `{"id":"b"}`, ReceiptHandle: "rh-b", ReceiveCount: 3},
		{ID: "c", Body: `{"id":"c"}`, ReceiptHandle: "rh-c", ReceiveCount: 1},
	}
	if got := Deliveries(ev); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got := Deliveries(events.SQSEvent{}); len(got) != 0 {
		t.Fatalf("no records: got %+v", got)
	}
}

// The samples of events/ are what Lambda sends the queue-fed functions.
func TestDeliveriesOfSample(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../events/executor-chunk.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	ds := Deliveries(ev)
	if len(ds) != 1 {
		t.Fatalf("got %d deliveries, want 1", len(ds))
	}
	d, r := ds[0], ev.Records[0]
	if d.ID != r.MessageId || d.ID == "" || d.Body != r.Body || d.ReceiptHandle != r.ReceiptHandle || d.ReceiveCount != 1 {
		t.Fatalf("delivery %+v of record %+v", d, r)
	}
}

func TestResponse(t *testing.T) {
	t.Parallel()
	if got := Response(nil); len(got.BatchItemFailures) != 0 {
		t.Fatalf("no failure: got %+v", got)
	}
	got := Response([]string{"b", "d"})
	want := []events.SQSBatchItemFailure{{ItemIdentifier: "b"}, {ItemIdentifier: "d"}}
	if !reflect.DeepEqual(got.BatchItemFailures, want) {
		t.Fatalf("got %+v, want %+v", got.BatchItemFailures, want)
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	ev := events.SQSEvent{Records: []events.SQSMessage{record("m1", "1"), record("m2", "2"), record("m3", "5")}}

	// Fails the deliveries seen more than once: the response must name
	// exactly their messages.
	var seen []msg.Delivery
	h := Handler(func(_ context.Context, ds []msg.Delivery) ([]string, error) {
		seen = ds
		var failed []string
		for _, d := range ds {
			if d.ReceiveCount > 1 {
				failed = append(failed, d.ID)
			}
		}
		return failed, nil
	})
	resp, err := h(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[1].ID != "m2" || seen[1].ReceiveCount != 2 {
		t.Fatalf("handler got %+v", seen)
	}
	want := []events.SQSBatchItemFailure{{ItemIdentifier: "m2"}, {ItemIdentifier: "m3"}}
	if !reflect.DeepEqual(resp.BatchItemFailures, want) {
		t.Fatalf("failures %+v, want %+v", resp.BatchItemFailures, want)
	}

	// All succeeded: no failure listed (Lambda deletes the whole batch).
	ok := Handler(func(context.Context, []msg.Delivery) ([]string, error) { return nil, nil })
	if resp, err := ok(t.Context(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("all succeeded: got %+v, %v", resp, err)
	}

	// An error fails the whole batch, as a Lambda error does.
	boom := errors.New("boom")
	bad := Handler(func(context.Context, []msg.Delivery) ([]string, error) { return []string{"m1"}, boom })
	if resp, err := bad(t.Context(), ev); !errors.Is(err, boom) || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("handler error: got %+v, %v", resp, err)
	}
}
