package lockutil

import "time"

// Later returns the later of a and b.
func Later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// LossGuard is how long before a lock's Until its loss is declared
// (redlock.Lock.Until), so that the holder's context is cancelled before
// validity ends despite timer and scheduling delays: ttl/10 within [50ms,
// 500ms], and never more than a quarter of the TTL. On a loaded machine each
// hop of the signal (timer, watchdog goroutine, holder) can wait for a busy
// goroutine's preemption, 10-20ms each, longer under -race; 2ms (the guard
// of a 100ms TTL at ttl/50) was seen overrun by 10ms. The middleware uses it
// to tell a loss declared before a handler returned.
func LossGuard(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), 500*time.Millisecond, ttl/4)
}
