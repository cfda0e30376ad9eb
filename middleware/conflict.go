package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// conflict applies the policy to a task whose resource is busy (or whose
// lock nodes are unreachable). It returns a lock only when it ended up
// waiting for, and getting, the lock.
func (m *mw) conflict(ctx context.Context, t *asynq.Task, meta taskMeta, res string, cause error, start time.Time, log taskLog) (*redlock.Lock, error) {
	ev := Event{Kind: EventConflict, TaskType: t.Type(), TaskID: meta.id, Resource: res, Policy: m.cfg.policy.name(), Err: cause}
	busy := &conflictError{resource: res, cause: cause}
	if errors.Is(cause, redlock.ErrLocked) {
		busy.delay = m.delay(res)
	}
	action := m.cfg.policy.action
	if errors.Is(cause, redlock.ErrQuorum) && !errors.Is(cause, redlock.ErrLocked) {
		// The lock nodes are unreachable and nobody is known to hold the
		// resource: skipping or failing would drop the task for an outage.
		// Whatever the policy, it is requeued.
		action = actRequeue
	}
	if action == actSkip || action == actFail {
		return nil, m.skipOrFail(t, meta, action, ev, busy, start, log)
	}
	if m.cfg.broker != nil && meta.queue != "" && errors.Is(cause, redlock.ErrLocked) {
		if lock, done, err := m.parkTask(ctx, t, meta, res, cause, start, log); done {
			return lock, err
		}
	}
	if !meta.budgetSpent() {
		ev.Action, ev.Wait = "requeue", time.Since(start)
		m.observe(ev)
		log.Debug("task requeued: resource busy", "cause", cause)
		return nil, busy
	}
	return m.lastRetry(ctx, t, meta, res, ev, busy, start, log)
}

// lastRetry handles a busy task on its last retry, where asynq archives on
// any error and a conflict must not: it resubmits a copy (and revokes this
// run), or, without an enqueuer or when the copy is known not to exist,
// waits for the lock as long as the task may run.
func (m *mw) lastRetry(ctx context.Context, t *asynq.Task, meta taskMeta, res string, ev Event, busy *conflictError, start time.Time, log taskLog) (*redlock.Lock, error) {
	cause := busy.cause
	dropCopy, copyID := false, ""
	if m.cfg.enqueuer != nil {
		ev.Action = "resubmit"
		copyID = m.copyID(meta)
		err := m.resubmit(ctx, t, meta, copyID, busy, log)
		if err == nil {
			ev.Wait, ev.Err = time.Since(start), cause
			m.observe(ev)
			log.Debug("busy task resubmitted on its last retry")
			return nil, fmt.Errorf("task %s (id %s) resubmitted: %w: %w", t.Type(), meta.id, busy, asynq.RevokeTask)
		}
		ev.Err = errors.Join(cause, err)
		if !m.copyAbsent(meta, copyID) {
			// The copy may have been stored all the same (a lost reply):
			// running this run as well could apply the task twice, while
			// an archived task stays visible and can be run again.
			ev.Wait = time.Since(start)
			m.observe(ev)
			log.Error("could not resubmit a busy task on its last retry nor tell whether its copy was stored; asynq archives it", "err", err)
			return nil, fmt.Errorf("task %s (id %s): resubmitting after %w: %w", t.Type(), meta.id, busy, err)
		}
		log.Error("could not resubmit a busy task on its last retry; waiting for its lock instead", "err", err)
		dropCopy = true
	}
	// No enqueuer, or the copy is known not to exist: wait for the lock as
	// long as the task may run.
	ev.Action = "wait-exhausted-budget"
	wctx, span := m.startWait(ctx, res)
	lock, err := m.client.Acquire(wctx, res, m.cfg.ttl, m.cfg.lockOpts...)
	m.endWait(span, 1, err)
	ev.Wait, ev.Err = time.Since(start), errors.Join(ev.Err, err)
	m.observe(ev)
	if err != nil {
		log.Error("busy task on its last retry could not get its lock before its deadline", "err", err)
		return nil, fmt.Errorf("task %s (id %s) on its last retry: %w", t.Type(), meta.id, &conflictError{resource: res, cause: err})
	}
	if dropCopy {
		copyRuns, err := m.dropLateCopy(meta, copyID, log)
		if copyRuns || err != nil {
			m.release(ctx, lock, log)
		}
		switch {
		case copyRuns:
			return nil, fmt.Errorf("task %s (id %s): its resubmitted copy runs instead: %w", t.Type(), meta.id, asynq.RevokeTask)
		case err != nil:
			return nil, fmt.Errorf("task %s (id %s): cannot tell whether a late resubmitted copy exists: %w", t.Type(), meta.id, err)
		}
	}
	return lock, nil
}

// skipOrFail applies the Skip or Fail policy to a busy task.
func (m *mw) skipOrFail(t *asynq.Task, meta taskMeta, action action, ev Event, busy *conflictError, start time.Time, log taskLog) error {
	ev.Wait = time.Since(start)
	if action == actSkip {
		ev.Action = "skip"
		m.observe(ev)
		log.Debug("task skipped: resource busy", "cause", busy.cause)
		return nil
	}
	ev.Action = "fail"
	m.observe(ev)
	log.Warn("task archived: resource busy", "cause", busy.cause)
	return fmt.Errorf("task %s (id %s): %w: %w", t.Type(), meta.id, busy, asynq.SkipRetry)
}
