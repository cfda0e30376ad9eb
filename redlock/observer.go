package redlock

import (
	"context"
	"errors"
	"time"
)

// EventKind tells what an Event reports: a snake_case name, fit for a
// metric label.
type EventKind string

// Event kinds.
const (
	// EventAcquire: an Acquire or TryAcquire call ended. Duration is the time
	// from the call to its answer (waiting included), Attempts the number of
	// quorum rounds, Err nil when the lock was granted, Outcome its name.
	EventAcquire EventKind = "acquire"
	// EventExtend: an extension ended (Err nil on success).
	EventExtend EventKind = "extend"
	// EventLost: a held lock was lost; Err is the cause.
	EventLost EventKind = "lost"
	// EventNodeError: one node failed a call; Node and Addr name it.
	EventNodeError EventKind = "node_error"
)

// outcomeOf names how an acquisition that returned err ended
// (lockutil.Outcome): "canceled" when the caller's context ended first,
// even when the last attempt met a holder; "error" for bad input or a
// closed client.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrLocked):
		return "locked"
	case errors.Is(err, ErrQuorum):
		return "quorum"
	}
	return "error"
}

// Event is what the hook installed with WithObserver receives.
type Event struct {
	Kind     EventKind
	Resource string
	Duration time.Duration
	Attempts int
	// Outcome names how an EventAcquire ended, as the acquire span's
	// asynqlock.outcome does: "acquired", "locked" (ErrLocked), "quorum"
	// (ErrQuorum), "canceled" (the caller's context ended first) or "error".
	Outcome string
	Node    int    // for EventNodeError
	Addr    string // for EventNodeError
	Err     error
}

func (c *Client) observe(e Event) {
	if c.cfg.observer != nil {
		c.cfg.observer(e)
	}
}
