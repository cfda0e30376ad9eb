package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// Extend raises the lock's TTL to ttl on every node where it is still held:
// a key with less than ttl left gets ttl, one with more keeps it (Extend
// never shortens a lock: docs/design/REDLOCK.md, "The scripts"). It succeeds
// only if a majority confirms before the current validity ends; Until then
// becomes the later of its old value and the call's start plus ttl (less
// the drift allowance). An expired lock is never re-created: Extend then
// fails with ErrLockLost. A failure that only shows unreachable nodes
// (ErrQuorum) leaves the lock held until Until. A nil Lock: ErrNotHeld.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) (err error) {
	if l == nil {
		return ErrNotHeld
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	c := l.c
	if err := c.checkTTL(ttl); err != nil {
		return err
	}
	ttl = ttl.Truncate(time.Millisecond)
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	defer func() { c.observe(Event{Kind: EventExtend, Resource: l.res.resource, Err: err}) }()
	start := time.Now()
	l.mu.Lock()
	until, err := l.until, l.heldErr()
	if err == nil && !start.Before(until) {
		l.loseUnlock(ErrLockLost)
		return ErrLockLost
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	deadline := start.Add(c.cfg.nodeTimeout)
	if until.Before(deadline) {
		deadline = until
	}
	s, args := extendScript, scriptArgs(extendScript, l.res.lockKeys(), l.token, ttl.Milliseconds())
	r := c.broadcast("extend", l.res.resource, c.allNodes(), c.q, deadline, false, args, s)
	if err := r.collect(ctx, classifyOne); err != nil {
		return err
	}
	return l.settleExtension(r, start, ttl)
}

// heldErr is nil while l is held, else why not (l.mu held).
func (l *Lock) heldErr() error {
	switch l.state {
	case stateReleased:
		return ErrNotHeld
	case stateLost:
		return ErrLockLost
	}
	return nil
}

// settleExtension applies an extension round's outcome.
func (l *Lock) settleExtension(r *round, start time.Time, ttl time.Duration) error {
	c, now := l.c, time.Now()
	l.mu.Lock()
	switch err := l.heldErr(); {
	case err != nil:
		l.mu.Unlock()
		return err
	case r.t.success() && now.Before(l.until):
		// The script never shortens a key, so the keys live at least until
		// start+ttl; Until never moves back on a shorter TTL either.
		l.until = lockutil.Later(l.until, start.Add(ttl-driftAllowance(ttl, c.cfg.driftFactor)))
		l.lastStart = start
		l.ttl = ttl
		l.watchdog.Reset(time.Until(l.until) - lossGuard(ttl))
		l.mu.Unlock()
		return nil
	case r.t.total-r.t.refused < c.q:
		// Our keys are gone from so many nodes that no majority can be
		// proven again: the lock is lost now, whatever Until says.
		err = r.err([]error{ErrLockLost}, fmt.Sprintf("keys gone on %d of %d nodes", r.t.refused, r.t.total))
		l.loseUnlock(err)
		return err
	case !now.Before(l.until):
		l.loseUnlock(ErrLockLost)
		return r.err([]error{ErrLockLost}, "no majority confirmed the extension within the validity")
	}
	l.mu.Unlock()
	return r.err([]error{ErrQuorum}, fmt.Sprintf("extension confirmed by %d of %d nodes (quorum %d)", r.t.ok, r.t.total, c.q))
}

// KeepAlive extends the lock in the background about every ttl/3 for as long
// as ctx lives (and within WithMaxHold). The returned context is cancelled
// with cause ErrLockLost (see context.Cause) when the lock can no longer be
// proven held: a guard before Until (ttl/10 within [50ms, 500ms], at most
// ttl/4), so a holder that watches it stops before Until unless its process
// is starved of CPU for longer than the guard (such a pause is what fencing
// tokens are for). It is cancelled with context.Canceled when the lock is
// released or the returned CancelFunc is called. Lost() closes at the loss.
// A nil ctx is refused: the returned context is already cancelled with a
// cause matching ErrInvalid, and the lock is not kept alive. A nil Lock's
// context is already cancelled with cause ErrNotHeld.
func (l *Lock) KeepAlive(ctx context.Context) (context.Context, context.CancelFunc) {
	if l == nil {
		return endedContext(ctx, ErrNotHeld)
	}
	if ctx == nil {
		return endedContext(ctx, invalidf("nil context given to KeepAlive"))
	}
	l.mu.Lock()
	if l.state != stateHeld {
		cause := l.cause // nil once released: context.Canceled
		l.mu.Unlock()
		return endedContext(ctx, cause)
	}
	kctx, cancel := context.WithCancelCause(ctx)
	// Drop keep-alives already cancelled: repeated calls do not grow the list.
	live := slices.DeleteFunc(l.keepalives, func(ka keepalive) bool {
		return ka.ctx.Err() != nil
	})
	l.keepalives = append(live, keepalive{ctx: kctx, cancel: cancel})
	l.mu.Unlock()
	if !l.c.spawn(func() { l.keepAlive(kctx) }) {
		cancel(ErrClosed)
	}
	return kctx, func() { cancel(context.Canceled) }
}

// endedContext is a keep-alive context that ended before it began, with
// cause; a nil parent counts as context.Background().
func endedContext(parent context.Context, cause error) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	kctx, cancel := context.WithCancelCause(parent)
	cancel(cause)
	return kctx, func() { cancel(context.Canceled) }
}

