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
	copyID := ""
	if m.cfg.broker != nil && meta.queue != "" && errors.Is(cause, redlock.ErrLocked) {
		lock, id, done, err := m.parkTask(ctx, t, meta, res, cause, start, log)
		if done {
			return lock, err
		}
		copyID = id
	}
	if !meta.budgetSpent() {
		ev.Action, ev.Wait = "requeue", time.Since(start)
		m.observe(ev)
		log.Debug("task requeued: resource busy", "cause", cause)
		return nil, busy
	}
	return m.lastRetry(ctx, t, meta, res, copyID, ev, busy, start, log)
}

// lastRetry handles a busy task on its last retry, where asynq archives on
// any error and a conflict must not: it resubmits a copy under copyID
// (picked here when empty: parkCopy passes the ID its failed resubmission
// used, which a late copy may still take) and revokes this run, or,
// without an enqueuer or when the copy's ID is claimed (resubmitOrClaim),
// waits for the lock as long as the task may run.
func (m *mw) lastRetry(ctx context.Context, t *asynq.Task, meta taskMeta, res, copyID string, ev Event, busy *conflictError, start time.Time, log taskLog) (*redlock.Lock, error) {
	if m.cfg.enqueuer != nil {
		ev.Action = "resubmit"
		if copyID == "" {
			copyID = m.copyID(meta)
		}
		if done, err := m.resubmitOrClaim(ctx, t, meta, copyID, &ev, busy, start, log); done {
			return nil, err
		}
	}
	// No enqueuer, or no copy exists nor can be stored: wait for the lock
	// as long as the task may run.
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
	return lock, nil
}

// resubmitOrClaim resubmits the task under id and revokes this run; when
// the resubmission fails, it claims id with a marker (claimCopyID) so that
// this run may do the work itself, with no copy that could do it again.
// done is true when this run ends with err: revoked because a copy carries
// the task, or failed because the broker could not tell whether one does
// (running then could apply the task twice, while an archived task stays
// visible and can be run again).
func (m *mw) resubmitOrClaim(ctx context.Context, t *asynq.Task, meta taskMeta, id string, ev *Event, busy *conflictError, start time.Time, log taskLog) (done bool, err error) {
	rerr := m.resubmit(ctx, t, meta, id, busy, log)
	if rerr == nil {
		ev.Err = busy.cause
	} else {
		ev.Err = errors.Join(busy.cause, rerr)
		stored, cerr := m.claimCopyID(ctx, t, meta, id)
		if cerr != nil {
			ev.Wait = time.Since(start)
			m.observe(*ev)
			log.Error("could not resubmit a busy task on its last retry nor tell whether its copy was stored; asynq archives it", "err", errors.Join(rerr, cerr))
			return true, fmt.Errorf("task %s (id %s): resubmitting after %w: %w", t.Type(), meta.id, busy, errors.Join(rerr, cerr))
		}
		if !stored {
			if errors.Is(rerr, errClaimed) {
				log.Debug("busy task's copy ID claimed by an earlier delivery; waiting for its lock instead", "copy_id", id)
			} else {
				log.Error("could not resubmit a busy task on its last retry; waiting for its lock instead", "err", rerr, "copy_id", id)
			}
			return false, nil
		}
		log.Debug("a resubmission that failed stored its copy all the same", "copy_id", id, "err", rerr)
	}
	ev.Wait = time.Since(start)
	m.observe(*ev)
	log.Debug("busy task resubmitted on its last retry")
	return true, fmt.Errorf("task %s (id %s) resubmitted: %w: %w", t.Type(), meta.id, busy, asynq.RevokeTask)
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
