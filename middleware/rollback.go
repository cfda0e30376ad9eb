package middleware

import (
	"context"
	"fmt"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// rollback runs the hook while the lock is held. If the lock was lost it is
// re-acquired first (bounded by the rollback timeout); if that fails the
// rollback does not run and the returned error matches redlock.ErrLockLost,
// so that the task is retried. It returns the lock to release (nil if none).
func (m *mw) rollback(ctx context.Context, t *asynq.Task, meta taskMeta, lock *redlock.Lock, lost bool, cause error, log taskLog) (*redlock.Lock, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.rollbackTimeout)
	defer cancel()
	res := lock.Resource()
	if lost {
		// Clean what may remain of the lost lock (its loss is already known).
		_ = lockutil.Release(ctx, lock)
		var err error
		lock, err = m.client.Acquire(rctx, res, m.cfg.ttl, m.cfg.lockOpts...)
		if err != nil {
			err = fmt.Errorf("task %s (id %s): rollback not run: lock %s lost and not re-acquired: %w: %w", t.Type(), meta.id, res, redlock.ErrLockLost, err)
			log.Error("rollback not run", "err", err)
			m.observe(Event{Kind: EventRollback, TaskType: t.Type(), TaskID: meta.id, Resource: res, Err: err})
			return nil, err
		}
	}
	kctx, stop := lock.KeepAlive(rctx)
	kctx = withLockInfo(kctx, lock)
	err := m.callRollback(kctx, t, cause)
	stop()
	traceRollback(ctx, res, lost, cause, err)
	if err != nil {
		err = fmt.Errorf("task %s (id %s): rollback: %w", t.Type(), meta.id, err)
		log.Error("rollback failed", "err", err)
	} else {
		log.Debug("rolled back", "cause", cause)
	}
	m.observe(Event{Kind: EventRollback, TaskType: t.Type(), TaskID: meta.id, Resource: res, Err: err})
	return lock, err
}

// callRollback runs the hook, turning a panic into an error.
func (m *mw) callRollback(ctx context.Context, t *asynq.Task, cause error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("rollback panicked: %v", p)
		}
	}()
	return m.cfg.rollback(ctx, t, cause)
}
