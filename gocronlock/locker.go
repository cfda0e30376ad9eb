// Package gocronlock is a go-co-op/gocron v2 Locker over Redlock quorum
// locks under which each tick of a job runs at most once across the
// replicas of a service, even for a job of a millisecond, schedulers
// started at different moments, and clocks offset from the lock nodes' by
// up to the skew (scheduler.WithSkew, default 1s).
//
// gocron passes its Locker only the job's name, and a lock keyed by the
// name alone lets every replica run the same interval in turn (gocron issue
// #841). This locker keys each run by the job and its tick, told from the
// job's schedule, given to [New] under the job's gocron name:
//
//	locker, err := gocronlock.New(locks, map[string]string{
//		"sync":   "@every 1m",  // gocron.DurationJob(time.Minute)
//		"report": "0 3 * * *", // gocron.CronJob("0 3 * * *", false)
//	})
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(sync), gocron.WithName("sync"))
//
// It is the scheduler package's cron core (scheduler.NewJobs) behind
// gocron's Locker. gocron's singleton and limit modes work beside it, each
// local to its scheduler: gocron calls Lock once the mode lets a run go
// ahead there. docs/guide/CRON.md, section "gocron v2", tells the rest.
package gocronlock

import (
	"context"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
)

// New returns a gocron.Locker over locks for the jobs named in jobs, each
// with its gocron schedule as a spec: "@every 1m" for
// gocron.DurationJob(time.Minute), or the cron spec of a gocron.CronJob (of
// a DailyJob, WeeklyJob, MonthlyJob: the equivalent one). A run's tick is
// won under "gocron:<job>:<tick in Unix ms>", its record kept past the tick's
// window (an interval job's: its interval) by twice the skew; the winner
// then holds "gocron:<job>:running" until Unlock, so a run under way skips
// the tick everywhere. A Lock that does not go ahead fails (gocron's
// AfterLockError) with redlock.ErrLocked when another replica has the tick
// or the run. The options are scheduler's (WithLocation: the gocron
// scheduler's, default time.Local); ticks follow the real clock, not a
// gocron.WithClock fake. A configuration that cannot work fails with
// redlock.ErrInvalid.
func New(locks *redlock.Client, jobs map[string]string, opts ...scheduler.Option) (gocron.Locker, error) {
	opts = append([]scheduler.Option{scheduler.WithLocation(time.Local)}, opts...)
	start, err := scheduler.NewJobs(locks, "gocron:", jobs, opts...)
	if err != nil {
		return nil, err
	}
	return locker(start), nil
}

// locker is the start function of scheduler.NewJobs as a gocron.Locker.
type locker func(ctx context.Context, name string) (context.Context, func(error) error, error)

// Lock wins the tick of a run of job key starting now, then the job's
// running lock, kept alive until Unlock. gocron gives its job no context,
// so a loss cannot stop the job: the run is reported failed with
// redlock.ErrLockLost when it happens, and Unlock returns it.
func (l locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	rctx, end, err := l(ctx, key)
	if err != nil {
		return nil, err
	}
	r := &runLock{end: end, done: make(chan struct{})}
	go func() {
		select {
		case <-rctx.Done():
			_ = end(context.Cause(rctx)) // lost, or ended by Unlock
		case <-r.done:
		}
	}()
	return r, nil
}

type runLock struct {
	end  func(error) error
	once sync.Once
	done chan struct{}
}

// Unlock releases the running lock (not with gocron's context, which may be
// cancelled at shutdown) and reports the run; the tick's record stays until
// it expires. It returns an error matching redlock.ErrLockLost if the lock
// was lost while the job ran; gocron discards it.
func (r *runLock) Unlock(context.Context) error {
	r.once.Do(func() { close(r.done) })
	return r.end(nil)
}
