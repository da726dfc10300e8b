package part

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
)

func readObjects(t *testing.T, objs map[string]Object) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for k, o := range objs {
		b, err := io.ReadAll(o.Body)
		if err != nil || int64(len(b)) != o.Size {
			t.Fatalf("read %s: %d bytes of %d: %v", k, len(b), o.Size, err)
		}
		out[k] = b
	}
	return out
}

// TestLinesAnyOrder sets rows in a random order from many goroutines,
// each row twice, with lines big enough to spill to a temporary file, and checks the part
// is that of the rows set one by one in order: row order, same bytes, same
// counts; Close removes the file.
func TestLinesAnyOrder(t *testing.T) {
	t.Parallel()
	for _, size := range []int{10, SpillAt / 16} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			now := time.Unix(1_800_000_000, 0)
			b := batch.Batch{ID: "batch_x", Tenant: "t", KeyID: "k"}
			outs := make([]Outcome, 64)
			for i := range outs {
				body := json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", size)))
				status := []int{200, 400, 200, 500}[i%4]
				outs[i] = Outcome{CustomID: fmt.Sprint("r", i), Result: inference.Result{StatusCode: status, Body: body, Model: "m",
					Usage: inference.Usage{InputTokens: 1, TotalTokens: 1}}}
			}
			outs[5] = Outcome{CustomID: "r5", Code: CodeExpired, Message: "late", Expired: true}
			l := NewLines(b, batch.Chunk{FirstRow: 100, Rows: len(outs)}, now)
			var wg sync.WaitGroup
			for _, i := range append(rand.Perm(len(outs)), rand.Perm(len(outs))...) {
				wg.Go(func() { l.Set(i, outs[i]) }) // each row twice: counted once
			}
			wg.Wait()
			spilled := l.spool.Spilled()
			c := batch.Chunk{Batch: "batch_x", FirstRow: 100}
			objs, cm, err := Commit(c, l, 0, now)
			if err != nil {
				t.Fatal(err)
			}
			got := readObjects(t, objs)
			want, wantObjs := build(t, b, batch.Chunk{FirstRow: 100}, outs, now)
			if string(got["out"]) != string(wantObjs["out"]) || string(got["err"]) != string(wantObjs["err"]) {
				t.Fatalf("lines differ from those set in order (spilled %v)", spilled)
			}
			if cm.Chunk.Pattern != want.Pattern || cm.Completed != want.Completed || cm.Failed != want.Failed || cm.Expired != 1 || cm.Usage != want.Tokens {
				t.Fatalf("commit %+v, want the counts of %+v", cm, want)
			}
			if spilled != (size > 1000) {
				t.Errorf("spilled %v with lines of %d bytes", spilled, size)
			}
			var name string
			if spilled {
				name = l.spool.Name()
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(name); spilled && !os.IsNotExist(err) {
				t.Errorf("%s left behind: %v", filepath.Base(name), err)
			}
		})
	}
}

func TestLinesMissingRow(t *testing.T) {
	t.Parallel()
	l := NewLines(batch.Batch{ID: "batch_x"}, batch.Chunk{Rows: 2}, time.Now())
	l.Set(0, Outcome{CustomID: "a", Code: CodeExpired})
	if _, _, err := Commit(batch.Chunk{}, l, 0, time.Now()); err == nil {
		t.Fatal("Commit with a row not set: no error")
	}
}
