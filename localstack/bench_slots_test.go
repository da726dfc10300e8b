//go:build bench

package localstack

import (
	"fmt"
	"sync"
	"time"
)

// slotUse samples a model's in-flight requests at the mock every
// millisecond from a batch's create to its end and says where the wall time
// over the physical limit went: the slots left idle, in seconds of the
// whole capacity, in each phase of the run.
type slotUse struct {
	inFlight func() int64
	capacity int64
	began    time.Time

	mu      sync.Mutex
	samples []slotSample
	quit    chan struct{}
	done    chan struct{}
}

type slotSample struct {
	at time.Duration // since began
	n  int64
}

func startSlotUse(inFlight func() int64, capacity int, began time.Time) *slotUse {
	s := &slotUse{inFlight: inFlight, capacity: int64(capacity), began: began, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			n := s.inFlight()
			s.mu.Lock()
			s.samples = append(s.samples, slotSample{time.Since(s.began), n})
			s.mu.Unlock()
			select {
			case <-s.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// slotPhases is the idle capacity of a run, in seconds of all its slots:
// before its first request; from there until every slot is first busy
// (ramp); until the last moment every slot is busy (running: the chunks'
// handovers); until the last request ends (tail); and from there to the
// end (after).
type slotPhases struct {
	before, ramp, running, tail, after time.Duration
}

func (p slotPhases) total() time.Duration {
	return p.before + p.ramp + p.running + p.tail + p.after
}

func (p slotPhases) String() string {
	return fmt.Sprintf("%.2f s: before the first request %.2f s, ramp to full capacity %.2f s, idle slots while running %.2f s, tail %.2f s, after the last request %.2f s",
		p.total().Seconds(), p.before.Seconds(), p.ramp.Seconds(), p.running.Seconds(), p.tail.Seconds(), p.after.Seconds())
}

// stop ends the sampling at end (since began) and splits the idle
// capacity into its phases.
func (s *slotUse) stop(end time.Duration) slotPhases {
	close(s.quit)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	first, full, lastFull, last := -1, -1, -1, -1
	for i, x := range s.samples {
		if x.n > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
		if x.n >= s.capacity {
			if full < 0 {
				full = i
			}
			lastFull = i
		}
	}
	var p slotPhases
	if first < 0 || full < 0 {
		p.before = end
		return p
	}
	idle := func(from, to int) time.Duration {
		var d float64
		for i := from; i < to && i+1 < len(s.samples); i++ {
			dt := s.samples[i+1].at - s.samples[i].at
			d += float64(dt) * float64(s.capacity-min(s.samples[i].n, s.capacity)) / float64(s.capacity)
		}
		return time.Duration(d)
	}
	p.before = s.samples[first].at
	p.ramp = idle(first, full)
	p.running = idle(full, lastFull)
	p.tail = idle(lastFull, last+1)
	if last+1 < len(s.samples) {
		p.after = end - s.samples[last+1].at
	}
	return p
}
