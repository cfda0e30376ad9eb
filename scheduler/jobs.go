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
	"github.com/robfig/cron/v3"
)

type jobs struct {
	cfg  config
	jobs map[string]*runner

	mu      sync.Mutex
	unknown map[string]*statelog.State // names Start was given but not NewJobs
}

// NewJobs is the cron core for a cron library that starts runs on its own
// timers (package gocronlock): each tick of the jobs specs names runs at
// most once across replicas. A spec is read as Register reads it, but
// "@every d" is an interval job whose runs each replica starts every d from
// its own start (gocron's DurationJob): a run belongs to the interval since
// the Unix epoch it starts in. Keys are "<prefix><name>:<tick in Unix ms>"
// and "<prefix><name>:running". The options are Singleton's but WithSpec.
//
// A run of job name calls start as it begins: start wins the tick, then the
// running lock, kept alive until end (the context is cancelled with cause
// redlock.ErrLockLost on loss); end releases it and reports the run with
// the job's error (first call counts). A run that does not go ahead is
// reported and start says why: redlock.ErrLocked when another replica has
// the tick or the previous run still runs, redlock.ErrInvalid for a name
// not given (it runs nowhere, logged once). start is safe for concurrent use.
func NewJobs(client *redlock.Client, prefix string, specs map[string]string, opts ...Option) (
	start func(ctx context.Context, name string) (context.Context, func(error) error, error), err error) {
	locks, err := lockerFor(client)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	if err := cfg.apply(opts, "NewJobs"); err != nil {
		return nil, err
	}
	cfg.anyName = true
	switch {
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

func newJob(locks locker, name, spec string, cfg config) (*runner, error) {
	if d, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < time.Millisecond || every%time.Millisecond != 0 {
			return nil, invalidf("job %q: spec %q: give an interval of a whole number of milliseconds, at least 1ms", name, spec)
		}
		r, err := newRunner(locks, name, Every(every), noJob, cfg, background)
		if err == nil {
			r.every = every
		}
		return r, err
	}
	sched, err := parse(spec, cfg.loc, false)
	if err != nil {
		return nil, fmt.Errorf("%w (job %q)", err, name)
	}
	return newRunner(locks, name, sched, noJob, cfg, background)
}

// noJob stands for the job another cron runs.
var noJob = cron.FuncJob(func() {})

func (j *jobs) start(ctx context.Context, name string) (context.Context, func(error) error, error) {
	start := time.Now()
	r, ok := j.jobs[name]
	if !ok {
		return nil, nil, j.unknownJob(name)
	}
	now := r.cfg.now().In(r.cfg.loc)
	r.checkPace(now)
	ev, ok := r.tickOf(now)
	if !ok {
		r.report(ev)
	} else if x := r.begin(ctx, &ev, start, false); x != nil {
		return x.ctx, x.end, nil
	}
	return nil, nil, ev.Err
}

// unknownJob reports a run of a job NewJobs was not given: each of the
// first 100 names warned of once.
func (j *jobs) unknownJob(name string) error {
	err := invalidf("job %q is not registered: its ticks cannot be told, so it runs nowhere rather than once per replica", name)
	j.mu.Lock()
	st := j.unknown[name]
	if st == nil && len(j.unknown) < 100 {
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

// checkPace warns, once per change, when an interval job starts under half
// its interval apart twice in a row: its cron runs it more often than
// registered, and most runs find their tick taken.
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
