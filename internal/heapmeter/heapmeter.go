// Package heapmeter measures the peak of the Go heap while a function
// runs: the memory benchmarks and tests of the executor, native imports
// and workflow steps (BENCHMARKS.md "Executor memory") read it so.
package heapmeter

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// Peak runs fn and returns the peak of the Go heap's live and
// not-yet-collected objects above what it was before, sampled every
// millisecond.
func Peak(fn func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := read(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(stop)
	<-done
	return max(peak.Load(), base) - base
}
