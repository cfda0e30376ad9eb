package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

const (
	// minMargin is the least time a tick is remembered beyond the skew.
	minMargin = 250 * time.Millisecond
	// releaseTimeout bounds the release of a lock after its work is done.
	releaseTimeout = 5 * time.Second
	// firstRetry is the first delay before retrying a lock that was not won.
	firstRetry = 4 * time.Millisecond
	// defaultMaxDelayCap bounds the default max delay of schedules that
	// activate too rarely for an interval to be measured.
	defaultMaxDelayCap = 24 * time.Hour
)

// host is what owns runners: their contexts end when a Scheduler stops.
type host struct {
	// stopping ends when Stop begins: runs that have not started their job
	// give up (no new lock waits).
	stopping context.Context
	// running ends, with cause ErrStopped, when Stop's context ends: the
	// contexts of running jobs are cancelled.
	running context.Context
}

// background is the host of Singleton wrappers: it never stops.
var background = &host{stopping: context.Background(), running: context.Background()}

// runner runs one job on its schedule under the per-tick and running
// locks. It is the cron.Job that Singleton and Scheduler hand to cron.
type runner struct {
	locks   locker
	name    string
	sched   cron.Schedule
	cfg     config
	job     cron.Job // a ContextJob, a plain cron.Job or a *taskJob
	host    *host
	invalid error // misconfiguration: every run is skipped with it

	early     time.Duration // a run may start this long before its activation
	margin    time.Duration // max(skew, minMargin)
	hold      time.Duration // how long a won tick is remembered
	budget    time.Duration // how long a run tries to win a lock
	tickTTL   time.Duration // TTL of the tick lock
	maxDelay  time.Duration // DelayIfRunning bound
	retention time.Duration // bridge: asynq retention of the task
}

// newRunner validates a job and derives its timings.
func newRunner(locks locker, name string, sched cron.Schedule, job cron.Job, cfg config, h *host) (*runner, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if sched == nil {
		return nil, fmt.Errorf("%w for job %q: pass WithSchedule or WithSpec, or wrap the job with Named", ErrNoSchedule, name)
	}
	if job == nil {
		return nil, invalidf("job %q: nil job", name)
	}
	if tj, ok := job.(*taskJob); ok {
		if err := tj.check(); err != nil {
			return nil, fmt.Errorf("job %q: %w", name, err)
		}
	}
	gap, never := minGap(sched, time.Now().In(cfg.loc))
	if never {
		return nil, fmt.Errorf("%w: job %q: the schedule never activates", ErrInvalidSpec, name)
	}
	if gap > 0 && cfg.skew >= gap {
		return nil, fmt.Errorf("%w: job %q: skew %v, smallest interval %v (over the next %d activations)",
			ErrSkewTooLarge, name, cfg.skew, gap, gapSamples)
	}
	r := &runner{locks: locks, name: name, sched: sched, cfg: cfg, job: job, host: h}
	r.early = cfg.skew
	if gap > 0 {
		r.early = min(cfg.skew, (gap-cfg.skew)/2)
	}
	r.margin = max(cfg.skew, minMargin)
	r.hold = cfg.skew + r.margin
	r.budget = r.margin / 2
	r.tickTTL = max(cfg.ttl, 2*r.hold)
	r.maxDelay = cfg.maxDelay
	if r.maxDelay == 0 {
		r.maxDelay = gap
		if gap == 0 {
			r.maxDelay = defaultMaxDelayCap
		}
	}
	r.retention = cfg.retention
	if r.retention == 0 {
		r.retention = max(DefaultRetention, r.hold)
	} else if r.retention < r.hold {
		return nil, invalidf("job %q: retention %v is shorter than the tick window %v", name, r.retention, r.hold)
	}
	r.retention = (r.retention + time.Second - 1).Truncate(time.Second) // asynq keeps whole seconds
	return r, nil
}

