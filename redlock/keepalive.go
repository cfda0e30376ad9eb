package redlock

import (
	"context"
	"slices"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// adoptTurn attaches the caller's place in the local queue: it passes to the
// next local waiter when the lock is released or lost.
func (l *Lock) adoptTurn(t *turn) {
	if t == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		t.leave()
		return
	}
	l.turn = t
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
	// Forget keep-alives their owners already cancelled, so that calling
	// KeepAlive repeatedly does not grow the list.
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
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	retry := time.Time{}
	for {
		l.mu.Lock()
		if l.state != stateHeld {
			l.mu.Unlock()
			return
		}
		next := lockutil.Later(l.lastStart.Add(l.ttl/3), retry)
		until, ttl := l.until, l.ttl
		l.mu.Unlock()

		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-l.c.closed:
			return
		case <-timer.C:
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
