package part

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/backoff"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
)

// Commit is the part of chunk c from its rows' lines, once every row is
// set, and the commit that records it: the chunk's pattern and part sizes,
// the rows' counts, and their usage under the UTC day of now. It returns
// the part's objects by kind ("out", "err", "usage"; batch.Chunk.Parts).
func Commit(c batch.Chunk, rows *Lines, deadLetters int64, now time.Time) (map[string]Object, sched.Commit, error) {
	objs, p, err := rows.part()
	if err != nil {
		return nil, sched.Commit{}, err
	}
	c.Pattern, c.OutBytes, c.ErrBytes = p.Pattern, objs["out"].Size, objs["err"].Size
	cm := sched.Commit{Chunk: c, Completed: p.Completed, Failed: p.Failed, Expired: p.Expired, Cancelled: p.Cancelled,
		DeadLetters: deadLetters, Usage: p.Tokens, UsageByModel: maps.Clone(p.ByModel), KeyID: rows.b.KeyID, Day: now.UTC().Format("2006-01-02"),
		ReleaseCost: rows.b.MaxCost != nil}
	_, tag := Kept(rows.b, 0)
	for k, o := range objs {
		o.Tag = tag
		objs[k] = o
	}
	return objs, cm, nil
}

// FinalizeGrace bounds how long after its window a batch's finalize may
// come (the tick asks again every minute, docs/design.md "Tick").
const FinalizeGrace = time.Hour

// Kept is how long after batch b was created its chunk parts live, and
// the expiry class they carry: with output_expires_after, its window, the
// finalize's grace and that expiry (the output file expires that long after
// it is made, at the end of the window), rounded up to a class; without,
// the bucket's rule for parts/ (partsExpiry) and no class. The output and
// error files, and /results, never outlive the parts they point to: they
// expire at most that long after the batch was created (docs/design.md
// "Expiry").
func Kept(b batch.Batch, partsExpiry time.Duration) (time.Duration, string) {
	if b.OutputExpiresAfter == nil || b.ExpiresAt == nil {
		return partsExpiry, ""
	}
	need := time.Duration(*b.ExpiresAt-b.CreatedAt+*b.OutputExpiresAfter)*time.Second + FinalizeGrace
	tag, ok := resources.ExpiryTagFor(need)
	if !ok {
		return partsExpiry, ""
	}
	d, _ := resources.ExpiryOf(tag)
	return min(d, partsExpiry), tag
}

// KeptUntil is when the chunk parts of batch b may be gone (Kept), in
// Unix seconds: the latest expiry of a file made of them.
func KeptUntil(b batch.Batch, partsExpiry time.Duration) int64 {
	d, _ := Kept(b, partsExpiry)
	return b.CreatedAt + int64(d/time.Second)
}

// Write writes a commit's part objects, those with bytes, under its chunk's
// keys (batch.Chunk.Parts) with their expiry class (Kept), side by side,
// the usage object gzipped (ReadUsage), and returns the keys written
// (those that were, when one failed).
func Write(ctx context.Context, p batch.Putter, cm sched.Commit, objs map[string]Object) ([]string, error) {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		written []string
		errs    []error
	)
	for _, kind := range []string{"out", "err", "usage"} {
		if objs[kind].Size == 0 {
			continue
		}
		k, o := cm.Chunk.Parts(kind), objs[kind]
		if kind == "usage" {
			var err error
			if o, err = gzipped(o); err != nil {
				return nil, fmt.Errorf("gzip part %s: %w", k, err)
			}
		}
		wg.Go(func() {
			err := put(ctx, p, k, o)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("write part %s: %w", k, err))
				return
			}
			written = append(written, k)
		})
	}
	wg.Wait()
	return written, errors.Join(errs...)
}

// putTries bounds the tries of one part object's put, putBackoff their
// waits: a part holds the answers of rows already paid for, so a throttle
// or a timeout (the put may have taken effect; it is written again whole
// under the same key) is outlasted rather than the rows run again.
const (
	putTries   = 5
	putBackoff = 100 * time.Millisecond
)

// put writes part object o under key k, trying again after an error.
func put(ctx context.Context, p batch.Putter, k string, o Object) error {
	var err error
	for try := range putTries {
		if try > 0 {
			if werr := backoff.Sleep(ctx, backoff.Upper(backoff.Exponential(try, putBackoff, 10*putBackoff))); werr != nil {
				return err
			}
			if _, serr := o.Body.Seek(0, io.SeekStart); serr != nil {
				return serr
			}
		}
		if err = p.PutTagged(ctx, k, o.Body, o.Size, o.Tag); err == nil {
			return nil
		}
	}
	return err
}
