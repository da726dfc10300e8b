package webhook

import (
	"testing"
	"time"
)

func TestReceiver(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://Hooks.Example.com/relay?x=1": "hooks.example.com",
		"http://127.0.0.1:8080/a":             "127.0.0.1:8080",
		"https://[::1]:9/":                    "[::1]:9",
		"::not a url":                         "",
	} {
		if got := Receiver(in); got != want {
			t.Errorf("Receiver(%q) = %q, want %q", in, got, want)
		}
	}
}

// The breaker's life: closed through failures under the threshold, open at
// the threshold-th, no attempt during the cool-down, one probe after it,
// open again when the probe fails, closed when one succeeds.
func TestCircuit(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	fail := Attempt{Error: "no answer within 5s"}
	ok := Attempt{StatusCode: 204}
	const threshold, cooldown, window = 3, time.Minute, 10 * time.Second
	var c Circuit
	admit := func(at time.Time) bool {
		t.Helper()
		got, _ := c.Admit(at, window)
		return got
	}
	if !admit(now) || c.Record(ok, now, threshold, cooldown) {
		t.Fatal("a delivery to a closed circuit changed it")
	}
	for i := 1; i < threshold; i++ {
		if !c.Record(fail, now, threshold, cooldown) || !c.Closed() || !admit(now) {
			t.Fatalf("failure %d of %d opened the circuit: %+v", i, threshold, c)
		}
	}
	if c.Record(Attempt{Error: "refused", Permanent: true}, now, threshold, cooldown) {
		t.Fatal("a permanent refusal was counted against the receiver")
	}
	c.Record(fail, now, threshold, cooldown)
	if c.Closed() {
		t.Fatalf("after %d failures in a row: %+v, want open", threshold, c)
	}
	if ok, at := c.Admit(now.Add(cooldown-time.Millisecond), window); ok || !at.Equal(now.Add(cooldown)) {
		t.Fatalf("during the cool-down: admitted %v, ask again at %v", ok, at)
	}
	after := now.Add(cooldown)
	if !admit(after) {
		t.Fatal("no probe after the cool-down")
	}
	if ok, at := c.Admit(after, window); ok || !at.Equal(after.Add(window)) {
		t.Fatalf("a second probe at once: admitted %v, ask again at %v", ok, at)
	}
	c.Record(fail, after, threshold, cooldown)
	if admit(after.Add(cooldown - time.Millisecond)) {
		t.Fatal("a failed probe did not open the circuit again")
	}
	later := after.Add(cooldown)
	if !admit(later) || !c.Record(ok, later, threshold, cooldown) || !c.Closed() || c.Failures != 0 || !admit(later) || !admit(later) {
		t.Fatalf("a probe delivered: %+v, want closed", c)
	}
}
