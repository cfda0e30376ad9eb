package middleware

import "time"

// EventKind tells what an Event reports: a short snake_case name, fit for
// metric labels and span attributes.
type EventKind string

// Event kinds.
const (
	EventAcquired EventKind = "acquired" // the task got its lock after waiting (Wait, Handover)
	EventConflict EventKind = "conflict" // the resource was held; Action says what was done
	EventLost     EventKind = "lost"     // the lock was lost while the handler ran
	EventRollback EventKind = "rollback" // the rollback hook ran (Err is its error)
	EventBadKey   EventKind = "bad_key"  // the task's key could not be derived; it is archived
	// EventPromoted: a parked task was moved to the front of its queue
	// because a task of its resource started (Wait: how long it was parked).
	EventPromoted EventKind = "promoted"
	// EventParked: the count of tasks parked on the resource (Parked) changed
	// without a park or promotion (tasks that came back by themselves).
	EventParked EventKind = "parked"
	// EventRedeliverySkipped: a re-delivery of a run that had completed under
	// its lock completed without running the handler (WithCompletionWindow).
	EventRedeliverySkipped EventKind = "redelivery_skipped"
)

// Event is what the observer (WithObserver) receives. Kind, Policy, Action
// and Handover are short fixed names, fit for metric labels.
type Event struct {
	Kind     EventKind
	TaskType string
	TaskID   string
	Resource string
	Policy   string        // the conflict policy's name: "wait", "requeue", "skip", "fail"
	Action   string        // for "conflict": "park", "requeue", "skip", "fail", "wait-exhausted-budget"
	Wait     time.Duration // time spent acquiring (or until the conflict was decided)
	Err      error
	// Handover, for "acquired" after a wait: "local" when a task of this
	// process had just released it, else "remote".
	Handover string
	Parked   int // for a "park" conflict, "promoted" and "parked": tasks parked on the resource (its queue)
}
