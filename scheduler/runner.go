package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/statelog"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// host is what owns runners: their contexts end when a Scheduler stops.
type host struct {
	stopping context.Context // ends when Stop begins: runs not yet started give up
	running  context.Context // ends (errStopped) when Stop's context ends: running jobs are cancelled
	wg       *sync.WaitGroup // catch-up runs; nil for Singleton and NewJobs
}

// background is the host of Singleton wrappers and NewJobs: it never stops.
var background = &host{stopping: context.Background(), running: context.Background()}

// runner is the cron core: one job run under its per-tick and running
// locks. It is the cron.Job that Singleton and Scheduler hand to cron, and
// what NewJobs's start calls.
type runner struct {
	locks  locker
	name   string
	prefix string        // of the job's keys: "cron:", or NewJobs's
	sched  cron.Schedule // nil: a run's tick is its whole second
	every  time.Duration // > 0: an interval job (NewJobs), whose runs start anywhere in their interval
	cfg    config
	job    cron.Job // a contextJob, a plain cron.Job or a *taskJob
	host   *host
	tracer trace.Tracer
	clock  *clockWatch // measures this replica's clock offset; may be nil

	early    time.Duration // a run may start this long before its activation
	margin   time.Duration // max(skew, 250ms): a tick won later is given up
	budget   time.Duration // how long a run tries to win a lock
	baseTTL  time.Duration // least TTL of a tick record
	gap      time.Duration // smallest interval of sched, 0 if unknown
	maxDelay time.Duration // WithDelayIfRunning bound

	mu      sync.Mutex
	learned time.Duration // spec-less: the interval between the last two ticks
	regular bool          // spec-less: learned is also the interval before
	prev    time.Time     // spec-less: the last tick seen; interval job: the last start
	short   int           // interval job: starts in a row under half the interval apart
	state   entryState    // for Entries
	logs    logState      // what the job's log lines follow (event.go)
}

// newRunner validates a job and derives its timings. sched may be nil.
func newRunner(locks locker, name string, sched cron.Schedule, job cron.Job, cfg config, h *host) (*runner, error) {
	if err := checkName(name, cfg.anyName); err != nil {
		return nil, err
	}
	if err := checkJob(job); err != nil {
		return nil, fmt.Errorf("%w (job %q)", err, name)
	}
	r := &runner{locks: locks, name: name, prefix: "cron:", sched: sched, cfg: cfg, job: job, host: h,
		tracer: cmp.Or(cfg.tp, otel.GetTracerProvider()).Tracer("github.com/asynqlock/asynqlock/scheduler")}
	r.logs.trouble.Settle, r.logs.byID.Settle = statelog.Settle, statelog.Settle
	switch _, every := sched.(cron.ConstantDelaySchedule); {
	case every:
		return nil, invalidf("job %q: robfig's @every counts from each cron's start, so replicas do not share its ticks; "+
			"schedule the job with scheduler.Every (c.Schedule(scheduler.Every(d), job)) or use a Scheduler", name)
	case sched != nil:
		gap, never := minGap(sched, cfg.now().In(cfg.loc))
		if never {
			return nil, invalidf("job %q: the schedule never activates", name)
		}
		r.gap = gap
	}
	r.margin = max(cfg.skew, 250*time.Millisecond)
	r.budget = r.margin / 2
	// Two replicas start a tick within 2·skew of each other; the last one's
	// last attempt comes within the budget, and a win later than the margin
	// is given up: the record outlives all of them.
	r.baseTTL = max(cfg.ttl, 2*cfg.skew+2*r.margin)
	r.early = max(0, min(cfg.skew, (r.gap-cfg.skew)/2))
	r.maxDelay = cmp.Or(cfg.maxDelay, r.gap, 24*time.Hour)
	return r, nil
}

func (r *runner) tickResource(tick time.Time) string {
	return r.prefix + r.name + ":" + strconv.FormatInt(tick.UnixMilli(), 10)
}

func (r *runner) runningResource() string { return r.prefix + r.name + ":running" }

