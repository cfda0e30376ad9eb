package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/statelog"
)

// jobs is the cron core of NewJobs.
type jobs struct {
	cfg  config
	jobs map[string]*runner

	mu      sync.Mutex
	unknown map[string]*statelog.State // names Start was given but not NewJobs
}

// NewJobs is the cron core for a cron library whose runs start on its own
// timers (package gocronlock, for gocron v2): each tick of the jobs specs
// names runs at most once across replicas, as with Singleton. A spec is a
// cron spec, read as a Scheduler reads it, or "@every d" for an interval
// job, whose runs each replica's cron starts every d from its own start
// (gocron's DurationJob): its ticks are the multiples of d (whole
// milliseconds) since the Unix epoch, a run belonging to the interval it
// starts in. A job's keys are "<prefix><name>:<tick in Unix ms>" and
// "<prefix><name>:running". The options are Singleton's but WithSpec; a
// configuration that cannot work fails with ErrInvalid.
//
// The cron library's run of job name calls start when it begins: start wins
// the run's tick, then the job's running lock, kept alive until end: the
// returned context is cancelled with cause redlock.ErrLockLost if the lock
// is lost. end releases it and reports the run with the job's error (a lost
// lock fails it); its first call counts, and each returns the run's error.
// A run that does not go ahead is reported and start returns why: an error
// matching redlock.ErrLocked when another replica has the tick or the
// previous run still runs, ErrInvalid for a name NewJobs was not given (it
// runs nowhere, logged once). A run whose ctx ends first is not reported.
// start is safe for concurrent use.
func NewJobs(client *redlock.Client, prefix string, specs map[string]string, opts ...Option) (
	start func(ctx context.Context, name string) (context.Context, func(error) error, error), err error) {
	locks, err := lockerFor(client)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	cfg.anyName = true
	switch {
	case cfg.hasSpec || cfg.catchUp > 0:
		return nil, invalidf("WithSpec and WithCatchUp are not for NewJobs: its jobs' specs are given to it, and their cron starts the runs")
	case prefix == "":
		return nil, invalidf("empty key prefix: keys would mix with other users of the lock nodes")
	case len(specs) == 0:
		return nil, invalidf("no job: give each job the cron runs, under its name there, with its spec")
	}
	j := &jobs{cfg: cfg, jobs: map[string]*runner{}, unknown: map[string]*statelog.State{}}
	for name, spec := range specs {
		r, err := newJob(locks, name, spec, cfg)
		if err != nil {
			return nil, err
		}
		r.prefix = prefix
		j.jobs[name] = r
	}
	return j.start, nil
}

// newJob makes the runner of one job of NewJobs.
func newJob(locks locker, name, spec string, cfg config) (*runner, error) {
	if d, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < time.Millisecond || every%time.Millisecond != 0 {
			return nil, invalidf("job %q: spec %q: give an interval of a whole number of milliseconds, at least 1ms", name, spec)
		}
		r, err := newRunner(locks, name, Every(every), Func(nil), cfg, background)
		if err == nil {
			r.every = every
		}
		return r, err
	}
	sched, err := parse(spec, cfg.loc)
	if err != nil {
		return nil, fmt.Errorf("%w (job %q)", err, name)
	}
	return newRunner(locks, name, sched, Func(nil), cfg, background)
}

// start is the function NewJobs returns.
func (j *jobs) start(ctx context.Context, name string) (context.Context, func(error) error, error) {
	start := time.Now()
	r, ok := j.jobs[name]
	if !ok {
		return nil, nil, j.unknownJob(name)
	}
	now := r.cfg.now().In(r.cfg.loc)
	r.checkPace(now)
	ev, ok := r.tickOf(now)
	if ok {
		x := r.begin(ctx, &ev, start, false)
		if x != nil {
			return x.ctx, x.end, nil
		}
	} else {
		r.report(ev)
	}
	return nil, nil, ev.Err
}

// maxUnknown bounds the unknown names remembered (each warned of once).
const maxUnknown = 100

// unknownJob reports a run of a job NewJobs was not given.
func (j *jobs) unknownJob(name string) error {
	err := invalidf("job %q is not registered: its ticks cannot be told, so it runs nowhere rather than once per replica", name)
	j.mu.Lock()
	st := j.unknown[name]
	if st == nil && len(j.unknown) < maxUnknown {
		st = &statelog.State{}
		j.unknown[name] = st
	}
	j.mu.Unlock()
	if st != nil {
		st.Fail(j.cfg.logger, slog.LevelWarn, "cron job not registered: it runs nowhere; register it under the name its cron gives it", err, "job", name)
	}
	if j.cfg.observer != nil {
		j.cfg.observer(Event{Job: name, Outcome: OutcomeFailed, Err: err, Replica: j.cfg.replica})
	}
	return err
}

// checkPace warns, once per change, when an interval job is started under
// half its interval apart twice in a row: its cron runs it more often than
// registered, and the runs between ticks find the tick taken, so the job
// runs less often than its cron says.
func (r *runner) checkPace(now time.Time) {
	if r.every == 0 {
		return
	}
	r.mu.Lock()
	gap, seen := now.Sub(r.prev), !r.prev.IsZero()
	r.prev = now
	if seen && gap >= 0 && gap < r.every/2 {
		r.short++
	} else {
		r.short = 0
	}
	short := r.short
	r.mu.Unlock()
	if short >= 2 {
		r.logs.pace.Fail(r.cfg.logger, slog.LevelWarn, "cron job started more often than its interval: register the job's own interval, "+
			"or most of its runs are skipped as taken", nil, "job", r.name, "interval", r.every, "gap", gap)
	} else if short == 0 {
		r.logs.pace.OK(r.cfg.logger, "cron job started at its interval again", "job", r.name, "interval", r.every)
	}
}
