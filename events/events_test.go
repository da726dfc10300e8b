// Package events holds sample payloads for every function: the API Gateway
// proxy events the api function gets, the SQS events of the queue-fed
// functions, and the input EventBridge Scheduler passes to the scheduler
// function. The tests check that each decodes into the type its function
// takes and survives a round trip, so the samples stay true.
package events

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/msg"
)

func roundTrip[T any](t *testing.T, data []byte) T {
	t.Helper()
	var v, again T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v, again) {
		t.Fatalf("round trip changed the event:\n%+v\n%+v", v, again)
	}
	return v
}

func TestSamples(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			switch fn, _, _ := strings.Cut(p, "-"); fn {
			case "api":
				ev := roundTrip[events.APIGatewayProxyRequest](t, data)
				if ev.HTTPMethod == "" || !strings.HasPrefix(ev.Path, "/v1/") {
					t.Fatalf("not an API request: %+v", ev)
				}
			case "dispatcher", "executor", "deadletter", "finalizer":
				ev := roundTrip[events.SQSEvent](t, data)
				if len(ev.Records) == 0 {
					t.Fatal("no records")
				}
				for _, r := range ev.Records {
					var m msg.Message
					if err := json.Unmarshal([]byte(r.Body), &m); err != nil || m.Type == "" {
						t.Fatalf("body %q is not an engine message: %v", r.Body, err)
					}
				}
			case "scheduler":
				in := roundTrip[map[string]string](t, data)
				if in["template_id"] == "" || in["scheduled_time"] == "" {
					t.Fatalf("scheduler input lacks template_id or scheduled_time: %v", in)
				}
			default:
				t.Fatalf("sample %s: name it <function>-<what>.json", p)
			}
		})
	}
}
