package native

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// A group's step is fenced (docs/design.md "Native batches"): SQS may
// deliver a step's message twice at once, and both copies would call the
// provider, import its results, run the unanswered rows directly and
// commit. The delivery that runs the group's current step first marks the
// group with the step, itself and an expiry (Group.Step, StepUntil: a
// conditional write, as every UpdateGroup), renews the mark while it runs
// and clears it when it ends; another delivery of the same step that finds
// the mark live backs off: its message is sent again for a little later,
// without spending a receive, until it finds the step done (and dies out
// as any stale step) or the mark expired, its holder dead (and runs it).
const (
	// stepFence is how long a mark lasts unrenewed: a crashed holder
	// blocks its step that long.
	stepFence = 2 * time.Minute
	// fenceSkew is the margin for clocks that disagree: a holder whose
	// renewals keep failing stops this long before its mark ends.
	fenceSkew = 5 * time.Second
)

// busyError says another delivery holds the step's fence, until Until.
type busyError struct{ Until time.Time }

func (e busyError) Error() string {
	return fmt.Sprintf("native: another delivery runs this step (fenced until %s)", e.Until.Format(time.RFC3339))
}

var (
	errStale     = errors.New("native: not the group's current step")
	errFenceLost = errors.New("native: the step's fence was taken over")
)

// stepKey names m's step in a group's fence.
func stepKey(m msg.Message) string { return fmt.Sprintf("%s#%d#", m.Type, m.Attempt) }

// fenced runs step for m under its group's fence (errors: busyError when
// another live delivery holds it). A message that is not its group's
// current step runs unfenced: it acts on nothing but dying out.
func (s *Service) fenced(ctx context.Context, m msg.Message, step func(context.Context, msg.Message) error) error {
	holder := stepKey(m) + ids.Secret(9)
	until, err := s.takeFence(ctx, m, holder)
	if errors.Is(err, errStale) || errors.Is(err, store.ErrBatchNotFound) {
		return step(ctx, m)
	}
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancelCause(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		s.keepFence(runCtx, stop, m, holder, until)
	}()
	err = step(runCtx, m)
	stop(nil)
	<-renewed
	if cause := context.Cause(runCtx); errors.Is(cause, errFenceLost) && err != nil {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	s.releaseFence(context.WithoutCancel(ctx), m, holder)
	return err
}

// takeFence marks m's group as running m's step for holder and returns
// the mark's expiry.
func (s *Service) takeFence(ctx context.Context, m msg.Message, holder string) (time.Time, error) {
	now := s.Now()
	until := now.Add(stepFence)
	_, err := s.Store.UpdateGroup(ctx, m.Batch, m.Chunk, func(g *batch.Group) error {
		if !current(*g, m) {
			return errStale
		}
		if g.Step != holder && strings.HasPrefix(g.Step, stepKey(m)) && now.UnixMilli() < g.StepUntil {
			return busyError{Until: time.UnixMilli(g.StepUntil)}
		}
		g.Step, g.StepUntil = holder, until.UnixMilli()
		return nil
	})
	return until, err
}

// keepFence renews holder's mark on m's group until ctx ends; it stops
// the step (stop) when another delivery took the mark, or when renewals
// failed until the mark is about to end.
func (s *Service) keepFence(ctx context.Context, stop context.CancelCauseFunc, m msg.Message, holder string, until time.Time) {
	t := time.NewTicker(stepFence / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := s.Now().Add(stepFence)
		_, err := s.Store.UpdateGroup(ctx, m.Batch, m.Chunk, func(g *batch.Group) error {
			if g.Step != holder {
				return errFenceLost
			}
			g.StepUntil = next.UnixMilli()
			return nil
		})
		switch {
		case err == nil:
			until = next
		case errors.Is(err, errFenceLost):
			stop(errFenceLost)
			return
		case ctx.Err() == nil:
			s.Log.WarnContext(ctx, "renew the fence of a native step", "batch_id", m.Batch, "group", m.Chunk, "type", m.Type, "err", err)
			if s.Now().After(until.Add(-fenceSkew)) {
				stop(errFenceLost)
				return
			}
		}
	}
}

// releaseFence clears holder's mark on m's group, if it is still there.
func (s *Service) releaseFence(ctx context.Context, m msg.Message, holder string) {
	_, err := s.Store.UpdateGroup(ctx, m.Batch, m.Chunk, func(g *batch.Group) error {
		if g.Step != holder {
			return errSkip
		}
		g.Step, g.StepUntil = "", 0
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		// It ends by itself at StepUntil.
		s.Log.WarnContext(ctx, "release the fence of a native step", "batch_id", m.Batch, "group", m.Chunk, "type", m.Type, "err", err)
	}
}

// backOff sends m again for later, a first poll's delay at most (its
// holder may be about to end) and no later than the fence ends: the step
// is the other delivery's meanwhile, and this one spends no receive.
func (s *Service) backOff(ctx context.Context, m msg.Message, busy busyError) error {
	delay := max(min(s.pollDelay(0), busy.Until.Sub(s.Now())+time.Second), time.Second)
	s.Log.InfoContext(ctx, "native step already running; backing off", "batch_id", m.Batch, "group", m.Chunk, "type", m.Type, "delay", delay)
	return s.Queue.Send(ctx, resources.Work, m, delay)
}
