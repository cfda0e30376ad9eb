package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// Enqueuer enqueues asynq tasks; *asynq.Client satisfies it.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// EnqueueJob returns a job that enqueues task on each tick, for use under
// Singleton (Scheduler.RegisterTask does the same for a Scheduler). It
// enqueues with asynq.TaskID(TaskID(name, tick)) and asynq.Retention of at
// least the tick window (see WithRetention), appended after the task's own
// options, so that a replica that tries the same tick again, even after the
// task completed, gets asynq.ErrTaskIDConflict; that is reported as
// OutcomeAlreadyEnqueued, not as an error. Bridge runs take the tick lock
// but not the running lock: an enqueue never overlaps anything. Give the
// job to Singleton itself (cron.NewChain(..., Singleton(...)).Then(job)),
// not inside another wrapper; run outside Singleton, it fails with ErrNoTick.
// Inside a job that Singleton or a Scheduler runs, RunContext(ctx) enqueues
// the task of that job's tick.
func EnqueueJob(enq Enqueuer, task *asynq.Task) cron.Job {
	return &taskJob{enq: enq, task: task}
}

type taskJob struct {
	enq  Enqueuer
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
	info, ok := FromContext(ctx)
	if !ok {
		return fmt.Errorf("%w: EnqueueJob must run under Singleton or a Scheduler", ErrNoTick)
	}
	if err := j.check(); err != nil {
		return err
	}
	_, err := j.enq.EnqueueContext(ctx, j.task, asynq.TaskID(TaskID(info.Job, info.Tick)), asynq.Retention(info.retention))
	return err
}

// enqueue runs the bridge for a won tick.
func (r *runner) enqueue(tj *taskJob, ev Event) {
	ev.TaskID = TaskID(r.name, ev.Tick)
	ctx := context.WithValue(r.host.running, infoKey{}, RunInfo{Job: r.name, Tick: ev.Tick, retention: r.retention})
	began := time.Now()
	err := r.call(ctx)
	ev.Duration = time.Since(began)
	var pe *PanicError
	switch {
	case err == nil:
		ev.Outcome = OutcomeEnqueued
	case errors.Is(err, asynq.ErrTaskIDConflict):
		ev.Outcome = OutcomeAlreadyEnqueued
	case errors.As(err, &pe):
		ev.Outcome, ev.Err = OutcomePanicked, err
	default:
		ev.Outcome, ev.Err = OutcomeFailed, err
	}
	r.report(ev)
}
