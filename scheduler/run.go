package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

const (
	// minMargin is the least margin of the tick window beyond the skew.
	minMargin = 250 * time.Millisecond
	// releaseTimeout bounds the release of a lock after its work is done.
	releaseTimeout = lockutil.ReleaseTimeout
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
	// wg counts runs started outside cron (catch-up); nil for Singleton.
	wg *sync.WaitGroup
}

// background is the host of Singleton wrappers: it never stops.
var background = &host{stopping: context.Background(), running: context.Background()}

// runner runs one job under the per-tick and running locks. It is the
// cron.Job that Singleton and Scheduler hand to cron.
type runner struct {
	locks locker
	name  string
	sched cron.Schedule // nil: a run's tick is its whole second
	cfg   config
	job   cron.Job // a ContextJob, a plain cron.Job or a *taskJob
	host  *host
	clock *clockWatch // measures this replica's clock offset; may be nil

	early     time.Duration // a run may start this long before its activation
	margin    time.Duration // max(skew, minMargin)
	budget    time.Duration // how long a run tries to win a lock
	baseTTL   time.Duration // least TTL of a tick record
	gap       time.Duration // smallest interval of sched, 0 if unknown
	maxDelay  time.Duration // DelayIfRunning bound
	retention time.Duration // bridge: asynq retention of the task

	mu      sync.Mutex
	learned time.Duration // spec-less: the interval between the last two ticks
	prev    time.Time     // spec-less: the last tick seen
	state   entryState    // for Entries
}

// newRunner validates a job and derives its timings. sched may be nil.
func newRunner(locks locker, name string, sched cron.Schedule, job cron.Job, cfg config, h *host) (*runner, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if job == nil {
		return nil, invalidf("job %q: nil job", name)
	}
	if tj, ok := job.(*taskJob); ok {
		if err := tj.check(); err != nil {
			return nil, fmt.Errorf("job %q: %w", name, err)
		}
	}
	r := &runner{locks: locks, name: name, sched: sched, cfg: cfg, job: job, host: h}
	if err := r.checkSchedule(); err != nil {
		return nil, err
	}
	r.margin = max(cfg.skew, minMargin)
	r.budget = r.margin / 2
	// Two replicas start a tick within 2·skew of each other; the last
	// one's last attempt comes within the budget, and a win later than
	// the margin is given up: the record outlives all of them.
	r.baseTTL = max(cfg.ttl, 2*cfg.skew+2*r.margin)
	r.early = max(0, min(cfg.skew, (r.gap-cfg.skew)/2))
	r.maxDelay = cfg.maxDelay
	if r.maxDelay == 0 {
		r.maxDelay = r.gap
		if r.gap == 0 {
			r.maxDelay = defaultMaxDelayCap
		}
	}
	return r, r.setRetention()
}

// checkSchedule refuses schedules that cannot be run and notes the interval.
func (r *runner) checkSchedule() error {
	if r.sched == nil {
		if r.cfg.catchUp > 0 {
			return invalidf("job %q: WithCatchUp needs the job's schedule: register it with a Scheduler", r.name)
		}
		return nil
	}
	if _, ok := r.sched.(cron.ConstantDelaySchedule); ok {
		return fmt.Errorf("%w: job %q: robfig's @every counts from each cron's start, so replicas do not share its ticks; "+
			"schedule the job with scheduler.Every (c.Schedule(scheduler.Every(d), job)) or use a Scheduler", ErrInvalidSpec, r.name)
	}
	gap, never := minGap(r.sched, r.cfg.now().In(r.cfg.loc))
	if never {
		return fmt.Errorf("%w: job %q: the schedule never activates", ErrInvalidSpec, r.name)
	}
	r.gap = gap
	return nil
}

// setRetention derives the bridge's asynq retention.
func (r *runner) setRetention() error {
	window := 2*r.cfg.skew + r.margin
	r.retention = r.cfg.retention
	if r.retention == 0 {
		r.retention = max(DefaultRetention, window)
	} else if r.retention < window {
		return invalidf("job %q: retention %v is shorter than the tick window %v", r.name, r.retention, window)
	}
	r.retention = (r.retention + time.Second - 1).Truncate(time.Second) // asynq keeps whole seconds
	return nil
}

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
		r.report(Event{Outcome: OutcomeSkippedNoTick, Err: fmt.Errorf("%w: run started at %s, skew %v",
			ErrNoTick, now.Format(time.RFC3339Nano), r.cfg.skew)})
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
		r.learned = t.Sub(r.prev)
	}
	r.prev = t
	r.mu.Unlock()
	return t, true
}

