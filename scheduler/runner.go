package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
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
	// running ends, with cause errStopped, when Stop's context ends: the
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

	early     time.Duration // a run may start this long before its activation
	margin    time.Duration // max(skew, minMargin)
	budget    time.Duration // how long a run tries to win a lock
	baseTTL   time.Duration // least TTL of a tick record
	gap       time.Duration // smallest interval of sched, 0 if unknown
	maxDelay  time.Duration // WithDelayIfRunning bound
	retention time.Duration // bridge: asynq retention of the task

	mu      sync.Mutex
	learned time.Duration // spec-less: the interval between the last two ticks
	regular bool          // spec-less: learned is also the interval before
	prev    time.Time     // spec-less: the last tick seen; interval job: the last start
	short   int           // interval job: starts in a row under half the interval apart
	state   entryState    // for Entries
	logs    logState      // what the job's log lines follow (logstate.go)
}

// newRunner validates a job and derives its timings. sched may be nil.
func newRunner(locks locker, name string, sched cron.Schedule, job cron.Job, cfg config, h *host) (*runner, error) {
	if err := checkName(name, cfg.anyName); err != nil {
		return nil, err
	}
	if job == nil {
		return nil, invalidf("job %q: nil job", name)
	}
	if tj, ok := job.(*taskJob); ok {
		if err := tj.check(); err != nil {
			return nil, fmt.Errorf("%w (job %q)", err, name)
		}
	}
	r := &runner{locks: locks, name: name, prefix: defaultPrefix, sched: sched, cfg: cfg, job: job, host: h, tracer: cfg.tracer()}
	r.logs.settle()
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
	r.setRetention()
	return r, nil
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
		return invalidf("job %q: robfig's @every counts from each cron's start, so replicas do not share its ticks; "+
			"schedule the job with scheduler.Every (c.Schedule(scheduler.Every(d), job)) or use a Scheduler", r.name)
	}
	gap, never := minGap(r.sched, r.cfg.now().In(r.cfg.loc))
	if never {
		return invalidf("job %q: the schedule never activates", r.name)
	}
	r.gap = gap
	return nil
}

// setRetention derives the bridge's asynq retention.
func (r *runner) setRetention() {
	r.retention = max(defaultRetention, 2*r.cfg.skew+r.margin)          // at least the tick window
	r.retention = (r.retention + time.Second - 1).Truncate(time.Second) // asynq keeps whole seconds
}

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

func (r *runner) stopped() bool { return r.host.stopping.Err() != nil }
