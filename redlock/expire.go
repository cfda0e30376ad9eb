package redlock

// leaveToExpire (lockutil.LeaveToExpire, the scheduler's) ends the lock's
// life in this process without touching the nodes: its keys stay there
// until their TTL ends, and the end of its validity is expected, not a loss
// (no "lock lost" log line, no EventLost, Lost() never closes). Use it for a
// lock that records that something happened and must outlive the work, such
// as a cron tick that must not run again on another replica within the TTL.
//
// Its watchdog and keep-alives stop (their contexts end with
// context.Canceled); later calls of Release and Extend fail with
// ErrNotHeld. A waiter of this process moves on to acquiring by itself,
// and gets the resource once the keys expire (no release is announced).
// It returns ErrNotHeld if the lock was already released or left, and an
// error matching ErrLockLost if its validity had already ended. A nil Lock
// returns ErrNotHeld.
func (l *Lock) leaveToExpire() error {
	if l == nil {
		return ErrNotHeld
	}
	wasLost, prev, held := l.markReleased()
	if !held {
		return ErrNotHeld
	}
	l.turn.leave()
	if prev != "" {
		// A failed early hand-over left the predecessor's token where it
		// did not reach: it holds the resource for this lock until its
		// validity ends (dropPrevAtEnd).
		l.mu.Lock()
		l.dropPrevAtEnd()
		l.mu.Unlock()
	}
	if wasLost {
		return &opError{kinds: []error{ErrLockLost}, summary: "left to expire after its validity ended"}
	}
	return nil
}
