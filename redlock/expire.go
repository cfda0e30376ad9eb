package redlock

// leaveToExpire (lockutil.LeaveToExpire, the scheduler's: a cron tick must
// not run again on another replica within the TTL) ends the lock's life in
// this process without touching the nodes: its keys stay until their TTL
// ends, an end that is not a loss (no "lock lost" log line, no EventLost,
// Lost() never closes). Its watchdog and keep-alives stop (their contexts
// end with context.Canceled); Release and Extend then fail with ErrNotHeld;
// a waiter of this process acquires by itself once the keys expire (no
// release is announced). It returns ErrNotHeld for a lock (or a nil Lock)
// already released or left, and an error matching ErrLockLost if its
// validity had already ended.
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
