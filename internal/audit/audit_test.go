package audit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// bucket is a hand-written Putter keeping objects in memory.
type bucket struct {
	mu   sync.Mutex
	objs map[string][]byte
	fail bool
}

func (b *bucket) Put(_ context.Context, key string, body []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail {
		return errors.New("throttled")
	}
	if b.objs == nil {
		b.objs = map[string][]byte{}
	}
	b.objs[key] = slices.Clone(body)
	return nil
}

func (b *bucket) all() []Object {
	var out []Object
	for _, k := range slices.Sorted(maps.Keys(b.objs)) {
		out = append(out, Object{Key: k, Body: b.objs[k]})
	}
	return out
}

// Two chains of three objects each; a failed flush keeps its entries for
// the next.
func writeTrail(t *testing.T) *bucket {
	t.Helper()
	b := &bucket{}
	ctx := context.Background()
	for c := range 2 {
		ch := NewChain(b, time.Unix(int64(c), 0))
		for i := range 3 {
			ch.Add(Entry{Time: int64(i), Tenant: "acme", KeyID: "k1", Batch: fmt.Sprintf("batch_%d_%d", c, i), Action: "POST /v1/batches", Outcome: "200"})
			if i == 1 {
				b.fail = true
				if err := ch.Flush(ctx); err == nil {
					t.Fatal("flush to a failing bucket: no error")
				}
				b.fail = false
			}
			if err := ch.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := ch.Flush(ctx); err != nil { // nothing kept: no object
			t.Fatal(err)
		}
	}
	return b
}

func TestVerifyIntactTrail(t *testing.T) {
	t.Parallel()
	b := writeTrail(t)
	if len(b.objs) != 6 {
		t.Fatalf("%d objects, want 6", len(b.objs))
	}
	breaks, entries := Verify(b.all())
	if len(breaks) != 0 || len(entries) != 6 {
		t.Fatalf("breaks %v, %d entries; want none and 6", breaks, len(entries))
	}
}

// Altering any one byte of any object, or removing one that is not a
// chain's last, makes Verify name that object (or the one whose link to
// it broke).
func TestVerifyNamesTheBreak(t *testing.T) {
	t.Parallel()
	b := writeTrail(t)
	objs := b.all()
	for i, o := range objs {
		for at := range len(o.Body) - 1 { // the last byte is the final newline
			if o.Body[at] == '\n' {
				continue
			}
			changed := slices.Clone(objs)
			body := slices.Clone(o.Body)
			body[at] ^= 0x01
			changed[i] = Object{Key: o.Key, Body: body}
			breaks, _ := Verify(changed)
			if len(breaks) == 0 {
				t.Fatalf("byte %d of %s altered (%q): no break", at, o.Key, body)
			}
			if k := breaks[0].Key; k != o.Key && !(i+1 < len(objs) && k == objs[i+1].Key) {
				t.Fatalf("byte %d of %s altered: break at %s (%s)", at, o.Key, k, breaks[0].Reason)
			}
		}
	}
	removed := slices.Delete(slices.Clone(objs), 1, 2)
	if breaks, _ := Verify(removed); len(breaks) != 1 || breaks[0].Key != objs[2].Key || !strings.Contains(breaks[0].Reason, "missing") {
		t.Errorf("object %s removed: breaks %v", objs[1].Key, breaks)
	}
}
