package middleware

import "time"

// Event is what the observer (WithObserver) receives. Kind, Policy, Action
// and Handover are short fixed names, fit for metric labels. Kind is one of:
//   - "acquired": the task got its lock after waiting (Wait, Handover);
//   - "conflict": the resource was held; Action says what was done;
//   - "lost": the lock was lost while the handler ran;
//   - "rollback": the rollback hook ran (Err is its error);
//   - "bad_key": the task's key could not be derived; it is archived;
//   - "promoted": a parked task was moved to the front of its queue because
//     a task of its resource started (Wait: how long it was parked);
//   - "parked": the count of tasks parked on the resource (Parked) changed
//     without a park or promotion (tasks that came back by themselves);
//   - "redelivery_skipped": a re-delivery of a run that had completed under
//     its lock completed without running the handler (WithCompletionWindow).
type Event struct {
	Kind     string
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

// The kinds of Event.
const (
	kindAcquired          = "acquired"
	kindConflict          = "conflict"
	kindLost              = "lost"
	kindRollback          = "rollback"
	kindBadKey            = "bad_key"
	kindPromoted          = "promoted"
	kindParked            = "parked"
	kindRedeliverySkipped = "redelivery_skipped"
)
