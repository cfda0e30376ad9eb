package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// acquireRunning takes the job's running lock under the overlap policy,
// or reports why the tick is not run.
func (r *runner) acquireRunning(ev Event, start time.Time) (lease, bool) {
	rl, err := r.try(runningResource(r.name), r.cfg.ttl)
	locked := errors.Is(err, redlock.ErrLocked)
	if locked && r.cfg.delay && !r.stopped() {
		// Wait for the previous run, woken by its release. A wait that
		// runs out matches the context error, not always ErrLocked (it
		// may end queued behind a run of this same process).
		rl, err = r.waitRunning(start)
		locked = errors.Is(err, redlock.ErrLocked) ||
			errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, redlock.ErrQuorum)
		if err == nil {
			r.report(Event{Tick: ev.Tick, Outcome: OutcomeLate, Duration: time.Since(start), Err: errWaited, span: ev.span})
		}
	}
	switch {
	case err == nil:
		return rl, true
	case r.stopped():
		r.cfg.logger.Debug("cron job not started: scheduler stopping", "job", r.name, "tick", ev.Tick)
	case locked:
		ev.Outcome, ev.Err = OutcomeSkippedOverlap, fmt.Errorf("scheduler: previous run still running: %w", err)
		r.report(ev)
	default:
		ev.Outcome, ev.Err = OutcomeLockError, err
		r.report(ev)
	}
	return nil, false
}

// waitRunning waits for the running lock until the max delay from the run's
// start, or until Stop begins.
func (r *runner) waitRunning(start time.Time) (lease, error) {
	ctx, cancel := context.WithDeadline(r.host.stopping, start.Add(r.maxDelay))
	defer cancel()
	return r.locks.Acquire(r.holderContext(ctx), runningResource(r.name), r.cfg.ttl)
}
