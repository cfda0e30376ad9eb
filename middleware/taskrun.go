package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// taskRun is one task's way through the middleware, made once by process
// when the task has a key: what every step needs to know about the task
// (the task and its handler, asynq's metadata, its resource, when it began
// to ask for its lock, its log) and, from acquisition to release, its lock.
// The steps (conflict, park, run, rollback, clean-up) are its
// methods, so that each signature names only what that step adds (the
// conflict's cause); what every task of the process shares
// (the table of resources, the broker's state) stays in mw. A taskRun
// belongs to the task's goroutine: it is never shared.
type taskRun struct {
	m     *mw
	t     *asynq.Task
	next  asynq.Handler
	meta  taskMeta
	res   string    // the task's lock resource
	start time.Time // when it began to ask for its lock
	log   taskLog
	lock  *redlock.Lock        // held from acquisition to release; a rollback may take it anew
	held  *resState            // the resource's entry while countHolder counts this task
	opts  []redlock.LockOption // its acquisitions' options (lockOptsFor)
}

// newRun starts the run of task t, with metadata meta, on resource res. It
// returns a value, which the caller keeps on its stack: a run allocates
// nothing of its own.
func (m *mw) newRun(t *asynq.Task, next asynq.Handler, meta taskMeta, res string) taskRun {
	return taskRun{m: m, t: t, next: next, meta: meta, res: res, start: time.Now(), opts: m.lockOptsFor(t, meta),
		log: taskLog{l: m.cfg.logger, id: meta.id, typ: t.Type(), res: res}}
}

// name is how errors name the task: "task TYPE (id ID)".
func (r *taskRun) name() string {
	return fmt.Sprintf("task %s (id %s)", r.t.Type(), r.meta.id)
}

// acquireFailed returns the error that ends the run when an acquisition
// failed for another reason than a conflict (a busy resource, unreachable
// lock nodes): asynq ended the run (deadline, shutdown), or the lock client
// failed otherwise (closed, bad input). That is an ordinary failure,
// retried and counted as such, never a conflict. It returns nil for a
// conflict.
func (r *taskRun) acquireFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil || !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrQuorum) {
		return fmt.Errorf("%s: acquiring %s: %w", r.name(), r.res, err)
	}
	return nil
}

// event returns an event of kind about this task.
func (r *taskRun) event(kind EventKind, err error) Event {
	return Event{Kind: kind, TaskType: r.t.Type(), TaskID: r.meta.id, Resource: r.res, Err: err}
}

// lockEvent returns an event about getting the lock (acquired, or a
// conflict with its action), which also names the policy; observeWait
// sends it with its wait.
func (r *taskRun) lockEvent(kind EventKind, action string, err error) Event {
	ev := r.event(kind, err)
	ev.Policy, ev.Action = r.m.cfg.policy.name(), action
	return ev
}

// observeWait sends ev with the time since the run began to ask for its
// lock: how long acquiring took, or until the conflict was decided.
func (r *taskRun) observeWait(ev Event) {
	ev.Wait = time.Since(r.start)
	r.m.observe(ev)
}
