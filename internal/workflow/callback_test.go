package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/egress"
	"github.com/relaybatch/relay/internal/webhook"
)

// callbackServer answers each POST with the next of answers (the last one
// repeats) and records what it was sent.
type callbackServer struct {
	*httptest.Server
	mu     sync.Mutex
	events []Event
	auth   []string
}

type reply struct {
	status int
	body   string
	delay  time.Duration
}

func newCallbackServer(t *testing.T, answers ...reply) *callbackServer {
	t.Helper()
	s := &callbackServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var ev struct {
			EventID string `json:"event_id"`
			Event   string `json:"event"`
			Step    int    `json:"step"`
			Attempt int    `json:"attempt"`
		}
		json.Unmarshal(data, &ev)
		s.mu.Lock()
		n := len(s.events)
		s.events = append(s.events, Event{EventID: ev.EventID, Event: ev.Event, Step: ev.Step, Attempt: ev.Attempt})
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		a := answers[min(n, len(answers)-1)]
		if a.delay > 0 {
			select {
			case <-time.After(a.delay):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *callbackServer) seen() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// completedOf is a completed answer of exactly n bytes.
func completedOf(n int) string {
	const head, tail = `{"state":"completed","output":{"text":"`, `"}}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

func localCaller() *Caller {
	return &Caller{HTTP: webhook.NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}).HTTP, Backoff: func(int) time.Duration { return time.Millisecond }}
}

func TestCallerRetriesAndFailures(t *testing.T) {
	t.Parallel()
	const completed = `{"state":"completed","output":{}}`
	tests := []struct {
		name     string
		answers  []reply
		timeout  time.Duration
		wantCode string // "" for an answer
		attempts int
	}{
		{"answers at once", []reply{{200, completed, 0}}, time.Second, "", 1},
		{"500 four times", []reply{{500, "boom", 0}}, time.Second, CodeCallbackUnreachable, 4},
		{"503 then an answer", []reply{{503, "", 0}, {200, completed, 0}}, time.Second, "", 2},
		{"429 three times then an answer", []reply{{429, "", 0}, {429, "", 0}, {429, "", 0}, {200, completed, 0}}, time.Second, "", 4},
		// A second, not less: each attempt's local round trip must fit in
		// it, and at 100 ms under make unit's compiles on two cores the
		// second attempt timed out before the server read it.
		{"timeouts are retried", []reply{{200, completed, time.Minute}, {200, completed, 0}}, time.Second, "", 2},
		{"401 is a rejection", []reply{{401, `{"error":"who"}`, 0}}, time.Second, CodeCallbackRejected, 1},
		{"404 is a rejection", []reply{{404, "", 0}}, time.Second, CodeCallbackRejected, 1},
		{"a redirect is not followed", []reply{{302, "", 0}}, time.Second, CodeCallbackRejected, 1},
		{"an invalid answer", []reply{{200, `{"state":"maybe"}`, 0}}, time.Second, CodeInvalidResponse, 1},
		{"an empty 204", []reply{{204, "", 0}}, time.Second, CodeInvalidResponse, 1},
		// Answers may be up to 10 MiB (docs/api.md "Workflow records"),
		// more than 4 MiB, not one byte more.
		{"an answer of 6 MiB", []reply{{200, completedOf(6 << 20), 0}}, 5 * time.Second, "", 1},
		{"an answer of 10 MiB", []reply{{200, completedOf(MaxAnswer), 0}}, 5 * time.Second, "", 1},
		{"an answer over 10 MiB", []reply{{200, completedOf(MaxAnswer + 1), 0}}, 5 * time.Second, CodeInvalidResponse, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newCallbackServer(t, tt.answers...)
			spec := Spec{URL: srv.URL, Authorization: "Bearer secret", CallbackTimeout: tt.timeout}
			_, err := localCaller().Call(context.Background(), spec, Event{EventID: "wf_evt_x", Event: EventStart})
			var e *Error
			switch {
			case tt.wantCode == "" && err != nil:
				t.Fatalf("got %v, want an answer", err)
			case tt.wantCode != "" && (!errors.As(err, &e) || e.Code != tt.wantCode):
				t.Fatalf("got %v, want %s", err, tt.wantCode)
			}
			seen := srv.seen()
			if len(seen) != tt.attempts {
				t.Fatalf("attempts: got %d, want %d", len(seen), tt.attempts)
			}
			for i, ev := range seen {
				if ev.Attempt != i+1 || ev.EventID != "wf_evt_x" || srv.auth[i] != "Bearer secret" {
					t.Errorf("attempt %d: got %+v with Authorization %q", i+1, ev, srv.auth[i])
				}
			}
		})
	}
}

func TestCallerRefusedAddress(t *testing.T) {
	t.Parallel()
	srv := newCallbackServer(t, reply{200, `{"state":"completed","output":{}}`, 0})
	// The deployment's policy refuses loopback at dial time: no retry helps.
	c := &Caller{HTTP: webhook.NewClient(egress.Policy{AllowHTTP: true}).HTTP}
	_, err := c.Call(context.Background(), Spec{URL: srv.URL, CallbackTimeout: time.Second}, Event{EventID: "e", Event: EventStart})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeCallbackUnreachable {
		t.Fatalf("got %v, want %s", err, CodeCallbackUnreachable)
	}
	if !strings.Contains(e.Message, "workflow callbacks only go to public addresses") {
		t.Errorf("message %q does not name workflow callbacks", e.Message)
	}
	if n := len(srv.seen()); n != 0 {
		t.Fatalf("the refused callback got %d requests", n)
	}
}

func TestCallerStopsWithItsContext(t *testing.T) {
	t.Parallel()
	srv := newCallbackServer(t, reply{200, `{"state":"completed","output":{}}`, time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := localCaller().Call(ctx, Spec{URL: srv.URL, CallbackTimeout: time.Minute}, Event{EventID: "e", Event: EventStart})
	var e *Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("got %v, want the context's error (the record is not failed)", err)
	}
}
