package engine

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
)

// fakeNative records the steps the engine hands it.
type fakeNative struct {
	mu      sync.Mutex // Execute hands steps over side by side
	handled []msg.Message
	dead    []bool
	fail    bool
}

func (f *fakeNative) Start(_ context.Context, _ batch.Batch, entries []sched.Ready) ([]sched.Ready, error) {
	return entries[1:], nil
}

func (f *fakeNative) Handle(_ context.Context, m msg.Message, dead bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handled, f.dead = append(f.handled, m), append(f.dead, dead)
	if f.fail {
		return errors.New("provider down")
	}
	return nil
}

func delivery(t *testing.T, id string, m msg.Message) msg.Delivery {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return msg.Delivery{ID: id, Body: string(b)}
}

// Native batches' steps go to the Native delegate, from the work queue and
// from its DLQ, and a step that fails is reported for redelivery.
func TestNativeStepsGoToTheDelegate(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		n := &fakeNative{fail: fail}
		e := testEngine(&Engine{Native: n, Set: resources.Define("t"), Log: slog.New(slog.DiscardHandler)})
		submit := msg.Message{Type: msg.NativeSubmit, Tenant: "t", Batch: "b", Chunk: 2}
		poll := msg.Message{Type: msg.NativePoll, Tenant: "t", Batch: "b", Chunk: 2, Attempt: 5}
		failed, _ := e.Execute(context.Background(), []msg.Delivery{delivery(t, "1", submit), delivery(t, "2", poll)})
		dlqFailed, _ := e.DeadLetter(context.Background(), []msg.Delivery{delivery(t, "3", poll)})
		// The work queue's two steps run side by side, in either order.
		byWork := map[msg.Message]bool{}
		for i := range min(2, len(n.handled)) {
			byWork[n.handled[i]] = !n.dead[i]
		}
		if len(n.handled) != 3 || !byWork[submit] || !byWork[poll] || n.handled[2] != poll || !n.dead[2] {
			t.Fatalf("fail=%v: handed %+v (dead %v)", fail, n.handled, n.dead)
		}
		if wantFailed := map[bool]int{false: 0, true: 2}[fail]; len(failed) != wantFailed || len(dlqFailed) != wantFailed/2 {
			t.Fatalf("fail=%v: failed %v and %v", fail, failed, dlqFailed)
		}
	}
}
