package redlock

import (
	"context"
	"errors"
	"time"
)

// EventKind tells what an Event reports. Its values are short snake_case
// names, fit for metric labels and span attributes, as the middleware's
// EventKind and the scheduler's Outcome are.
type EventKind string

// Event kinds.
const (
	// EventAcquire: an Acquire or TryAcquire call ended. Duration is the time
	// from the call to its answer (waiting included), Attempts the number of
	// quorum rounds, Err nil when the lock was granted (Outcome names it).
	EventAcquire EventKind = "acquire"
	// EventExtend: an extension ended (Err nil on success).
	EventExtend EventKind = "extend"
	// EventRelease: a release ended. Duration is how long the lock was held.
	EventRelease EventKind = "release"
	// EventLost: a held lock was lost; Err is the cause.
	EventLost EventKind = "lost"
	// EventNodeError: one node failed a call; Node and Addr name it.
	EventNodeError EventKind = "node_error"
	// EventHandOver: a Release passed the lock to a waiting Acquire of the
	// same Client in one round (Err nil: a local hand-over). Otherwise the
	// waiter acquires by itself: Err matches ErrLocked when a waiter of
	// another process was ahead in the nodes' queue, which the lock went to
	// (a remote hand-over), ErrQuorum when the round failed; a successor
	// that had started at once then keeps its lock and its validity.
	EventHandOver EventKind = "handover"
	// EventLimitChange: callers of another limit (WithLimit) use the
	// resource too, or no longer do: Limits lists the limits in use, in
	// increasing order (1 for callers without a limit), several while a
	// change of limit is under way, one once it is done. Err describes the
	// change and matches ErrLimitMismatch. Reported once per change and
	// Client (docs/REDLOCK.md, "Changing n").
	EventLimitChange EventKind = "limit_change"
)

// String returns the kind's name.
func (k EventKind) String() string { return string(k) }

// Outcome names how an acquisition ended: the value of the acquire span's
// asynqlock.outcome attribute and of the outcome label of acquisition
// metrics (the worker's asynqlock_lock_acquire_seconds).
type Outcome string

// Outcomes of an acquisition.
const (
	OutcomeAcquired Outcome = "acquired" // the lock was granted
	OutcomeLocked   Outcome = "locked"   // another holder has it (ErrLocked)
	OutcomeQuorum   Outcome = "quorum"   // too many nodes failed (ErrQuorum)
	OutcomeCanceled Outcome = "canceled" // the caller's context ended first
	OutcomeError    Outcome = "error"    // anything else (bad input, a closed client)
)

// OutcomeOf names the outcome of an acquisition that returned err. A wait
// that ended with the caller's context is OutcomeCanceled, even when the
// last attempt met a holder.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCanceled
	case errors.Is(err, ErrLocked):
		return OutcomeLocked
	case errors.Is(err, ErrQuorum):
		return OutcomeQuorum
	}
	return OutcomeError
}

// Event is what the hook installed with WithObserver receives.
type Event struct {
	Kind     EventKind
	Resource string
	Duration time.Duration
	Attempts int
	Node     int    // for EventNodeError
	Addr     string // for EventNodeError
	Limits   []int  // for EventLimitChange
	Err      error
}

func (c *Client) observe(e Event) {
	if c.cfg.observer != nil {
		c.cfg.observer(e)
	}
}
