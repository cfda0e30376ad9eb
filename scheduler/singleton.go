package scheduler

import (
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

// Singleton returns a robfig/cron JobWrapper that makes each tick of the
// wrapped job run at most once across all replicas that run the same cron
// table with locks from the same Redlock nodes, and never overlap its own
// previous run (see the package documentation).
//
// The wrapper must know the job's schedule, to tell which tick a run belongs
// to: pass WithSchedule or WithSpec with what the cron was given, or wrap
// the job with Named. Singleton never panics and has no error result: when
// its input is bad it logs the reason at once and returns a wrapper whose
// jobs never run, reporting OutcomeMisconfigured at every activation. Use
// NewSingleton to get the error instead.
//
// Jobs that implement ContextJob (such as Func and EnqueueJob) receive a
// context kept alive by the job's lock; plain cron.Jobs run as they are.
func Singleton(client *redlock.Client, name string, opts ...Option) cron.JobWrapper {
	w, err := NewSingleton(client, name, opts...)
	if err == nil {
		return w
	}
	cfg := defaultConfig()
	if cerr := cfg.apply(opts); cerr != nil {
		cfg = defaultConfig()
	}
	cfg.logger.Error("cron job misconfigured: it will never run", "job", name, "err", err)
	bad := &runner{name: name, cfg: cfg, invalid: err}
	return func(cron.Job) cron.Job { return bad }
}

// NewSingleton is Singleton with an error result: it fails with ErrInvalid
// (nil client, bad option), ErrInvalidName, ErrInvalidSpec or
// ErrSkewTooLarge. Without a schedule it only fails later, for a wrapped
// job that is not Named: that job is logged and reported as misconfigured.
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
	sched := cfg.schedule
	if cfg.hasSpec {
		s, err := Parse(cfg.spec, cfg.loc)
		if err != nil {
			return nil, err
		}
		sched = s
	}
	if sched != nil {
		// Validate now; each wrapped job gets its own runner.
		if _, err := newRunner(locks, name, sched, Func(nil), cfg, background); err != nil {
			return nil, err
		}
	}
	return func(job cron.Job) cron.Job {
		jobName, jobSched := name, sched
		if n, ok := job.(*namedJob); ok {
			jobName, jobSched, job = name+"/"+n.name, n.schedule, n.job
			if err := checkName(n.name); err != nil {
				return misconfigured(jobName, cfg, err)
			}
		}
		r, err := newRunner(locks, jobName, jobSched, job, cfg, background)
		if err != nil {
			return misconfigured(jobName, cfg, err)
		}
		return r
	}, nil
}

// misconfigured is a job that never runs: it reports err at every activation.
func misconfigured(name string, cfg config, err error) cron.Job {
	cfg.logger.Error("cron job misconfigured: it will never run", "job", name, "err", err)
	return &runner{name: name, cfg: cfg, invalid: err}
}