// keepAlive is the extension loop; ctx ends with the lock (endLocked).
// Losses are declared by the watchdog, not here, so a slow extension never
// delays the loss signal.
func (l *Lock) keepAlive(ctx context.Context) {
	var retry time.Time
	for {
		l.mu.Lock()
		if l.state != stateHeld {
			l.mu.Unlock()
			return
		}
		next := lockutil.Later(l.lastStart.Add(l.ttl/3), retry)
		until, ttl := l.until, l.ttl
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-l.c.closed:
			return
		case <-time.After(time.Until(next)):
		}
		if !l.holdEnd.IsZero() {
			ttl = min(ttl, time.Until(l.holdEnd))
			if l.c.checkTTL(ttl) != nil {
				// The cap is reached: let the lock run out.
				l.mu.Lock()
				l.capped = true
				l.mu.Unlock()
				return
			}
		}
		ectx, cancel := context.WithDeadline(ctx, until)
		err := l.Extend(ectx, ttl)
		cancel()
		retry = time.Time{}
		if err != nil {
			l.c.cfg.logger.Debug("redlock keep-alive extension failed", "resource", l.res.resource, "err", err)
			retry = time.Now().Add(max(min(ttl/20, 100*time.Millisecond), time.Millisecond))
		}
	}
}

// Run acquires resource (waiting as Acquire does), runs fn with a context
// that is kept alive by KeepAlive and cancelled with cause ErrLockLost if the
// lock is lost, then releases the lock, even if ctx has been cancelled
// meanwhile. It returns fn's error; if the lock was lost while fn ran, the
// error also matches ErrLockLost (fn's work was not protected to its end);
// a failed release is joined otherwise.
func (c *Client) Run(ctx context.Context, resource string, ttl time.Duration,
	fn func(context.Context) error, opts ...LockOption) (err error) {
	if fn == nil {
		return invalidf("nil function")
	}
	l, err := c.Acquire(ctx, resource, ttl, opts...)
	if err != nil {
		return err
	}
	kctx, cancel := l.KeepAlive(ctx)
	defer func() { // also when fn panics, before the panic goes on
		lost := context.Cause(kctx)
		cancel()
		rerr := lockutil.Release(ctx, l)
		switch {
		case !errors.Is(lost, ErrLockLost):
			err = errors.Join(err, rerr)
		case !errors.Is(err, ErrLockLost):
			err = errors.Join(err, lost)
		}
	}()
	return fn(kctx)
}
