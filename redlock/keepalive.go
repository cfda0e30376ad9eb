package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// Extend raises the lock's TTL to ttl on every node where it is still held,
// never shortening a key. It succeeds if a majority confirms before the
// validity ends; Until becomes the later of its old value and the call's start
// plus ttl, less the drift allowance. An expired lock is not re-created
// (ErrLockLost); a failure showing only unreachable nodes (ErrQuorum) leaves
// the lock held until Until. A nil Lock: ErrNotHeld.
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
	deadline := start.Add(min(c.cfg.nodeTimeout, until.Sub(start)))
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

func (l *Lock) settleExtension(r *round, start time.Time, ttl time.Duration) error {
	c, now := l.c, time.Now()
	l.mu.Lock()
	switch err := l.heldErr(); {
	case err != nil:
		l.mu.Unlock()
		return err
	case r.t.success() && now.Before(l.until):
		// The keys live at least until start+ttl; Until never moves back.
		l.until = lockutil.Later(l.until, start.Add(ttl-driftAllowance(ttl, c.cfg.driftFactor)))
		l.lastStart, l.ttl = start, ttl
		l.watchdog.Reset(time.Until(l.until) - lossGuard(ttl))
		l.mu.Unlock()
		return nil
	case r.t.total-r.t.refused < c.q:
		// No majority can be proven again: lost now, whatever Until says.
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

// KeepAlive extends the lock in the background about every ttl/3 while ctx
// lives (and within WithMaxHold). The returned context is cancelled with cause
// ErrLockLost (context.Cause) a guard before Until when the lock can no longer
// be proven held (REDLOCK.md, "Keep-alive"), and with context.Canceled on
// release or by the CancelFunc; Lost() closes at the loss. For a nil ctx or
// Lock the context comes cancelled, with a cause matching ErrInvalid or
// ErrNotHeld.
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

// endedContext is a keep-alive context ended with cause; nil parent: Background.
func endedContext(parent context.Context, cause error) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	kctx, cancel := context.WithCancelCause(parent)
	cancel(cause)
	return kctx, func() { cancel(context.Canceled) }
}

// keepAlive is the extension loop; the watchdog declares losses, so a slow
// extension never delays the signal.
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
				l.mu.Lock() // the cap is reached: let the lock run out
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

// Run acquires resource as Acquire does, runs fn with a context kept alive
// by KeepAlive (cancelled with cause ErrLockLost at a loss), then releases the
// lock even if ctx ended meanwhile. It returns fn's error, also matching
// ErrLockLost if the lock was lost while fn ran, else joined with a failed
// release's.
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
