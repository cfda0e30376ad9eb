package middleware

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// conflict applies the policy to a task whose resource is busy (or whose
// lock nodes are unreachable): cause is why the lock was not had. It
// returns a lock only when it ended up waiting for, and getting, the lock.
func (r *taskRun) conflict(ctx context.Context, cause error) (*redlock.Lock, error) {
	m := r.m
	ev := r.lockEvent(EventConflict, "", cause)
	busy := &conflictError{resource: r.res, cause: cause}
	if errors.Is(cause, redlock.ErrLocked) {
		busy.delay = m.delay(r.res)
	}
	action := m.cfg.policy.action
	if errors.Is(cause, redlock.ErrQuorum) && !errors.Is(cause, redlock.ErrLocked) {
		// The lock nodes are unreachable and nobody is known to hold the
		// resource: skipping or failing would drop the task for an outage.
		// Whatever the policy, it is requeued.
		action = actRequeue
	}
	if action == actSkip || action == actFail {
		return nil, r.skipOrFail(action, ev, busy)
	}
	copyID := ""
	if m.cfg.broker != nil && r.meta.queue != "" && errors.Is(cause, redlock.ErrLocked) {
		lock, id, done, err := r.parkTask(ctx, cause)
		if done {
			return lock, err
		}
		copyID = id
	}
	if !r.meta.budgetSpent() {
		ev.Action = "requeue"
		r.observeWait(ev)
		r.log.Debug("task requeued: resource busy", "cause", cause)
		return nil, busy
	}
	return r.lastRetry(ctx, copyID, ev, busy)
}

// lastRetry handles a busy task on its last retry, where asynq archives on
// any error and a conflict must not: it resubmits a copy under copyID
// (picked here when empty: parkCopy passes the ID its failed resubmission
// used, which a late copy may still take) and revokes this run, or,
// without an enqueuer or when the copy's ID is claimed (resubmitOrClaim),
// waits for the lock as long as the task may run. ev is the conflict's
// event, busy its error.
func (r *taskRun) lastRetry(ctx context.Context, copyID string, ev Event, busy *conflictError) (*redlock.Lock, error) {
	m := r.m
	if m.cfg.enqueuer != nil {
		ev.Action = "resubmit"
		if copyID == "" {
			copyID = r.copyID()
		}
		if done, err := r.resubmitOrClaim(ctx, copyID, &ev, busy); done {
			return nil, err
		}
	}
	// No enqueuer, or no copy exists nor can be stored: wait for the lock
	// as long as the task may run.
	ev.Action = "wait-exhausted-budget"
	dropPlace(ctx)
	wctx, span := m.startWait(ctx, r.res)
	lock, err := m.client.Acquire(wctx, r.res, m.cfg.ttl, r.opts...)
	m.endWait(span, 1, err)
	ev.Err = errors.Join(ev.Err, err)
	r.observeWait(ev)
	if err != nil {
		r.log.Error("busy task on its last retry could not get its lock before its deadline", "err", err)
		return nil, fmt.Errorf("%s on its last retry: %w", r.name(), &conflictError{resource: r.res, cause: err})
	}
	return lock, nil
}

// resubmitOrClaim resubmits the task under id and revokes this run; when
// the resubmission fails, it claims id with a marker (claimCopyID) so that
// this run may do the work itself, with no copy that could do it again.
// done is true when this run ends with err: revoked because a copy carries
// the task, or failed because the broker could not tell whether one does
// (running then could apply the task twice, while an archived task stays
// visible and can be run again). Resubmissions that fail are logged once
// per change of state (warnResubmit), each task's outcome at Debug; the
// observer sees every one.
func (r *taskRun) resubmitOrClaim(ctx context.Context, id string, ev *Event, busy *conflictError) (done bool, err error) {
	rerr := r.resubmit(ctx, id, busy)
	if !errors.Is(rerr, errClaimed) { // a marker's refusal tells nothing of the broker
		r.m.warnResubmit(r.res, rerr)
	}
	if rerr == nil {
		ev.Err = busy.cause
	} else {
		ev.Err = errors.Join(busy.cause, rerr)
		stored, cerr := r.claimCopyID(ctx, id)
		if cerr != nil {
			r.observeWait(*ev)
			r.log.Debug("could not resubmit a busy task on its last retry nor tell whether its copy was stored; asynq archives it", "err", errors.Join(rerr, cerr))
			return true, fmt.Errorf("%s: resubmitting after %w: %w", r.name(), busy, errors.Join(rerr, cerr))
		}
		if !stored {
			if errors.Is(rerr, errClaimed) {
				r.log.Debug("busy task's copy ID claimed by an earlier delivery; waiting for its lock instead", "copy_id", id)
			} else {
				r.log.Debug("could not resubmit a busy task on its last retry; waiting for its lock instead", "err", rerr, "copy_id", id)
			}
			return false, nil
		}
		r.log.Debug("a resubmission that failed stored its copy all the same", "copy_id", id, "err", rerr)
	}
	r.observeWait(*ev)
	r.log.Debug("busy task resubmitted on its last retry")
	return true, fmt.Errorf("%s resubmitted: %w: %w", r.name(), busy, asynq.RevokeTask)
}

// skipOrFail applies the Skip or Fail policy to a busy task; ev is the
// conflict's event, busy its error.
func (r *taskRun) skipOrFail(action action, ev Event, busy *conflictError) error {
	if action == actSkip {
		ev.Action = "skip"
		r.observeWait(ev)
		r.log.Debug("task skipped: resource busy", "cause", busy.cause)
		return nil
	}
	ev.Action = "fail"
	r.observeWait(ev)
	r.log.Warn("task archived: resource busy", "cause", busy.cause)
	return fmt.Errorf("%s: %w: %w", r.name(), busy, asynq.SkipRetry)
}
