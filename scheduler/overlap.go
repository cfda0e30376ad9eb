package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// acquireRunning takes the job's running lock under the overlap policy,
// or reports why the tick is not run (ev.Err).
func (r *runner) acquireRunning(ctx context.Context, ev *Event, start time.Time) (lease, bool) {
	rl, err := r.try(ctx, r.runningResource(), r.cfg.ttl, false)
	locked := errors.Is(err, redlock.ErrLocked)
	if locked && r.cfg.delay && ctx.Err() == nil {
		// Wait for the previous run, woken by its release. A wait that
		// runs out matches the context error, not always ErrLocked (it
		// may end queued behind a run of this same process).
		rl, err = r.waitRunning(ctx, start)
		locked = errors.Is(err, redlock.ErrLocked) ||
			errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, redlock.ErrQuorum)
		if err == nil {
			r.report(Event{Tick: ev.Tick, Outcome: OutcomeLate, Duration: time.Since(start), Err: errWaited, span: ev.span})
		}
	}
	tick := ev.Tick.Format(time.RFC3339Nano)
	switch {
	case err == nil:
		return rl, true
	case ctx.Err() != nil:
		ev.Err = fmt.Errorf("scheduler: job %q stopped: %w", r.name, errors.Join(context.Cause(ctx), err))
		r.cfg.logger.Debug("cron job not started: stopping", "job", r.name, "tick", ev.Tick)
		return nil, false
	case locked:
		ev.Outcome, ev.Err = OutcomeSkippedOverlap, fmt.Errorf("scheduler: job %q, tick %s: previous run still running: %w", r.name, tick, err)
	default:
		ev.Outcome, ev.Err = OutcomeLockError, fmt.Errorf("scheduler: job %q, tick %s: %w", r.name, tick, err)
	}
	r.report(*ev)
	return nil, false
}

// waitRunning waits for the running lock until the max delay from the run's
// start, or until ctx ends (Stop begins).
func (r *runner) waitRunning(ctx context.Context, start time.Time) (lease, error) {
	ctx, cancel := context.WithDeadline(ctx, start.Add(r.maxDelay))
	defer cancel()
	return r.locks.Acquire(r.holderContext(ctx), r.runningResource(), r.cfg.ttl)
}
