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
	if m.cfg.broker != nil && r.meta.queue != "" && errors.Is(cause, redlock.ErrLocked) {
		if lock, done, err := r.parkTask(ctx, cause); done {
			return lock, err
		}
	}
	if !r.meta.budgetSpent() {
		ev.Action = "requeue"
		r.observeWait(ev)
		r.log.Debug("task requeued: resource busy", "cause", cause)
		return nil, busy
	}
	return r.lastRetry(ctx, ev, busy)
}

// lastRetry handles a busy task on its last retry, which asynq archives on
// any error, when it was not parked: with a broker it is parked at the head
// of its resource's FIFO, in asynq's archive, from where a promotion or its
// backstop brings it back (reparkFirst); without, it waits for its lock as
// long as its deadline allows (and is archived if that ends first). ev is
// the conflict's event, busy its error.
func (r *taskRun) lastRetry(ctx context.Context, ev Event, busy *conflictError) (*redlock.Lock, error) {
	m := r.m
	if m.cfg.broker != nil && r.meta.queue != "" {
		return nil, r.reparkFirst(ctx, busy.cause)
	}
	ev.Action = "wait-exhausted-budget"
	dropPlace(ctx)
	wctx, cancel := beforeDeadline(ctx)
	defer cancel()
	wctx, span := m.startWait(wctx, r.res)
	lock, err := m.client.Acquire(wctx, r.res, m.cfg.ttl, r.opts...)
	m.endWait(span, 1, err)
	ev.Err = errors.Join(ev.Err, err)
	r.observeWait(ev)
	if err != nil {
		r.log.Warn("busy task on its last retry could not get its lock before its deadline: asynq archives it (WithBroker parks it instead)", "err", err)
		return nil, fmt.Errorf("%s on its last retry: %w", r.name(), &conflictError{resource: r.res, cause: err})
	}
	return lock, nil
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
