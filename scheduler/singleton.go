package scheduler

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

// Singleton returns a robfig/cron JobWrapper that makes each tick of the
// wrapped job run at most once across all replicas that run the same cron
// table with locks from the same Redlock nodes, and never overlap its own
// previous run (see the package documentation). Use it as any JobWrapper:
//
//	c := cron.New(cron.WithSeconds())
//	c.AddJob("*/10 * * * * *", cron.NewChain(scheduler.Singleton(locks, "report")).Then(job))
//
// or for every job of a cron with cron.WithChain. The schedule need not be
// restated: a run's tick is the whole second at which cron activated it
// (WithSpec or WithSchedule add tolerance for late deliveries and longer
// tick records). Put Singleton first in the chain, so that no wrapper
// delays the run before Singleton sees it: without a schedule, a run
// delivered a second or more late would be taken for a later second. Use
// WithOverlap(DelayIfRunning) rather than cron.DelayIfStillRunning, and
// cron.SkipIfStillRunning is not needed (SkipIfRunning is the default).
//
// robfig's "@every d" activates d after each cron's start, so replicas do
// not share its ticks: a Singleton given no schedule cannot see that and
// would let each replica run its own ticks. Schedule such jobs with
// c.Schedule(scheduler.Every(d), job), whose ticks are the multiples of d
// since the epoch on every replica, or give WithSpec("@every d"), which is
// refused with an error that says so.
//
// One wrapper may wrap several jobs (cron.WithChain): each gets its own
// ticks and locks. The first job wrapped is named name; a job wrapped with
// Named is "name/<its name>"; any other is "name#2", "name#3", … in the
// order the jobs are added, which must then be the same on every replica.
//
// Singleton panics, naming the problem, when its input cannot work (nil
// client, bad name, bad option, an "@every" spec); a wrapped Named job
// with a bad name panics when it is added. NewSingleton returns the error
// instead. Jobs that implement ContextJob (such as Func and EnqueueJob)
// receive a context kept alive by the job's lock; plain cron.Jobs run as
// they are.
func Singleton(client *redlock.Client, name string, opts ...Option) cron.JobWrapper {
	w, err := NewSingleton(client, name, opts...)
	if err != nil {
		panic(err)
	}
	return w
}

// NewSingleton is Singleton with an error result: it fails with ErrInvalid
// (nil client, bad option, WithCatchUp), ErrInvalidName or ErrInvalidSpec.
// The wrapper it returns panics when it is given a Named job with a bad
// name (when the job is added to the cron).
func NewSingleton(client *redlock.Client, name string, opts ...Option) (cron.JobWrapper, error) {
	locks, err := lockerFor(client)
	if err != nil {
		return nil, err
	}
	return newSingleton(locks, name, opts)
}

func newSingleton(locks locker, name string, opts []Option) (cron.JobWrapper, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if cfg.catchUp > 0 {
		return nil, invalidf("job %q: WithCatchUp is for a Scheduler (a Singleton does not know when its cron starts)", name)
	}
	sched := cfg.schedule
	if cfg.hasSpec {
		s, err := parseSingletonSpec(cfg.spec, cfg.loc)
		if err != nil {
			return nil, fmt.Errorf("job %q: %w", name, err)
		}
		sched = s
	}
	// Validate now; each wrapped job gets its own runner.
	if _, err := newRunner(locks, name, sched, Func(nil), cfg, background); err != nil {
		return nil, err
	}
	n := &namer{name: name, logger: cfg.logger}
	clock := newClockWatch(locks, cfg)
	return func(job cron.Job) cron.Job {
		jobName, jobSched := n.next(job), sched
		if nj, ok := job.(*namedJob); ok {
			if nj.schedule != nil {
				jobSched = nj.schedule
			}
			job = nj.job
		}
		r, err := newRunner(locks, jobName, jobSched, job, cfg, background)
		if err != nil {
			panic(err)
		}
		r.clock = clock
		return r
	}, nil
}

// parseSingletonSpec parses a spec given to Singleton, refusing "@every":
// the cron that runs the job reads it as robfig's start-relative schedule.
func parseSingletonSpec(spec string, loc *time.Location) (cron.Schedule, error) {
	s, err := specParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrInvalidSpec, spec, err)
	}
	if _, ok := s.(cron.ConstantDelaySchedule); ok {
		return s, nil // refused by newRunner, with the way out
	}
	return normalize(s, loc), nil
}

// namer names the jobs of one wrapper.
type namer struct {
	name   string
	logger *slog.Logger

	mu    sync.Mutex
	plain int // jobs wrapped that are not Named
}

// next returns the name of the next job wrapped.
func (n *namer) next(job cron.Job) string {
	if nj, ok := job.(*namedJob); ok {
		if err := checkName(nj.name); err != nil {
			panic(fmt.Errorf("scheduler.Named job of Singleton %q: %w", n.name, err))
		}
		return n.name + "/" + nj.name
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.plain++
	if n.plain == 1 {
		return n.name
	}
	name := n.name + "#" + strconv.Itoa(n.plain)
	n.logger.Info("cron job: one Singleton wraps several jobs; this one is named by its order (use scheduler.Named for a stable name)",
		"job", name)
	return name
}
