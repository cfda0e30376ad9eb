package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// enqueuer is what EnqueueJob needs of an *asynq.Client.
type enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// EnqueueJob returns a job that enqueues task with enq (an *asynq.Client)
// on each tick exactly once across replicas, under Singleton or a
// Scheduler: with asynq.TaskID("cron:<job>:<tick in Unix ms>") and an
// asynq.Retention of at least a minute, so that a second try of the tick
// gets asynq.ErrTaskIDConflict (OutcomeSkippedOtherReplica). It takes the
// tick lock only; with the lock nodes down it relies on the task ID alone.
// Run outside them it fails with redlock.ErrInvalid.
func EnqueueJob(enq enqueuer, task *asynq.Task) cron.Job { return &taskJob{enq: enq, task: task} }

type taskJob struct {
	enq  enqueuer
	task *asynq.Task
}

func (j *taskJob) Run() { _ = j.RunContext(context.Background()) }

// RunContext is a run outside Singleton and Scheduler: it has no tick.
func (j *taskJob) RunContext(context.Context) error {
	return invalidf("EnqueueJob must run under Singleton or a Scheduler: outside them a run has no tick")
}

// enqueue runs the bridge for a won tick, its task kept a minute, or the
// tick window if longer (asynq keeps whole seconds).
func (r *runner) enqueue(tj *taskJob, ev Event) {
	ev.TaskID = r.tickResource(ev.Tick)
	retention := (max(time.Minute, 2*r.cfg.skew+r.margin) + time.Second - 1).Truncate(time.Second)
	began := time.Now()
	err := call(r.withRun(r.host.running, ev), funcJob(func(ctx context.Context) error {
		_, err := tj.enq.EnqueueContext(ctx, tj.task, asynq.TaskID(ev.TaskID), asynq.Retention(retention))
		return err
	}))
	ev.Duration = time.Since(began)
	switch {
	case err == nil:
		ev.Outcome = OutcomeRan
	case errors.Is(err, asynq.ErrTaskIDConflict):
		ev.Outcome = OutcomeSkippedOtherReplica
	default:
		ev.Outcome, ev.Err = OutcomeFailed, err
	}
	r.report(ev)
}