// tickTTL is how long a won tick is remembered: the tick window, most of
// the interval when known, the catch-up deadline beyond it; an interval
// job's to the end of the interval and the tick window beyond.
func (r *runner) tickTTL(tick time.Time) time.Duration {
	if r.every > 0 {
		return max(time.Until(tick.Add(r.every)), 0) + 2*r.cfg.skew + 2*r.margin
	}
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

// claim wins the tick's lock, or reports why this run ends here (ev.Err).
// The lock is the record of the tick: never released, left to expire (so
// that redlock does not report its expiry as a loss).
func (r *runner) claim(ctx context.Context, ev *Event, start time.Time, catchUp bool) bool {
	res, ttl := r.tickResource(ev.Tick), r.tickTTL(ev.Tick)
	tl, err := r.try(ctx, res, ttl, true)
	_, bridge := r.job.(*taskJob)
	switch {
	case err == nil && !bridge && !catchUp && time.Since(start) >= r.margin:
		// Won too late to be sure: an earlier winner's record may have
		// expired. (The bridge goes on: its task ID keeps a copy out.)
		r.release(tl)
		ev.Outcome = OutcomeLockError
		ev.Err = fmt.Errorf("scheduler: job %q: tick lock won %v after the run started, past the %v margin: slow lock nodes?",
			r.name, time.Since(start).Round(time.Millisecond), r.margin)
	case err == nil:
		_ = tl.LeaveToExpire() // nothing to do about a record already expired
		r.logs.byID.OK(r.cfg.logger, "cron job: lock nodes answer again, enqueueing under the tick lock",
			"job", r.name, "replica", r.cfg.replica)
		return true
	case ctx.Err() != nil:
		ev.Err = fmt.Errorf("scheduler: job %q stopped: %w", r.name, errors.Join(context.Cause(ctx), err))
		return false
	case errors.Is(err, redlock.ErrLocked):
		r.lost(ctx, ev, res, []time.Duration{r.baseTTL, ttl}, start, err)
	case bridge: // the task ID alone keeps a second copy out of the queue
		r.logs.byID.Fail(r.cfg.logger, slog.LevelWarn, "cron job: lock nodes unavailable, enqueueing by task ID only", err,
			"job", r.name, "tick", ev.Tick, "replica", r.cfg.replica)
		return true
	default:
		ev.Outcome, ev.Err = OutcomeLockError, fmt.Errorf("scheduler: job %q, tick %s: %w", r.name, ev.Tick.Format(time.RFC3339Nano), err)
	}
	r.report(*ev)
	return false
}

// try locks resource, retrying within the budget (contenders starting at
// once may split the nodes, a node may fail once), backing off from 4ms
// with jitter. Another holder ends it with ErrLocked; for a tick's record
// as soon as a quorum carries that holder, so that a loser leaves gocron's
// singleton or limit slot within a round trip or two. The budget bounds
// when the last attempt starts, never cuts one short, so that its answer
// is not replaced by a context error.
func (r *runner) try(ctx context.Context, resource string, ttl time.Duration, record bool) (lease, error) {
	deadline := time.Now().Add(r.budget)
	ctx = r.holderContext(ctx)
	for backoff := 4 * time.Millisecond; ; backoff *= 2 {
		l, err := r.locks.TryAcquire(ctx, resource, ttl)
		if err == nil || errors.Is(err, redlock.ErrInvalid) || errors.Is(err, redis.ErrClosed) ||
			ctx.Err() != nil {
			return l, err
		}
		if record && errors.Is(err, redlock.ErrLocked) {
			if _, _, taken := r.locks.Record(ctx, resource); taken {
				return nil, err
			}
		}
		d := backoff/2 + rand.N(backoff)
		if time.Until(deadline) < d {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(d):
		}
	}
}

// holderContext names the job and replica in the locks taken under ctx,
// so that other replicas and operators can tell who ran a tick.
func (r *runner) holderContext(ctx context.Context) context.Context {
	return redlock.ContextWithHolder(ctx, "job "+r.name+" on "+r.cfg.replica)
}

func (r *runner) release(l lease) {
	err := lockutil.Release(context.Background(), l)
	if err != nil && !errors.Is(err, redis.ErrClosed) && !errors.Is(err, redlock.ErrLockLost) {
		r.cfg.logger.Debug("cron job: lock release failed", "job", r.name, "err", err)
	}
}

// lost handles a tick another replica holds: the common case (Debug). When
// the record's age shows it was won earlier than any replica within the
// skew could have started the tick, a clock is beyond the skew: still
// skipped, at Warn. Not for interval jobs, whose runs start anywhere in
// the interval. ttls are the TTLs the record may have been written with.
func (r *runner) lost(ctx context.Context, ev *Event, resource string, ttls []time.Duration, start time.Time, err error) {
	ev.Outcome = OutcomeSkippedOtherReplica
	ev.Err = fmt.Errorf("scheduler: job %q, tick %s taken by another replica: %w", r.name, ev.Tick.Format(time.RFC3339Nano), err)
	ctx, cancel := context.WithTimeout(ctx, lockutil.ReleaseTimeout)
	remaining, h, ok := r.locks.Record(ctx, resource)
	cancel()
	r.mu.Lock()
	r.state.otherRanBy = h.String()
	r.mu.Unlock()
	if !ok || r.every > 0 {
		return
	}
	age := time.Duration(-1) // the youngest age that explains the remaining TTL
	for _, ttl := range ttls {
		if a := ttl - remaining; a >= 0 && (age < 0 || a < age) {
			age = a
		}
	}
	if earlier := age - time.Since(start); age >= 0 && earlier > 2*r.cfg.skew+r.budget {
		ev.Outcome = OutcomeSkippedBeyondSkew
		ev.Err = fmt.Errorf("scheduler: tick already run by another replica %v before this run started, more than twice the skew %v: "+
			"a clock offset or delivery delay beyond the skew (%w)", earlier.Round(time.Millisecond), r.cfg.skew, err)
	}
}
