package middleware

import "time"

// EventKind tells what an Event reports: a short snake_case name, fit for
// metric labels and span attributes.
type EventKind string

// Event kinds.
const (
	// EventAcquired: the task got its lock after waiting (Wait, Handover).
	EventAcquired EventKind = "acquired"
	// EventConflict: the resource was held; Action says what was done
	// ("park", "requeue", "skip", "fail", "wait-exhausted-budget").
	EventConflict EventKind = "conflict"
	// EventLost: the lock was lost while the handler ran.
	EventLost EventKind = "lost"
	// EventRollback: the rollback hook ran (Err is its error).
	EventRollback EventKind = "rollback"
	// EventBadKey: the task's key could not be derived; it is archived.
	EventBadKey EventKind = "bad_key"
	// EventPromoted: a parked task was moved to the front of its queue
	// because a task of its resource started (Wait: how long it was parked).
	EventPromoted EventKind = "promoted"
	// EventParked: the count of tasks parked on the resource (Parked)
	// changed without a park or promotion (tasks that came back by
	// themselves), so that a gauge of parked tasks stays exact.
	EventParked EventKind = "parked"
	// EventRedeliverySkipped: a re-delivery of a run that had completed
	// under its lock completed without running the handler
	// (WithCompletionWindow).
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
	Action   string        // for "conflict"
	Wait     time.Duration // time spent acquiring (or until the conflict was decided)
	Err      error
	// Handover, for "acquired": "" when the lock was free at the first try;
	// after waiting, "local" when a task of this process had just released
	// it, else "remote".
	Handover string
	// Parked, for a "park" conflict, "promoted" and "parked": tasks parked
	// on the resource (in the task's queue) after the event.
	Parked int
}
