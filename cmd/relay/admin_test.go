package main

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/sched"
)

// inspectBatch names each state docs/runbook.md explains, and nothing for
// a batch that is fine.
func TestInspectBatchProblems(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	running := batch.Batch{ID: "b1", Tenant: "acme", Status: batch.InProgress, Started: true, ChunksTotal: 3, ChunksDone: 1}
	chunks := []batch.Chunk{
		{Batch: "b1", Index: 0, Model: "m", State: batch.ChunkDone},
		{Batch: "b1", Index: 1, Model: "m", State: batch.ChunkClaimed, Run: "r1", Attempts: 1, Lease: now.Add(time.Minute).UnixMilli()},
		{Batch: "b1", Index: 2, Model: "m", State: batch.ChunkPending},
	}
	entry := map[string][]sched.Ready{"m": {{Model: "m", Batch: "b1", Next: 2}, {Model: "m", Batch: "other"}}}
	expired := slices.Clone(chunks)
	expired[1].Lease = now.Add(-90 * time.Second).UnixMilli()
	done := running
	done.Status, done.ChunksDone, done.FinalizeDue = batch.Completed, 3, now.Add(-time.Hour).Unix()
	unfinalized := running
	unfinalized.ChunksDone, unfinalized.FinalizeDue = 3, now.Add(-time.Minute).Unix()
	planning := batch.Batch{ID: "b1", Status: batch.Validating, PlanLease: now.Add(-time.Second).UnixMilli()}
	for _, tt := range []struct {
		name   string
		b      batch.Batch
		chunks []batch.Chunk
		ready  map[string][]sched.Ready
		held   bool
		want   []string // the problems' names, in order
	}{
		{"fine", running, chunks, entry, true, nil},
		{"lease-expired", running, expired, entry, true, []string{"lease-expired"}},
		{"no-ready-entry", running, chunks, map[string][]sched.Ready{"m": {{Model: "m", Batch: "other"}}}, true, []string{"no-ready-entry"}},
		{"not-finalized", unfinalized, nil, nil, true, []string{"not-finalized"}},
		{"slot-held", done, nil, nil, true, []string{"slot-held"}},
		{"terminal and released", done, nil, nil, false, nil},
		{"plan-stalled", planning, nil, nil, true, []string{"plan-stalled"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := inspectBatch(tt.b, tt.chunks, tt.ready, tt.held, now)
			var got []string
			for _, p := range r.Problems {
				name, _, _ := strings.Cut(p, ":")
				got = append(got, name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems %q, want %v", r.Problems, tt.want)
			}
		})
	}
	r := inspectBatch(running, chunks, entry, true, now)
	if r.Chunks["done"] != 1 || r.Chunks["claimed"] != 1 || r.Chunks["pending"] != 1 || len(r.Claimed) != 1 || r.Claimed[0].Run != "r1" {
		t.Errorf("report %+v, want one chunk of each state and run r1's claim", r)
	}
	if len(r.Ready) != 1 || r.Ready[0].Batch != "b1" {
		t.Errorf("ready entries %+v, want b1's only", r.Ready)
	}
}

// requeue sends what moves a batch on from where it is, and nothing for a
// batch whose chunks carry it.
func TestRequeueMessage(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	later, earlier := now.Add(time.Hour).Unix(), now.Add(-time.Hour).Unix()
	for _, tt := range []struct {
		name       string
		b          batch.Batch
		queue, typ string
	}{
		{"validating", batch.Batch{Status: batch.Validating}, "dispatch", "plan"},
		{"validating past its window", batch.Batch{Status: batch.Validating, ExpiresAt: &earlier}, "dispatch", "tick"},
		{"planned, not started", batch.Batch{Status: batch.InProgress, ChunksTotal: 2}, "dispatch", "plan"},
		{"cancelling", batch.Batch{Status: batch.Cancelling, Started: true, ChunksTotal: 2}, "dispatch", "drain"},
		{"every chunk done", batch.Batch{Status: batch.InProgress, Started: true, ChunksTotal: 2, ChunksDone: 2}, "finalize", "finalize"},
		{"finalizing", batch.Batch{Status: batch.Finalizing, Started: true, ChunksTotal: 2, ChunksDone: 2}, "finalize", "finalize"},
		{"terminal", batch.Batch{Status: batch.Completed, Started: true, ChunksTotal: 2, ChunksDone: 2}, "finalize", "finalize"},
		{"running", batch.Batch{Status: batch.InProgress, Started: true, ChunksTotal: 2, ChunksDone: 1, ExpiresAt: &later}, "", ""},
		{"past its window", batch.Batch{Status: batch.InProgress, Started: true, ChunksTotal: 2, ChunksDone: 1, ExpiresAt: &earlier}, "dispatch", "drain"},
		{"template", batch.Batch{Status: batch.Scheduled}, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.b.ID, tt.b.Tenant = "batch_x", "acme"
			q, m, err := requeueMessage(tt.b, now)
			if q != tt.queue || m.Type != tt.typ || (err == nil) != (tt.queue != "") {
				t.Fatalf("%s %s %v, want %q %q", q, m.Type, err, tt.queue, tt.typ)
			}
			if err == nil && (m.Batch != "batch_x" || m.Tenant != "acme") {
				t.Errorf("message %+v names another batch", m)
			}
		})
	}
}

// trailPutter keeps the objects an audit chain writes.
type trailPutter map[string][]byte

func (p trailPutter) Put(_ context.Context, key string, body []byte) error {
	p[key] = slices.Clone(body)
	return nil
}

// audit query read only the objects that verify and said nothing of the
// others: one altered object hid every later entry of its chain, and the
// answer looked complete. It answers what verifies and fails naming the
// break.
func TestQueryTrailNamesTheBreak(t *testing.T) {
	t.Parallel()
	p := trailPutter{}
	ch := audit.NewChain(p, time.Unix(0, 0))
	for i := range 3 {
		ch.Add(audit.Entry{Tenant: "acme", KeyID: "k1", Batch: "batch_x", Action: "POST /v1/batches/{id}/cancel", Outcome: strconv.Itoa(200 + i)})
		if err := ch.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var objs []audit.Object
	for _, k := range slices.Sorted(maps.Keys(p)) {
		objs = append(objs, audit.Object{Key: k, Body: p[k]})
	}
	if got, err := queryTrail(objs, "batch_x", ""); err != nil || len(got) != 3 {
		t.Fatalf("intact trail: %d entries, %v; want 3 and no error", len(got), err)
	}
	objs[1].Body = bytes.Replace(objs[1].Body, []byte(`"201"`), []byte(`"404"`), 1)
	got, err := queryTrail(objs, "batch_x", "")
	if len(got) != 1 || err == nil || !strings.Contains(err.Error(), objs[1].Key) {
		t.Fatalf("altered object: %d entries, %v; want the 1 before it and an error naming %s", len(got), err, objs[1].Key)
	}
}
