package redlock

import "time"

// EventKind tells what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventAcquire: an Acquire or TryAcquire call ended. Duration is the time
	// from the call to its answer (waiting included), Attempts the number of
	// quorum rounds, Err nil when the lock was granted.
	EventAcquire EventKind = iota + 1
	// EventExtend: an extension ended (Err nil on success).
	EventExtend
	// EventRelease: a release ended. Duration is how long the lock was held.
	EventRelease
	// EventLost: a held lock was lost; Err is the cause.
	EventLost
	// EventNodeError: one node failed a call; Node and Addr name it.
	EventNodeError
	// EventHandOver: a Release passed the lock to a waiting Acquire of the
	// same Client in one round (Err nil: a local hand-over). Otherwise the
	// waiter acquires by itself: Err matches ErrLocked when a waiter of
	// another process was ahead in the nodes' queue, which the lock went to
	// (a remote hand-over), ErrQuorum when the round failed; a successor
	// that had started at once then keeps its lock and its validity.
	EventHandOver
)

// String returns the kind's name, suitable as a metric label.
func (k EventKind) String() string {
	switch k {
	case EventAcquire:
		return "acquire"
	case EventExtend:
		return "extend"
	case EventRelease:
		return "release"
	case EventLost:
		return "lost"
	case EventNodeError:
		return "node_error"
	case EventHandOver:
		return "handover"
	}
	return "unknown"
}

// Event is what the hook installed with WithObserver receives.
type Event struct {
	Kind     EventKind
	Resource string
	Duration time.Duration
	Attempts int
	Node     int    // for EventNodeError
	Addr     string // for EventNodeError
	Err      error
}

func (c *Client) observe(e Event) {
	if c.cfg.observer != nil {
		c.cfg.observer(e)
	}
}
