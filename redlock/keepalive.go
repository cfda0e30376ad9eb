package redlock

import (
	"context"
	"fmt"
	"time"
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

// Extend resets the lock's TTL to ttl on every node where it is still held.
// It succeeds only if a majority confirms before the current validity ends;
// the new validity is counted from the start of the call. An expired lock is
// never re-created: Extend then fails with ErrLockLost. A failure that only
// shows unreachable nodes (ErrQuorum) leaves the lock held until Until.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if err := l.c.checkTTL(ttl); err != nil {
		return err
	}
	ttl = ttl.Truncate(time.Millisecond)
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	err := l.extend(ctx, ttl)
	l.c.observe(Event{Kind: EventExtend, Resource: l.res.resource, Err: err})
	return err
}

func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	start := time.Now()
	l.mu.Lock()
	switch l.state {
	case stateReleased:
		l.mu.Unlock()
		return ErrNotHeld
	case stateLost:
		l.mu.Unlock()
		return ErrLockLost
	}
	until := l.until
	if !start.Before(until) {
		report := l.loseLocked(ErrLockLost)
		l.mu.Unlock()
		report()
		return ErrLockLost
	}
	l.mu.Unlock()

	deadline := start.Add(c.cfg.nodeTimeout)
	if until.Before(deadline) {
		deadline = until
	}
	args := extendScript.args(l.res.lockKeys(), l.token, ttl.Milliseconds())
	r := c.broadcast("extend", l.res.resource, c.allNodes(), c.q, deadline, false, args, extendScript)
	err := r.collect(ctx, deadline, classifyOne)
	if err != nil {
		return err
	}
	now := time.Now()
	l.mu.Lock()
	report, err := l.settleExtension(r, start, now, ttl)
	l.mu.Unlock()
	report()
	return err
}

// settleExtension applies an extension round's outcome. Called with l.mu
// held; the returned function reports a loss once l.mu is released.
func (l *Lock) settleExtension(r *round, start, now time.Time, ttl time.Duration) (report func(), err error) {
	c := l.c
	none := func() {}
	if l.state != stateHeld {
		if l.state == stateReleased {
			return none, ErrNotHeld
		}
		return none, ErrLockLost
	}
	if r.t.success() && now.Before(l.until) {
		// The script never shortens a key, so the keys live at least until
		// start+ttl; Until never moves back on a shorter TTL either.
		l.until = maxTime(l.until, start.Add(ttl-driftAllowance(ttl, c.cfg.driftFactor)))
		l.lastStart = start
		l.ttl = ttl
		l.watchdog.Reset(time.Until(l.until) - lossGuard(ttl))
		return none, nil
	}
	if r.t.total-r.t.refused < c.q {
		// Our keys are gone from so many nodes that no majority can be
		// proven again: the lock is lost now, whatever Until says.
		err = r.err([]error{ErrLockLost}, fmt.Sprintf("keys gone on %d of %d nodes", r.t.refused, r.t.total))
		return l.loseLocked(err), err
	}
	if !now.Before(l.until) {
		return l.loseLocked(ErrLockLost), r.err([]error{ErrLockLost}, "no majority confirmed the extension within the validity")
	}
	return none, r.err([]error{ErrQuorum}, fmt.Sprintf("extension confirmed by %d of %d nodes (quorum %d)", r.t.ok, r.t.total, c.q))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
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
// cause matching ErrInvalid, and the lock is not kept alive.
func (l *Lock) KeepAlive(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		kctx, cancel := context.WithCancelCause(context.Background())
		cancel(invalidf("nil context given to KeepAlive"))
		return kctx, func() { cancel(context.Canceled) }
	}
	kctx, cancel := context.WithCancelCause(ctx)
	l.mu.Lock()
	switch l.state {
	case stateLost:
		cause := l.cause
		l.mu.Unlock()
		cancel(cause)
		return kctx, func() { cancel(context.Canceled) }
	case stateReleased:
		l.mu.Unlock()
		cancel(nil)
		return kctx, func() { cancel(context.Canceled) }
	}
	// Forget keep-alives their owners already cancelled, so that calling
	// KeepAlive repeatedly does not grow the list.
	live := l.keepalives[:0]
	for _, ka := range l.keepalives {
		if ka.ctx.Err() == nil {
			live = append(live, ka)
		}
	}
	l.keepalives = append(live, keepalive{ctx: kctx, cancel: cancel})
	l.mu.Unlock()
	if !l.c.spawn(func() { l.keepAlive(kctx) }) {
		cancel(ErrClosed)
	}
	return kctx, func() { cancel(context.Canceled) }
}

// keepAlive is the extension loop. Losses are declared by the watchdog, not
// here, so a slow extension never delays the loss signal.
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
		next := l.lastStart.Add(l.ttl / 3)
		if retry.After(next) {
			next = retry
		}
		until, ttl := l.until, l.ttl
		l.mu.Unlock()

		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-l.ended:
			return
		case <-l.c.closed:
			return
		case <-timer.C:
		}

		if !l.holdEnd.IsZero() {
			left := time.Until(l.holdEnd)
			if left < ttl {
				ttl = left
			}
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
		if err == nil {
			retry = time.Time{}
			continue
		}
		l.c.cfg.logger.Debug("redlock keep-alive extension failed", "resource", l.res.resource, "err", err)
		retry = time.Now().Add(max(min(ttl/20, 100*time.Millisecond), time.Millisecond))
	}
}
