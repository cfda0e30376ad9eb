package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
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
	ev, ok := r.tickOf(r.cfg.now().In(r.cfg.loc))
	if !ok {
		r.report(ev)
		return
	}
	r.runTick(ev, start, false)
}

// tickOf tells the tick of a run that starts at now, or the event that
// reports a run within the skew of no activation.
func (r *runner) tickOf(now time.Time) (Event, bool) {
	t, ok := r.tickAt(now)
	if !ok {
		return Event{Outcome: OutcomeSkippedBeyondSkew, Err: fmt.Errorf("%w: job %q, run started at %s, skew %v",
			errNoTick, r.name, now.Format(time.RFC3339Nano), r.cfg.skew)}, false
	}
	return Event{Tick: t}, true
}

// tickAt tells the tick of a run that starts at now: for an interval job
// the interval it starts in, for a schedule its activation within the skew,
// else its whole second (learning the interval between ticks).
func (r *runner) tickAt(now time.Time) (time.Time, bool) {
	switch {
	case r.every > 0:
		return now.Add(-time.Duration(floorMod(now.UnixNano(), r.every.Nanoseconds()))), true
	case r.sched != nil:
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

// floorMod is n modulo d, in [0, d).
func floorMod(n, d int64) int64 { return ((n % d) + d) % d }

// runTick wins the tick and runs the job (or enqueues the task).
func (r *runner) runTick(ev Event, start time.Time, catchUp bool) {
	r.startTick(&ev, catchUp)
	defer ev.span.End() // a no-op once report ended it; ends the span of a run cut by Stop
	x := r.begin(r.host.stopping, &ev, start, catchUp)
	if x == nil {
		return
	}
	ctx := withSpan(r.withRun(x.ctx, ev), ev)
	_ = x.end(r.call(ctx))
}

// run is one run of a job under its running lock, kept alive.
type run struct {
	r     *runner
	ev    Event
	rl    lease
	ctx   context.Context // cancelled with cause redlock.ErrLockLost on loss
	stop  context.CancelFunc
	began time.Time

	once sync.Once
	err  error
}

// begin wins the tick and the running lock, or reports why the run ends
// here (ev.Err) and returns nil. The bridge enqueues here.
func (r *runner) begin(ctx context.Context, ev *Event, start time.Time, catchUp bool) *run {
	if !r.claim(ctx, ev, start, catchUp) {
		return nil
	}
	r.checkPhase(ev.Tick)
	if catchUp {
		r.report(Event{Tick: ev.Tick, Outcome: OutcomeLate, Duration: r.cfg.now().Sub(ev.Tick), Err: errCaughtUp, span: ev.span})
	}
	if tj, ok := r.job.(*taskJob); ok {
		r.enqueue(tj, *ev)
		return nil
	}
	rl, ok := r.acquireRunning(ctx, ev, start)
	if !ok {
		return nil
	}
	kctx, stop := rl.KeepAlive(r.host.running)
	return &run{r: r, ev: *ev, rl: rl, ctx: kctx, stop: stop, began: time.Now()}
}

// end stops the keep-alive, releases the running lock and reports the run
// with the job's error; a lost lock fails the run. Only the first call
// counts; each returns the run's error.
func (x *run) end(err error) error {
	x.once.Do(func() {
		ev := x.ev
		ev.Duration = time.Since(x.began)
		cause := context.Cause(x.ctx)
		x.stop()
		x.r.release(x.rl)
		switch {
		case errors.Is(cause, redlock.ErrLockLost) && !errors.Is(err, redlock.ErrLockLost):
			ev.Outcome, ev.Err = OutcomeFailed, errors.Join(err, cause)
		case err != nil:
			ev.Outcome, ev.Err = OutcomeFailed, err
		default:
			ev.Outcome = OutcomeRan
		}
		x.err = ev.Err
		x.r.report(ev)
	})
	return x.err
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