// Run is called by cron at each activation. It finds the tick, wins it or
// learns that another replica did, and runs the job under the running lock.
func (r *runner) Run() {
	if r.invalid != nil {
		r.report(Event{Outcome: OutcomeMisconfigured, Err: r.invalid})
		return
	}
	if r.host.stopping.Err() != nil {
		return
	}
	start := time.Now()
	tick, ok := tickFor(r.sched, start.In(r.cfg.loc), r.cfg.skew, r.early)
	if !ok {
		r.report(Event{Outcome: OutcomeSkippedNoTick, Err: fmt.Errorf("%w: run started at %s, skew %v",
			ErrNoTick, start.In(r.cfg.loc).Format(time.RFC3339Nano), r.cfg.skew)})
		return
	}
	ev := Event{Tick: tick}

	tl, err := r.try(tickResource(r.name, tick), r.tickTTL)
	tj, bridge := r.job.(*taskJob)
	switch {
	case err == nil && !bridge && time.Since(start) >= r.margin:
		// Won too late to be sure: a replica that won this tick earlier may
		// already have run it and let it go. Give it up, do not run. (The
		// bridge goes on: the task ID still keeps a second copy out.)
		r.release(tl)
		ev.Outcome = OutcomeLockError
		ev.Err = fmt.Errorf("tick lock won %v after the run started, past the %v margin: slow lock nodes?",
			time.Since(start).Round(time.Millisecond), r.margin)
		r.report(ev)
		return
	case err == nil:
		// Remember the tick: keep its lock until every replica that may
		// still start this tick has tried, however short the job.
		r.forgetLater(tl, time.Now())
	case r.stopped():
		return
	case errors.Is(err, redlock.ErrLocked):
		ev.Outcome, ev.Err = OutcomeSkippedOtherReplica, err
		r.report(ev)
		return
	case bridge:
		// The task ID alone keeps a second copy out of the queue.
		r.cfg.logger.Warn("cron job: lock nodes unavailable, enqueueing by task ID only",
			"job", r.name, "tick", tick, "err", err)
	default:
		ev.Outcome, ev.Err = OutcomeLockError, err
		r.report(ev)
		return
	}
	if bridge {
		r.enqueue(tj, ev)
		return
	}

	rl, err := r.try(runningResource(r.name), r.cfg.ttl)
	locked := errors.Is(err, redlock.ErrLocked)
	if locked && r.cfg.overlap == DelayIfRunning && !r.stopped() {
		// Wait for the previous run, woken by its release. A wait that
		// runs out matches the context error, not always ErrLocked (it
		// may end queued behind a run of this same process).
		rl, err = r.waitRunning(start)
		locked = errors.Is(err, redlock.ErrLocked) ||
			errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, redlock.ErrQuorum)
		if err == nil {
			r.report(Event{Tick: tick, Outcome: OutcomeDelayed, Duration: time.Since(start)})
		}
	}
	switch {
	case err == nil:
	case r.stopped():
		r.cfg.logger.Info("cron job not started: scheduler stopping", "job", r.name, "tick", tick)
		return
	case locked:
		ev.Outcome, ev.Err = OutcomeSkippedOverlap, fmt.Errorf("previous run still running: %w", err)
		r.report(ev)
		return
	default:
		ev.Outcome, ev.Err = OutcomeLockError, err
		r.report(ev)
		return
	}

	kctx, stop := rl.KeepAlive(r.host.running)
	ctx := context.WithValue(kctx, infoKey{}, RunInfo{Job: r.name, Tick: tick, retention: r.retention})
	began := time.Now()
	err = r.call(ctx)
	ev.Duration = time.Since(began)
	cause := context.Cause(ctx)
	stop()
	r.release(rl)

	var pe *PanicError
	switch {
	case errors.As(err, &pe):
		ev.Outcome, ev.Err = OutcomePanicked, err
	case errors.Is(cause, redlock.ErrLockLost) && !errors.Is(err, redlock.ErrLockLost):
		ev.Outcome, ev.Err = OutcomeFailed, errors.Join(err, cause)
	case err != nil:
		ev.Outcome, ev.Err = OutcomeFailed, err
	default:
		ev.Outcome = OutcomeRan
	}
	r.report(ev)
}

// enqueue runs the bridge for a won tick.
func (r *runner) enqueue(tj *taskJob, ev Event) {
	ev.TaskID = TaskID(r.name, ev.Tick)
	ctx := context.WithValue(r.host.running, infoKey{}, RunInfo{Job: r.name, Tick: ev.Tick, retention: r.retention})
	began := time.Now()
	err := r.call(ctx)
	ev.Duration = time.Since(began)
	var pe *PanicError
	switch {
	case err == nil:
		ev.Outcome = OutcomeEnqueued
	case errors.Is(err, asynq.ErrTaskIDConflict):
		ev.Outcome = OutcomeAlreadyEnqueued
	case errors.As(err, &pe):
		ev.Outcome, ev.Err = OutcomePanicked, err
	default:
		ev.Outcome, ev.Err = OutcomeFailed, err
	}
	r.report(ev)
}

// call runs the job, turning a panic into a *PanicError.
func (r *runner) call(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	if j, ok := r.job.(ContextJob); ok {
		return j.RunContext(ctx)
	}
	r.job.Run()
	return nil
}

// try locks resource, retrying within the run's budget: contenders that
// start at the same moment may split the nodes so that nobody wins the
// first attempt, and a node may fail once. Retries back off from
// firstRetry, doubling, with jitter; when another replica holds the
// resource they end with its ErrLocked.
//
// The budget only bounds when the last attempt may start: an attempt is not
// cut short (it is bounded by the client's node timeout), so that its
// answer (ErrLocked, ErrQuorum) is never replaced by a context error.
func (r *runner) try(resource string, ttl time.Duration) (lease, error) {
	deadline := time.Now().Add(r.budget)
	backoff := firstRetry
	for {
		l, err := r.locks.TryAcquire(r.host.stopping, resource, ttl)
		if err == nil || errors.Is(err, redlock.ErrInvalid) || errors.Is(err, redlock.ErrClosed) || r.stopped() {
			return l, err
		}
		d := backoff/2 + rand.N(backoff)
		if time.Until(deadline) < d {
			return nil, err
		}
		select {
		case <-r.host.stopping.Done():
			return nil, err
		case <-time.After(d):
		}
		backoff *= 2
	}
}

// waitRunning waits for the running lock until the max delay from the run's
// start, or until Stop begins.
func (r *runner) waitRunning(start time.Time) (lease, error) {
	ctx, cancel := context.WithDeadline(r.host.stopping, start.Add(r.maxDelay))
	defer cancel()
	return r.locks.Acquire(ctx, runningResource(r.name), r.cfg.ttl)
}

// forgetLater releases a tick's lock once the tick's window has passed.
// Until then the lock is held (its TTL covers the window), so a replica
// that starts the same tick later skips it. If the process ends first, the
// lock simply expires.
func (r *runner) forgetLater(l lease, won time.Time) {
	time.AfterFunc(r.hold-time.Since(won), func() { r.release(l) })
}

// release gives a lock up after its work.
func (r *runner) release(l lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := l.Release(ctx); err != nil && !errors.Is(err, redlock.ErrClosed) && !errors.Is(err, redlock.ErrLockLost) {
		r.cfg.logger.Debug("cron job: lock release failed", "job", r.name, "err", err)
	}
}

func (r *runner) stopped() bool { return r.host.stopping.Err() != nil }
