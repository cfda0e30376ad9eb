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
	until, err := l.until, l.heldErr()
	if err == nil && !start.Before(until) {
		report := l.loseLocked(ErrLockLost)
		l.mu.Unlock()
		report()
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
	now := time.Now()
	l.mu.Lock()
	report, err := l.settleExtension(r, start, now, ttl)
	l.mu.Unlock()
	report()
	return err
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

// settleExtension applies an extension round's outcome. Called with l.mu
// held; the returned function reports a loss once l.mu is released.
func (l *Lock) settleExtension(r *round, start, now time.Time, ttl time.Duration) (report func(), err error) {
	c := l.c
	none := func() {}
	if err := l.heldErr(); err != nil {
		return none, err
	}
	if r.t.success() && now.Before(l.until) {
		// The script never shortens a key, so the keys live at least until
		// start+ttl; Until never moves back on a shorter TTL either.
		l.until = lockutil.Later(l.until, start.Add(ttl-driftAllowance(ttl, c.cfg.driftFactor)))
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
