package middleware

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
)

// run executes the handler under the task's lock and cleans up after it.
func (r *taskRun) run(ctx context.Context) error {
	m, lock := r.m, r.lock
	acquired := time.Now()
	g := m.guard(ctx, lock)
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked: give its place back, roll back under the
		// lock, release it, then let asynq see the panic (it turns it into a
		// failed run). The rollback's error is logged and observed by rollback.
		r.place.drop()
		p := recover()
		lost := g.end()
		traceLost(ctx, r.res, lost)
		_ = r.cleanUp(ctx, lost != nil, fmt.Errorf("handler panicked: %v", p), acquired)
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
		m.observe(r.event(EventLost, lost))
		traceLost(ctx, r.res, lost)
	}
	cause := cmp.Or(herr, lost)
	if cause == nil {
		r.recordCompletion()
	}
	herr = errors.Join(herr, r.cleanUp(ctx, lost != nil, cause, acquired))
	if lost != nil && !errors.Is(herr, redlock.ErrLockLost) {
		// The work was not protected to its end: retry it.
		herr = errors.Join(herr, fmt.Errorf("%s: %w", r.name(), lost))
	}
	return herr
}

// guard keeps lock alive for the handler, which may outlive the task's
// context: from keepAfter on, or in progress mode at once, following the
// handler's reports.
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

// afterHandler runs between a handler's return and the end of its guard; a
// test seam for the loss that comes in between.
var afterHandler = func(*redlock.Lock) {}

// declaredBefore keeps a loss only if it may have been declared before the
// handler returned: the watchdog's own losses come LossGuard(ttl) before
// Until, any other counts whenever it came (docs/guide/MIDDLEWARE.md, step 4).
func declaredBefore(lost error, lock *redlock.Lock, ttl time.Duration, returned time.Time) error {
	if lost != redlock.ErrLockLost && lost != redlock.ErrMaxHold { // the watchdog's own values, not wrapped
		return lost
	}
	if returned.Before(lock.Until().Add(-lockutil.LossGuard(ttl))) {
		return nil
	}
	return lost
}

// notKept returns why the hold's context ended when the lock was not kept
// to the handler's end, nil while it lives or after a plain stop. A
// keep-alive that could not run (client closed) is a loss: none will come.
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

// cleanUp runs the rollback hook, if any, when the run failed (cause; lost
// tells a loss), then releases the lock held since acquired, noting the hold
// time and the turn's end once it is released. It returns the hook's error.
func (r *taskRun) cleanUp(ctx context.Context, lost bool, cause error, acquired time.Time) error {
	var err error
	if r.m.cfg.rollback != nil && cause != nil {
		err = r.rollback(ctx, lost, cause)
	}
	m, queue, res := r.m, r.meta.queue, r.res
	r.release(ctx, func() {
		now := time.Now()
		m.ranFor(res, now.Sub(acquired), now)
		m.promoter(turnEnd, queue, res, "")
	})
	return err
}

// release gives the task's lock up, if it holds one, without waiting for
// the nodes' answers; until they came the resource counts as held here,
// then after runs, if not nil (docs/guide/MIDDLEWARE.md, step 5).
func (r *taskRun) release(ctx context.Context, after func()) {
	lock, held := r.lock, r.held
	r.lock, r.held = nil, nil
	m, log, res := r.m, r.log, r.res
	released := func() {
		if held != nil {
			m.uncountHolder(res, held)
		}
		if after != nil {
			after()
		}
	}
	if lock == nil { // a rollback lost it and could not take it anew
		released()
		return
	}
	rctx, cancel := lockutil.Detached(ctx)
	lockutil.ReleaseAsync(rctx, lock, func(err error) {
		cancel()
		if errors.Is(err, redlock.ErrLockLost) {
			log.Warn("lock found lost at release: exclusivity was not guaranteed to the end", "err", err)
		} else {
			m.releaseState(log, err)
		}
		released()
	})
}
