package middleware

import "time"

// EventKind tells what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventAcquired: the task got its lock after Wait.
	EventAcquired EventKind = iota + 1
	// EventConflict: the resource was held; Action says what was done
	// ("requeue", "skip", "fail", "resubmit", "wait-exhausted-budget").
	EventConflict
	// EventLost: the lock was lost while the handler ran.
	EventLost
	// EventRollback: the rollback hook ran (Err is its error).
	EventRollback
	// EventBadKey: the task's key could not be derived; it is archived.
	EventBadKey
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
}

func (m *mw) observe(e Event) {
	if m.cfg.observer != nil {
		m.cfg.observer(e)
	}
}
