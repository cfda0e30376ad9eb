package middleware

import "time"

// Event is what the observer (WithObserver) receives. Kind is one of:
//   - "acquired": the task got its lock after waiting (Wait, Handover);
//   - "conflict": the resource was held; Action says what was done ("park",
//     "requeue", "skip", "fail", "resubmit", "wait-exhausted-budget");
//   - "lost": the lock was lost while the handler ran;
//   - "rollback": the rollback hook ran (Err is its error);
//   - "bad_key": the task's key could not be derived; it is archived;
//   - "promoted": a parked task was moved to the front of its queue because
//     a task of its resource started (Wait: how long it was parked);
//   - "parked": the count of tasks parked on the resource (Parked) changed
//     without a park or promotion: records of tasks that came back by
//     themselves were dropped. With the counts of "park" conflicts and
//     "promoted" events, it keeps a gauge of parked tasks exact.
//
// Kind, Policy, Action and Handover are short fixed names, fit for metric
// labels.
type Event struct {
	Kind     string
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

// Event kinds.
const (
	evAcquired = "acquired"
	evConflict = "conflict"
	evLost     = "lost"
	evRollback = "rollback"
	evBadKey   = "bad_key"
	evPromoted = "promoted"
	evParked   = "parked"
)

func (m *mw) observe(e Event) {
	if m.cfg.observer != nil {
		m.cfg.observer(e)
	}
}
