package engine

import (
	"context"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
)

// With the limit off, for a batch that has not ended, or for a template,
// no in-flight slot is given back (the engine here has no store: touching
// it would panic). internal/batches tests the create side.
func TestReleaseInflightOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	off := &Engine{}
	if err := off.releaseInflight(ctx, batch.Batch{Status: batch.Completed}); err != nil {
		t.Fatalf("limit off: %v", err)
	}
	on := &Engine{MaxInflight: 1}
	tpl := "* * * * *"
	for _, b := range []batch.Batch{{Status: batch.InProgress}, {Status: batch.Cancelled, Schedule: &tpl}} {
		if err := on.releaseInflight(ctx, b); err != nil {
			t.Fatalf("%s batch: %v", b.Status, err)
		}
	}
}
