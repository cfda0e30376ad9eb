package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// Extend raises the lock's TTL to ttl on every node where it is still held:
// a key with less than ttl left gets ttl, and one with more keeps what it has
// (Extend never shortens a lock: an extension that fails to reach a quorum
// must not cut keys under the validity the holder still counts on). It
// succeeds only if a majority confirms before the current validity ends;
// Until then becomes the later of its old value and the start of the call
// plus ttl (less the drift allowance), so it never moves back either. An
// expired lock is never re-created: Extend then fails with ErrLockLost. A
// failure that only shows unreachable nodes (ErrQuorum) leaves the lock held
// until Until. A nil Lock returns ErrNotHeld.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return ErrNotHeld
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	if err := l.c.checkTTL(ttl); err != nil {
		return err
	}
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	err := l.extend(ctx, ttl.Truncate(time.Millisecond))
	l.c.observe(Event{Kind: EventExtend, Resource: l.res.resource, Err: err})
	return err
}

func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
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
	if err := r.collect(ctx, deadline, classifyOne); err != nil {
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
