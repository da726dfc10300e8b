package provider

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"
)

// Every attempt of a chunk run's row says which run sent it and the lease
// as it is when that attempt is sent, so a renewal between two attempts
// shows; a row sent without WithRun carries neither header.
func TestRunHeaders(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, answer(429, rateLimit, "Retry-After", "0"), answer(200, chatOK), answer(200, chatOK))
	var s sleeps
	c := newClient(t, u.URL, &s)
	var lease atomic.Int64
	lease.Store(1_700_000_000_000)
	leaseUntil := func() time.Time { return time.UnixMilli(lease.Add(1000)) } // renewed before each attempt
	ctx := WithRun(context.Background(), "run-7", leaseUntil)
	if got := c.Do(ctx, "/v1/chat/completions", json.RawMessage(`{"model":"chat"}`), Route{}); got.StatusCode != 200 {
		t.Fatalf("row: status %d %s", got.StatusCode, got.ErrMessage)
	}
	c.Do(context.Background(), "/v1/chat/completions", json.RawMessage(`{"model":"chat"}`), Route{})

	seen := u.requests()
	want := [][2]string{{"run-7", "1700000001000"}, {"run-7", "1700000002000"}, {"", ""}}
	for i, w := range want {
		if got := [2]string{seen[i].Header.Get(HeaderRun), seen[i].Header.Get(HeaderLeaseUntil)}; got != w {
			t.Errorf("request %d: headers run %q, lease-until %q; want %q, %q", i, got[0], got[1], w[0], w[1])
		}
	}
}
