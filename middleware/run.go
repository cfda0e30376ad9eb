package middleware

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/statelog"
	"github.com/redis/go-redis/v9"
)

// run executes the handler under the task's lock and cleans up after it.
func (r *taskRun) run(ctx context.Context) error {
	m, lock := r.m, r.lock
	r.ran = time.Now()
	g := m.guard(ctx, lock)
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked: give its place back, roll back under the
		// lock, release it, then let asynq see the panic (a failed run).
		r.place.drop()
		p := recover()
		lost := g.end()
		traceLost(ctx, r.res, lost)
		_ = r.cleanUp(ctx, lost != nil, fmt.Errorf("handler panicked: %v", p))
		panic(p)
	}()
	herr := r.next.ProcessTask(g, r.t)
	r.place.drop() // before the lock's release round
	returned := time.Now()
	finished = true
	afterHandler(lock)
	lost := declaredBefore(g.end(), lock, m.cfg.ttl, returned)
	if lost != nil {
		r.log.Warn("lock lost while the task ran", "cause", lost)
		m.observe(r.event(kindLost, lost))
		traceLost(ctx, r.res, lost)
	}
	cause := cmp.Or(herr, lost)
	if cause == nil {
		r.recordCompletion()
	}
	herr = errors.Join(herr, r.cleanUp(ctx, lost != nil, cause))
	if lost != nil && !errors.Is(herr, redlock.ErrLockLost) {
		// The work was not protected to its end: retry it.
		herr = errors.Join(herr, fmt.Errorf("%s: %w", r.name(), lost))
	}
	return herr
}

// guard keeps lock alive for the handler: from keepAfter on, or at once
// following Progress (WithProgress).
func (m *mw) guard(ctx context.Context, lock *redlock.Lock) *guard {
	hctx, cancel := context.WithCancelCause(ctx)
	g := &guard{Context: hctx, cancel: cancel, info: lockInfoOf(lock), lock: lock}
	if m.cfg.progress <= 0 {
		g.keepAliveAfter(m.keepAfter)
	} else {
		m.holdOnProgress(g)
	}
	return g
}

// afterHandler is a test seam: a loss between the handler's return and its guard's end.
var afterHandler = func(*redlock.Lock) {}

// declaredBefore keeps a loss only if it may have been declared before the
// handler returned: the watchdog's own losses come LossGuard(ttl) before
// Until, any other counts whenever it came (docs/guide/MIDDLEWARE.md, step 4).
func declaredBefore(lost error, lock *redlock.Lock, ttl time.Duration, returned time.Time) error {
	if lost != redlock.ErrLockLost { // the watchdog's own value, not wrapped
		return lost
	}
	if returned.Before(lock.Until().Add(-lockutil.LossGuard(ttl))) {
		return nil
	}
	return lost
}

// notKept returns why the hold's context ended when the lock was not kept to
// the handler's end; a keep-alive that could not run (client closed) is a loss.
func notKept(hold context.Context) error {
	cause := context.Cause(hold)
	switch {
	case cause == nil, errors.Is(cause, redlock.ErrLockLost):
		return cause
	case errors.Is(cause, context.Canceled):
		return nil
	}
	return fmt.Errorf("%w: the lock could not be kept alive: %w", redlock.ErrLockLost, cause)
}

// cleanUp runs the rollback hook, if any, on a failure (cause), then
// releases the lock; it returns the hook's error.
func (r *taskRun) cleanUp(ctx context.Context, lost bool, cause error) error {
	var err error
	if r.m.cfg.rollback != nil && cause != nil {
		err = r.rollback(ctx, lost, cause)
	}
	r.release(ctx)
	return err
}

// rollback runs the hook while the task's lock is held. A lost lock is
// re-acquired first; if that fails the hook does not run, r.lock is nil, and
// the error matches redlock.ErrLockLost, so that the task is retried.
func (r *taskRun) rollback(ctx context.Context, lost bool, cause error) error {
	m := r.m
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.rollbackTimeout)
	defer cancel()
	if lost {
		_ = lockutil.Release(ctx, r.lock) // what may remain of it
		var err error
		r.lock, err = m.client.Acquire(rctx, r.res, m.cfg.ttl, m.cfg.lockOpts...)
		if err != nil {
			r.lock = nil
			err = fmt.Errorf("%s: rollback not run: lock %s lost and not re-acquired: %w: %w",
				r.name(), r.res, redlock.ErrLockLost, err)
			r.log.Error("rollback not run", "err", err)
			m.observe(r.event(kindRollback, err))
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
	m.observe(r.event(kindRollback, err))
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

// release gives the task's lock up, if any, without waiting for the nodes'
// answers; the resource's end is noted once they came (MIDDLEWARE.md, step 5).
func (r *taskRun) release(ctx context.Context) {
	lock, held := r.lock, r.held
	r.lock, r.held = nil, nil
	m, log, res, queue, ran := r.m, r.log, r.res, r.meta.queue, r.ran
	released := func() {
		if held != nil {
			m.ended(res, held, queue, ran)
		}
	}
	if lock == nil { // a rollback lost it and could not take it anew
		released()
		return
	}
	rctx, cancel := lockutil.Detached(ctx)
	lockutil.ReleaseAsync(rctx, lock, func(err error) {
		cancel()
		m.releaseState(log, err)
		released()
	})
}

// releaseState logs a release's outcome: a lock found lost at Warn; failing
// releases once per change of state, as down nodes fail every release alike.
func (m *mw) releaseState(log taskLog, err error) {
	switch {
	case errors.Is(err, redlock.ErrLockLost):
		log.Warn("lock found lost at release: exclusivity was not guaranteed to the end", "err", err)
	case errors.Is(err, redis.ErrClosed) || errors.Is(err, redlock.ErrNotHeld):
		log.Debug("lock not released", "err", err)
	case err != nil:
		m.releaseErr.Fail(m.cfg.logger, slog.LevelWarn,
			"lock releases failing; each lock expires at its TTL", err, "resource", log.res,
			"nodes", failedNodes(nil, err))
	case m.releaseErr.Failing() != "": // not per task: the arguments cost two allocations
		m.releaseErr.OK(m.cfg.logger, "lock releases work again", "resource", log.res)
	}
}

// failedNodes appends to addrs the addresses of err's *redlock.NodeError values, each once.
func failedNodes(addrs []string, err error) []string {
	switch e := err.(type) {
	case *redlock.NodeError:
		if !slices.Contains(addrs, e.Addr) {
			addrs = append(addrs, e.Addr)
		}
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			addrs = failedNodes(addrs, x)
		}
	case interface{ Unwrap() error }:
		addrs = failedNodes(addrs, e.Unwrap())
	}
	return addrs
}

// recoverySettle is the failing states' statelog.Settle; tests that count lines set 0.
var recoverySettle = statelog.Settle
