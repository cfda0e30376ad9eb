package scheduler

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// defaultRetention is the bridge's least asynq retention of a task.
const defaultRetention = time.Minute

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
// Run outside them it fails with ErrInvalid.
func EnqueueJob(enq enqueuer, task *asynq.Task) cron.Job { return &taskJob{enq: enq, task: task} }

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

func (j *taskJob) Run() { _ = j.RunContext(context.Background()) }

// RunContext is a run outside Singleton and Scheduler: it has no tick.
func (j *taskJob) RunContext(context.Context) error {
	return invalidf("EnqueueJob must run under Singleton or a Scheduler: outside them a run has no tick")
}

// enqueue runs the bridge for a won tick, its task kept at least the tick
// window (asynq keeps whole seconds).
func (r *runner) enqueue(tj *taskJob, ev Event) {
	ev.TaskID = r.tickResource(ev.Tick)
	retention := max(defaultRetention, 2*r.cfg.skew+r.margin)
	retention = (retention + time.Second - 1).Truncate(time.Second)
	began := time.Now()
	_, err := tj.enq.EnqueueContext(r.withRun(r.host.running, ev), tj.task, asynq.TaskID(ev.TaskID), asynq.Retention(retention))
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
