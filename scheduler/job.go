package scheduler

import (
	"context"
	"time"

	"github.com/robfig/cron/v3"
)

// ContextJob is a cron.Job that can take a context. Singleton and Scheduler
// call RunContext with the run's context: cancelled with cause
// redlock.ErrLockLost if the job's running lock is lost, or ErrStopped when
// a Scheduler's Stop runs out of time, and carrying the RunInfo. Its error
// is reported as the run's outcome. A plain cron.Job gets neither.
type ContextJob interface {
	cron.Job
	RunContext(ctx context.Context) error
}

// Func adapts a function to a ContextJob.
type Func func(ctx context.Context) error

// Run calls f with context.Background(), for use outside Singleton.
func (f Func) Run() { _ = f(context.Background()) }

// RunContext calls f(ctx).
func (f Func) RunContext(ctx context.Context) error { return f(ctx) }

// Named gives a job a stable name under a Singleton wrapper that wraps
// several jobs (cron.WithChain): the run's name becomes the wrapper's name,
// "/", and this name, whatever order the jobs are added in. schedule may be
// nil; if given, it is the schedule the cron runs the job on, with the
// effect of WithSchedule for this job:
//
//	c.AddJob("@hourly", scheduler.Named("report", nil, job))
//
// Singleton must then be the last wrapper of the chain, so that it receives
// the Named job itself.
func Named(name string, schedule cron.Schedule, job cron.Job) cron.Job {
	return &namedJob{name: name, schedule: schedule, job: job}
}

type namedJob struct {
	name     string
	schedule cron.Schedule
	job      cron.Job
}

// Run runs the job without a lock.
func (n *namedJob) Run() {
	if n.job != nil {
		n.job.Run()
	}
}

// RunInfo describes the run a job's context belongs to.
type RunInfo struct {
	Job  string    // the job's name
	Tick time.Time // the activation the run belongs to

	retention time.Duration // bridge: asynq retention
}

type infoKey struct{}

// FromContext returns the RunInfo of a job's context, and false outside a
// run started by Singleton or a Scheduler.
func FromContext(ctx context.Context) (RunInfo, bool) {
	info, ok := ctx.Value(infoKey{}).(RunInfo)
	return info, ok
}
