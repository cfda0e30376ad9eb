package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// Run is called by cron at each activation. It finds the tick, wins it or
// learns that another replica did, and runs the job under the running lock.
func (r *runner) Run() {
	if r.stopped() {
		return
	}
	if r.clock != nil {
		r.clock.poke()
	}
	start := time.Now()
	now := r.cfg.now().In(r.cfg.loc)
	tick, ok := r.tickOf(now)
	if !ok {
		r.report(Event{Outcome: OutcomeSkippedBeyondSkew, Err: fmt.Errorf("%w: run started at %s, skew %v",
			errNoTick, now.Format(time.RFC3339Nano), r.cfg.skew)})
		return
	}
	r.runTick(Event{Tick: tick}, start, false)
}

// tickOf tells the tick of a run that starts at now.
func (r *runner) tickOf(now time.Time) (time.Time, bool) {
	if r.sched != nil {
		return tickFor(r.sched, now, r.cfg.skew, r.early)
	}
	t := secondTick(now)
	if now.Sub(t) > r.cfg.skew {
		return time.Time{}, false
	}
	r.mu.Lock()
	if !r.prev.IsZero() && t.After(r.prev) {
		r.regular = t.Sub(r.prev) == r.learned
		r.learned = t.Sub(r.prev)
	}
	r.prev = t
	r.mu.Unlock()
	return t, true
}

// runTick wins the tick and runs the job (or enqueues the task).
func (r *runner) runTick(ev Event, start time.Time, catchUp bool) {
	r.startTick(&ev, catchUp)
	defer ev.span.End() // a no-op once report ended it; ends the span of a run cut by Stop
	if !r.claim(&ev, start, catchUp) {
		return
	}
	r.checkPhase(ev.Tick)
	if catchUp {
		r.report(Event{Tick: ev.Tick, Outcome: OutcomeLate, Duration: r.cfg.now().Sub(ev.Tick), Err: errCaughtUp, span: ev.span})
	}
	if tj, ok := r.job.(*taskJob); ok {
		r.enqueue(tj, ev)
		return
	}
	rl, ok := r.acquireRunning(ev, start)
	if !ok {
		return
	}
	r.execute(rl, ev)
}

// execute runs the job under its running lock, kept alive, and reports.
func (r *runner) execute(rl lease, ev Event) {
	kctx, stop := rl.KeepAlive(r.host.running)
	ctx := withSpan(r.withRun(kctx, ev), ev)
	began := time.Now()
	err := r.call(ctx)
	ev.Duration = time.Since(began)
	cause := context.Cause(ctx)
	stop()
	r.release(rl)

	switch {
	case errors.Is(cause, redlock.ErrLockLost) && !errors.Is(err, redlock.ErrLockLost):
		ev.Outcome, ev.Err = OutcomeFailed, errors.Join(err, cause)
	case err != nil:
		ev.Outcome, ev.Err = OutcomeFailed, err
	default:
		ev.Outcome = OutcomeRan
	}
	r.report(ev)
}

// call runs the job, turning a panic into a *panicError.
func (r *runner) call(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	if j, ok := r.job.(contextJob); ok {
		return j.RunContext(ctx)
	}
	r.job.Run()
	return nil
}
