package scheduler

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// enqueuer enqueues asynq tasks: an *asynq.Client, or anything with its
// EnqueueContext method.
type enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// EnqueueJob returns a job that enqueues task with enq (an *asynq.Client)
// on each tick exactly once across replicas, under Singleton
// (Scheduler.RegisterTask for a Scheduler): with asynq.TaskID("cron:<job>:<tick in Unix ms>") and an
// asynq.Retention of at least a minute, so that a second try of the tick
// gets asynq.ErrTaskIDConflict (OutcomeSkippedOtherReplica). It takes the
// tick lock, not the running lock; with the lock nodes down it relies on
// the task ID alone. Give it to Singleton itself; outside it fails with
// ErrInvalid.
func EnqueueJob(enq enqueuer, task *asynq.Task) cron.Job {
	return &taskJob{enq: enq, task: task}
}

type taskJob struct {
	enq  enqueuer
	task *asynq.Task
}

func (j *taskJob) check() error {
	switch {
	case j.enq == nil:
		return invalidf("nil enqueuer")
	case j.task == nil:
		return invalidf("nil task")
	case strings.TrimSpace(j.task.Type()) == "":
		return invalidf("task with an empty type")
	}
	return nil
}

// Run enqueues outside Singleton: it fails, there is no tick.
func (j *taskJob) Run() { _ = j.RunContext(context.Background()) }

// RunContext enqueues the task of the run's tick.
func (j *taskJob) RunContext(ctx context.Context) error {
	info, ok := ctx.Value(infoKey{}).(runInfo)
	if !ok {
		return invalidf("EnqueueJob must run under Singleton or a Scheduler: outside them a run has no tick")
	}
	if err := j.check(); err != nil {
		return err
	}
	_, err := j.enq.EnqueueContext(ctx, j.task, asynq.TaskID(taskID(info.ev.Job, info.ev.Tick)), asynq.Retention(info.retention))
	return err
}

// enqueue runs the bridge for a won tick.
func (r *runner) enqueue(tj *taskJob, ev Event) {
	ev.TaskID = taskID(r.name, ev.Tick)
	ctx := r.withRun(r.host.running, ev)
	began := time.Now()
	err := r.call(ctx)
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
