package gocronlock

import (
	"context"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
)

// locker is the gocron.Locker New returns: its locks are keyed by job and
// tick.
type locker struct {
	start func(ctx context.Context, name string) (context.Context, func(error) error, error) // scheduler.NewJobs
}

var _ gocron.Locker = (*locker)(nil)

// New returns a gocron.Locker over locks for the jobs named in jobs, each
// with its gocron schedule as a spec: "@every 1m" for
// gocron.DurationJob(time.Minute), the cron spec of a gocron.CronJob (5
// fields, or 6 with seconds first; a gocron DailyJob, WeeklyJob or MonthlyJob
// as the equivalent cron spec). Give it to gocron.WithDistributedLocker or a
// job's gocron.WithDistributedJobLocker, and name each job (gocron.WithName)
// as jobs does. gocron passes Lock only the job's name; the locker tells the
// run's tick from the job's schedule and its clock, and lets each tick run
// at most once across replicas:
//
//   - the run's tick is won under "gocron:<job>:<tick in Unix ms>" and never
//     released: its record outlives the end of the tick's window (an
//     interval job's: its interval) by twice the skew, so that a replica
//     whose timer fires later within the skew finds it (a lock keyed by the
//     name alone lets every replica run the same interval in turn: gocron
//     issue #841);
//   - the winner then takes "gocron:<job>:running", kept alive while the job
//     runs and released when gocron unlocks it: a run still under way, here
//     or elsewhere, makes the tick skip everywhere.
//
// The options are the scheduler package's: WithSkew, WithTTL (the running
// lock's), WithLocation (the gocron scheduler's, default time.Local as
// gocron's), WithLogger, WithObserver (every Lock and run as a
// scheduler.Event) and WithTracerProvider; ticks are told by the real
// clock (a gocron.WithClock fake clock is not followed). A Lock
// that does not go ahead returns an error gocron passes to the job's
// AfterLockError listener: another replica's tick or run matches
// redlock.ErrLocked. Configuration that cannot work is refused with
// scheduler.ErrInvalid.
func New(locks *redlock.Client, jobs map[string]string, opts ...scheduler.Option) (gocron.Locker, error) {
	opts = append([]scheduler.Option{scheduler.WithLocation(time.Local)}, opts...)
	start, err := scheduler.NewJobs(locks, "gocron:", jobs, opts...)
	if err != nil {
		return nil, err
	}
	return &locker{start: start}, nil
}

// Lock wins the tick to which a run of job key starting now belongs, then
// the job's running lock, kept alive until the returned lock's Unlock.
// gocron gives its job no context of the run, so a loss cannot stop the
// job: the run is reported failed with redlock.ErrLockLost when it happens,
// and Unlock returns it.
func (l *locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	rctx, end, err := l.start(ctx, key)
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

// runLock is the gocron.Lock of a run.
type runLock struct {
	end  func(error) error
	once sync.Once
	done chan struct{}
}

// Unlock releases the running lock (with a context of its own: gocron's
// may be cancelled at shutdown) and reports the run. The tick's record
// stays until it expires. It returns an error matching redlock.ErrLockLost
// if the lock was lost while the job ran; gocron discards it.
func (r *runLock) Unlock(context.Context) error {
	r.once.Do(func() { close(r.done) })
	return r.end(nil)
}
