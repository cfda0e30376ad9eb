package scheduler

import (
	"context"
	"time"

	"github.com/robfig/cron/v3"
)

// contextJob is a cron.Job that can take a context: Singleton and Scheduler
// call RunContext with the run's context, and its error is the run's
// outcome. A plain cron.Job gets neither.
type contextJob interface {
	cron.Job
	RunContext(ctx context.Context) error
}

// Func adapts a function to a cron.Job that Singleton runs with the run's
// context: cancelled with cause redlock.ErrLockLost if the job's running
// lock is lost (or "scheduler: stopped" when a Scheduler's Stop runs out
// of time), and carrying the run's tick (see FromContext). The function's error is
// the run's outcome. Run outside Singleton, it gets context.Background().
// Any cron.Job with a method RunContext(ctx context.Context) error is run
// the same way.
func Func(fn func(ctx context.Context) error) cron.Job { return funcJob(fn) }

// funcJob is the job Func returns.
type funcJob func(ctx context.Context) error

func (f funcJob) Run() { _ = f(context.Background()) }

func (f funcJob) RunContext(ctx context.Context) error { return f(ctx) }

// runInfo is what a job's context carries.
type runInfo struct {
	ev        Event         // Job, Tick, Replica, TaskID (bridge)
	retention time.Duration // bridge: asynq retention
}

type infoKey struct{}

// FromContext returns the run that a job's context belongs to, as the
// Event that will report it, without its outcome: Job, Tick, Replica, and
// for the bridge TaskID. It returns false outside a run started by
// Singleton or a Scheduler.
func FromContext(ctx context.Context) (Event, bool) {
	info, ok := ctx.Value(infoKey{}).(runInfo)
	return info.ev, ok
}

// withRun is ctx carrying the run of ev.
func (r *runner) withRun(ctx context.Context, ev Event) context.Context {
	ev.Job, ev.Replica = r.name, r.cfg.replica
	return context.WithValue(ctx, infoKey{}, runInfo{ev: ev, retention: r.retention})
}