// tickTTL is how long a won tick is remembered: the tick window, most of
// the interval when known, the catch-up deadline beyond it.
func (r *runner) tickTTL() time.Duration {
	r.mu.Lock()
	gap := cmp.Or(r.gap, r.learned)
	r.mu.Unlock()
	ttl := max(r.baseTTL, gap/10*9)
	if r.cfg.catchUp > 0 {
		// 2% beyond the deadline: a node whose clock runs fast expires
		// keys early (redlock allows 1% by default).
		ttl = max(ttl, r.cfg.catchUp+r.cfg.catchUp/50+r.baseTTL)
	}
	return ttl
}

// runTick wins the tick and runs the job (or enqueues the task).
func (r *runner) runTick(ev Event, start time.Time, catchUp bool) {
	if !r.claim(&ev, start, catchUp) {
		return
	}
	if catchUp {
		r.report(Event{Tick: ev.Tick, Outcome: OutcomeCaughtUp, Duration: r.cfg.now().Sub(ev.Tick)})
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

// claim wins the tick's lock, or reports why this run ends here. The lock
// is never released after a run: it is the record of the tick, and
// expires with its TTL.
func (r *runner) claim(ev *Event, start time.Time, catchUp bool) bool {
	res := tickResource(r.name, ev.Tick)
	ttl := r.tickTTL()
	tl, err := r.try(res, ttl)
	_, bridge := r.job.(*taskJob)
	switch {
	case err == nil && !bridge && !catchUp && time.Since(start) >= r.margin:
		// Won too late to be sure: a replica that won this tick earlier
		// may have a record that already expired. Give it up, do not run.
		// (The bridge goes on: the task ID still keeps a copy out.)
		r.release(tl)
		ev.Outcome = OutcomeLockError
		ev.Err = fmt.Errorf("tick lock won %v after the run started, past the %v margin: slow lock nodes?",
			time.Since(start).Round(time.Millisecond), r.margin)
		r.report(*ev)
		return false
	case err == nil:
		return true
	case r.stopped():
		return false
	case errors.Is(err, redlock.ErrLocked):
		r.lost(*ev, res, []time.Duration{r.baseTTL, ttl}, start, err)
		return false
	case bridge:
		// The task ID alone keeps a second copy out of the queue.
		r.cfg.logger.Warn("cron job: lock nodes unavailable, enqueueing by task ID only",
			"job", r.name, "tick", ev.Tick, "replica", r.cfg.replica, "err", err)
		return true
	}
	ev.Outcome, ev.Err = OutcomeLockError, err
	r.report(*ev)
	return false
}

// acquireRunning takes the job's running lock under the overlap policy,
// or reports why the tick is not run.
func (r *runner) acquireRunning(ev Event, start time.Time) (lease, bool) {
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
			r.report(Event{Tick: ev.Tick, Outcome: OutcomeDelayed, Duration: time.Since(start)})
		}
	}
	switch {
	case err == nil:
		return rl, true
	case r.stopped():
		r.cfg.logger.Info("cron job not started: scheduler stopping", "job", r.name, "tick", ev.Tick)
	case locked:
		ev.Outcome, ev.Err = OutcomeSkippedOverlap, fmt.Errorf("previous run still running: %w", err)
		r.report(ev)
	default:
		ev.Outcome, ev.Err = OutcomeLockError, err
		r.report(ev)
	}
	return nil, false
}

// execute runs the job under its running lock, kept alive, and reports.
func (r *runner) execute(rl lease, ev Event) {
	kctx, stop := rl.KeepAlive(r.host.running)
	ctx := context.WithValue(kctx, infoKey{}, RunInfo{Job: r.name, Tick: ev.Tick, retention: r.retention})
	began := time.Now()
	err := r.call(ctx)
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
	ctx := r.holderContext(r.host.stopping)
	for {
		l, err := r.locks.TryAcquire(ctx, resource, ttl)
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
	return r.locks.Acquire(r.holderContext(ctx), runningResource(r.name), r.cfg.ttl)
}

// holderContext names the job (and this replica) in the locks taken under
// ctx, so that other replicas and operators can tell who ran a tick.
func (r *runner) holderContext(ctx context.Context) context.Context {
	name := "job " + r.name
	if r.cfg.replica != "" {
		name += " on " + r.cfg.replica
	}
	return redlock.ContextWithHolder(ctx, name)
}

// release gives a lock up after its work.
func (r *runner) release(l lease) {
	if err := lockutil.Release(context.Background(), l); err != nil && !errors.Is(err, redlock.ErrClosed) && !errors.Is(err, redlock.ErrLockLost) {
		r.cfg.logger.Debug("cron job: lock release failed", "job", r.name, "err", err)
	}
}

func (r *runner) stopped() bool { return r.host.stopping.Err() != nil }
