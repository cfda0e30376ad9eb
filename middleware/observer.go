package middleware

import "time"

// EventKind tells what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventAcquired: the task got its lock after Wait.
	EventAcquired EventKind = iota + 1
	// EventConflict: the resource was held; Action says what was done
	// ("park", "requeue", "skip", "fail", "resubmit",
	// "wait-exhausted-budget"). A "park" event's Parked is the FIFO's
	// length with the task.
	EventConflict
	// EventLost: the lock was lost while the handler ran.
	EventLost
	// EventRollback: the rollback hook ran (Err is its error).
	EventRollback
	// EventBadKey: the task's key could not be derived; it is archived.
	EventBadKey
	// EventPromoted: a parked task was moved to the front of its queue
	// because a task of its resource started (Wait: how long it was parked;
	// Parked: tasks still parked on the resource in that queue).
	EventPromoted
)

// String returns the kind's name, suitable as a metric label.
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventConflict:
		return "conflict"
	case EventLost:
		return "lost"
	case EventRollback:
		return "rollback"
	case EventBadKey:
		return "bad_key"
	case EventPromoted:
		return "promoted"
	}
	return "unknown"
}

// Event is what the observer receives.
type Event struct {
	Kind     EventKind
	TaskType string
	TaskID   string
	Resource string
	Policy   string        // the conflict policy's name
	Action   string        // for EventConflict
	Wait     time.Duration // time spent acquiring (or until the conflict was decided)
	Err      error
	// Handover, for EventAcquired: "" when the lock was free at the first
	// try; after waiting, "local" when a task of this process had just
	// released it, else "remote".
	Handover string
	// Parked, for EventConflict "park" and EventPromoted: tasks parked on
	// the resource (in the task's queue) after the event.
	Parked int
}

func (m *mw) observe(e Event) {
	if m.cfg.observer != nil {
		m.cfg.observer(e)
	}
}
