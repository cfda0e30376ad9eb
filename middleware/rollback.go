package middleware

import (
	"context"
	"fmt"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
)

// rollback runs the hook while the task's lock is held; lost tells that
// the lock was lost, cause is the handler's error or the loss. A lost lock
// is re-acquired first (bounded by the rollback timeout); if that fails the
// rollback does not run, r.lock is nil, and the returned error matches
// redlock.ErrLockLost, so that the task is retried. r.lock is then the lock
// to release (nil if none).
func (r *taskRun) rollback(ctx context.Context, lost bool, cause error) error {
	m := r.m
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.rollbackTimeout)
	defer cancel()
	if lost {
		// Clean what may remain of the lost lock (its loss is already known).
		_ = lockutil.Release(ctx, r.lock)
		var err error
		r.lock, err = m.client.Acquire(rctx, r.res, m.cfg.ttl, m.cfg.lockOpts...)
		if err != nil {
			r.lock = nil
			err = fmt.Errorf("%s: rollback not run: lock %s lost and not re-acquired: %w: %w", r.name(), r.res, redlock.ErrLockLost, err)
			r.log.Error("rollback not run", "err", err)
			m.observe(r.event(EventRollback, err))
			return err
		}
	}
	kctx, stop := r.lock.KeepAlive(rctx)
	kctx = context.WithValue(kctx, infoKey{}, lockInfoOf(r.lock)) // for LockFromContext
	err := r.callRollback(kctx, cause)
	stop()
	traceRollback(ctx, r.res, lost, cause, err)
	if err != nil {
		err = fmt.Errorf("%s: rollback: %w", r.name(), err)
		r.log.Error("rollback failed", "err", err)
	} else {
		r.log.Debug("rolled back", "cause", cause)
	}
	m.observe(r.event(EventRollback, err))
	return err
}

// callRollback runs the hook, turning a panic into an error.
func (r *taskRun) callRollback(ctx context.Context, cause error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("rollback panicked: %v", p)
		}
	}()
	return r.m.cfg.rollback(ctx, r.t, cause)
}
