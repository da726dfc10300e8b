package part

import (
	"bytes"
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
// with lines big enough to spill to a temporary file, and checks the part
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
			for _, i := range rand.Perm(len(outs)) {
				wg.Go(func() { l.Set(i, outs[i]) })
			}
			wg.Wait()
			spilled := l.spool.file != nil
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
				name = l.spool.file.Name()
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

// removeStale removes the spool files of a dead process, not those of a
// live run (nor other files).
func TestRemoveStale(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	for name, age := range map[string]time.Duration{"relay-part-old": 2 * time.Hour, "relay-part-new": time.Minute, "other-old": 2 * time.Hour} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, now.Add(-age), now.Add(-age))
	}
	removeStale(dir, now)
	for name, want := range map[string]bool{"relay-part-old": false, "relay-part-new": true, "other-old": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", name, err == nil, want)
		}
	}
}

// A Spool reads back what it was written, in memory and once spilled to
// its temporary file, which Close removes.
func TestSpool(t *testing.T) {
	t.Parallel()
	var s Spool
	small := []byte("first")
	big := bytes.Repeat([]byte("x"), SpillAt)
	for _, p := range [][]byte{small, big, small} {
		if n, err := s.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	if s.file == nil || s.Size() != int64(2*len(small)+len(big)) {
		t.Fatalf("spilled %v, size %d", s.file != nil, s.Size())
	}
	name := s.file.Name()
	for _, tc := range []struct{ off, n int64 }{{0, 5}, {5 + SpillAt, 5}} {
		if got, err := s.Bytes(tc.off, tc.n); err != nil || string(got) != "first" {
			t.Errorf("Bytes(%d, %d): %q, %v", tc.off, tc.n, got, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Errorf("%s after Close: %v", name, err)
	}
}
