package scheduler

import (
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

// Singleton returns a robfig/cron JobWrapper under which each tick of the
// wrapped job runs at most once across the replicas that run the same cron
// table with locks from the same Redlock nodes, never overlapping its own
// previous run: cron.NewChain(scheduler.Singleton(locks, "report")).Then(job),
// or first in cron.WithChain. A run's tick is the whole second at which cron
// activated it (WithSpec: the spec's activation). For robfig's "@every d"
// use c.Schedule(scheduler.Every(d), job). One wrapper may wrap several
// jobs, named name, "name#2", ... in the order they are added.
//
// Singleton panics with an error matching redlock.ErrInvalid (nil client,
// bad name, job or option, an "@every" spec, WithCatchUp) where the wrapper
// is made or wraps a job, as regexp.MustCompile does: a job that could
// never run is never returned.
func Singleton(client *redlock.Client, name string, opts ...Option) cron.JobWrapper {
	locks, err := lockerFor(client)
	if err == nil {
		var w cron.JobWrapper
		if w, err = newSingleton(locks, name, opts); err == nil {
			return w
		}
	}
	panic(err)
}

func newSingleton(locks locker, name string, opts []Option) (cron.JobWrapper, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts, "Singleton"); err != nil {
		return nil, fmt.Errorf("%w (job %q)", err, name)
	}
	sched := cfg.schedule
	if cfg.hasSpec {
		s, err := parse(cfg.spec, cfg.loc, true)
		if err != nil {
			return nil, fmt.Errorf("%w (job %q)", err, name)
		}
		sched = s
	}
	if _, err := newRunner(locks, name, sched, cron.FuncJob(func() {}), cfg, background); err != nil {
		return nil, err // validated now; each wrapped job gets its own runner
	}
	clock := newClockWatch(locks, cfg)
	var wrapped atomic.Int64
	return func(job cron.Job) cron.Job {
		n, jobName := wrapped.Add(1), name
		if n > 1 {
			jobName += "#" + strconv.FormatInt(n, 10)
			cfg.logger.Info("cron job: one Singleton wraps several jobs; this one is named by its order "+
				"(give each job its own Singleton for a stable name)", "job", jobName)
		}
		r, err := newRunner(locks, jobName, sched, job, cfg, background)
		if err != nil {
			panic(err)
		}
		r.clock = clock
		return r
	}, nil
}
