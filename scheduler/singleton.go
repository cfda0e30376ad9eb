package scheduler

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

// Singleton returns a robfig/cron JobWrapper that makes each tick of the
// wrapped job run at most once across all replicas that run the same cron
// table with locks from the same Redlock nodes, and never overlap its own
// previous run. Use it as any JobWrapper:
//
//	c := cron.New(cron.WithSeconds())
//	c.AddJob("*/10 * * * * *", cron.NewChain(scheduler.Singleton(locks, "report")).Then(job))
//
// or for every job of a cron with cron.WithChain, first in the chain. A
// run's tick is the whole second at which cron activated it (WithSpec: the
// activation of the spec). A tick whose previous run still runs is skipped
// (WithDelayIfRunning instead of cron.DelayIfStillRunning). For robfig's
// "@every d", whose ticks count from each cron's start, use
// c.Schedule(scheduler.Every(d), job); a job out of step with another
// replica's is warned of once. One wrapper may wrap several jobs, named
// name, "name#2", ... in the order they are added (the same on every
// replica). Jobs made with Func or EnqueueJob get a context kept alive by
// the job's lock. docs/guide/CRON.md tells the rest.
//
// Singleton panics, where the wrapper is made, with an error matching
// ErrInvalid (nil client, bad name, bad option, an "@every" spec,
// WithCatchUp) when its input cannot work, so that a job that could never
// run is never returned (as regexp.MustCompile does).
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
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if err := checkName(name, false); err != nil {
		return nil, err
	}
	if cfg.catchUp > 0 {
		return nil, invalidf("job %q: WithCatchUp is for a Scheduler (a Singleton does not know when its cron starts)", name)
	}
	sched := cfg.schedule
	if cfg.hasSpec {
		s, err := parseSingletonSpec(cfg.spec, cfg.loc)
		if err != nil {
			return nil, fmt.Errorf("%w (job %q)", err, name)
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
		r, err := newRunner(locks, n.next(), sched, job, cfg, background)
		if err != nil {
			panic(err)
		}
		r.clock = clock
		return r
	}, nil
}

// namer names the jobs of one wrapper.
type namer struct {
	name   string
	logger *slog.Logger

	mu    sync.Mutex
	plain int // jobs wrapped
}

// next returns the name of the next job wrapped.
func (n *namer) next() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.plain++
	if n.plain == 1 {
		return n.name
	}
	name := n.name + "#" + strconv.Itoa(n.plain)
	n.logger.Info("cron job: one Singleton wraps several jobs; this one is named by its order (give each job its own Singleton for a stable name)",
		"job", name)
	return name
}
