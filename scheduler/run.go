package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"
)

// Run is called by cron at each activation: it finds the tick, wins it (or
// learns another replica did) and runs the job under the running lock.
func (r *runner) Run() {
	if r.host.stopping.Err() != nil {
		return
	}
	if r.clock != nil {
		r.clock.poke()
	}
	start := time.Now()
	if ev, ok := r.tickOf(r.cfg.now().In(r.cfg.loc)); !ok {
		r.report(ev)
	} else {
		r.runTick(ev, start, false)
	}
}

// tickOf tells the tick of a run that starts at now: an interval job's
// interval, a schedule's activation within the skew, else its whole second
// (robfig's schedules activate on whole seconds, never early by its clock).
func (r *runner) tickOf(now time.Time) (Event, bool) {
	var t time.Time
	ok := true
	switch {
	case r.every > 0:
		t = now.Add(-time.Duration(floorMod(now.UnixNano(), r.every.Nanoseconds())))
	case r.sched != nil:
		t, ok = tickFor(r.sched, now, r.cfg.skew, r.early)
	default:
		t = now.Truncate(time.Second)
		if ok = now.Sub(t) <= r.cfg.skew; !ok {
			break
		}
		r.mu.Lock()
		if !r.prev.IsZero() && t.After(r.prev) {
			r.regular = t.Sub(r.prev) == r.learned
			r.learned = t.Sub(r.prev)
		}
		r.prev = t
		r.mu.Unlock()
	}
	if !ok {
		return Event{Outcome: OutcomeSkippedBeyondSkew, Err: fmt.Errorf("%w: job %q, run started at %s, skew %v",
			errNoTick, r.name, now.Format(time.RFC3339Nano), r.cfg.skew)}, false
	}
	return Event{Tick: t}, true
}

// runTick wins the tick and runs the job (or enqueues the task).
func (r *runner) runTick(ev Event, start time.Time, catchUp bool) {
	r.startTick(&ev, catchUp)
	defer ev.span.End() // a no-op once report ended it; ends the span of a run cut by Stop
	if x := r.begin(r.host.stopping, &ev, start, catchUp); x != nil {
		_ = x.end(call(r.withRun(x.ctx, ev), r.job))
	}
}

// catchUpLater runs the job's latest tick within the catch-up deadline in
// the background, unless its record (kept that long) shows a replica ran it.
func (r *runner) catchUpLater() {
	if r.cfg.catchUp <= 0 { // a Scheduler's jobs only (apply refuses it elsewhere)
		return
	}
	r.host.wg.Add(1)
	go func() {
		defer r.host.wg.Done()
		start := time.Now()
		tick, ok := tickFor(r.sched, r.cfg.now().In(r.cfg.loc), r.cfg.catchUp, 0)
		if ok && r.host.stopping.Err() == nil {
			r.runTick(Event{Tick: tick}, start, true)
		}
	}()
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
// (a lost lock fails it). Only the first call counts; each returns the
// run's error.
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

// acquireRunning takes the job's running lock under the overlap policy,
// or reports why the tick is not run (ev.Err).
func (r *runner) acquireRunning(ctx context.Context, ev *Event, start time.Time) (lease, bool) {
	rl, err := r.try(ctx, r.runningResource(), r.cfg.ttl, false)
	locked := errors.Is(err, redlock.ErrLocked)
	if locked && r.cfg.delay && ctx.Err() == nil {
		// Wait for the previous run, woken by its release, until the max
		// delay from the run's start. A wait that runs out matches the
		// context error (it may end queued behind a run of this process).
		wctx, cancel := context.WithDeadline(ctx, start.Add(r.maxDelay))
		rl, err = r.locks.Acquire(r.holderContext(wctx), r.runningResource(), r.cfg.ttl)
		cancel()
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

// call runs a job, turning a panic into a *panicError.
func call(ctx context.Context, job cron.Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	if j, ok := job.(contextJob); ok {
		return j.RunContext(ctx)
	}
	job.Run()
	return nil
}

// panicError is a job's panic: its value, and the stack logged with it.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("scheduler: job panicked: %v", e.value) }

func (e *panicError) Unwrap() error {
	err, _ := e.value.(error)
	return err
}

// contextJob is a cron.Job that takes the run's context and whose error is
// the run's outcome; a plain cron.Job gets neither.
type contextJob interface {
	cron.Job
	RunContext(ctx context.Context) error
}

// Func adapts a function to a cron.Job run with the run's context:
// cancelled with cause redlock.ErrLockLost if the running lock is lost (or
// "scheduler: stopped" when a Scheduler's Stop runs out of time), carrying
// the run (FromContext). Its error, or its panic (logged with the stack),
// is the run's outcome. Any cron.Job with a method RunContext(ctx) error is
// run the same way.
func Func(fn func(ctx context.Context) error) cron.Job { return funcJob(fn) }

type funcJob func(ctx context.Context) error

func (f funcJob) Run() { _ = f(context.Background()) }

func (f funcJob) RunContext(ctx context.Context) error { return f(ctx) }

// checkJob refuses a job that cannot run: nil, Func(nil), or a bridge
// without its client or task.
func checkJob(job cron.Job) error {
	fj, isFunc := job.(funcJob)
	tj, isTask := job.(*taskJob)
	switch {
	case job == nil:
		return invalidf("nil job")
	case isFunc && fj == nil:
		return invalidf("nil function")
	case isTask && tj.enq == nil:
		return invalidf("nil enqueuer")
	case isTask && tj.task == nil:
		return invalidf("nil task")
	case isTask && strings.TrimSpace(tj.task.Type()) == "":
		return invalidf("task with an empty type")
	}
	return nil
}

type runKey struct{}

// FromContext returns the run a job's context belongs to, as the Event that
// will report it without its outcome (Job, Tick, Replica; the bridge's
// TaskID); false outside a run.
func FromContext(ctx context.Context) (Event, bool) {
	ev, ok := ctx.Value(runKey{}).(Event)
	return ev, ok
}

// withRun is ctx carrying the run, and the tick's span as the parent of
// the job's spans.
func (r *runner) withRun(ctx context.Context, ev Event) context.Context {
	span := ev.span
	ev.Job, ev.Replica, ev.span = r.name, r.cfg.replica, nil
	return context.WithValue(trace.ContextWithSpan(ctx, span), runKey{}, ev)
}
