package middleware

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// errConflict marks a task returned to the queue because its resource was
// held by another task (IsFailure is false for it; it also matches the
// lock's cause: redlock.ErrLocked, or redlock.ErrQuorum when too many lock
// nodes were unreachable).
var errConflict = errors.New("middleware: resource busy, task requeued")

// conflictError is the requeue error: not a failure of the task.
type conflictError struct {
	resource string
	cause    error
	delay    time.Duration // from the resource's pace (0: the default range)
	nonce    string        // marks a parked task's error, for its promotion
}

func (e *conflictError) Error() string {
	what := errConflict.Error()
	if quorumLost(e.cause) {
		what = "middleware: lock nodes unreachable, task requeued"
	}
	if e.nonce != "" {
		what += " (parked " + e.nonce + ")" // found by the promotion script
	}
	return fmt.Sprintf("%s: %s: %v", what, e.resource, e.cause)
}

func (e *conflictError) Unwrap() []error { return []error{errConflict, e.cause} }

// quorumLost tells a lock not had for want of a quorum.
func quorumLost(err error) bool {
	return errors.Is(err, redlock.ErrQuorum) && !errors.Is(err, redlock.ErrLocked)
}

// IsFailure is for asynq.Config.IsFailure: a conflict is not a failure, so
// it neither counts in failure metrics nor consumes the task's retry budget.
// To combine it with a check of your own:
//
//	IsFailure: func(err error) bool { return middleware.IsFailure(err) && mine(err) }
func IsFailure(err error) bool { return !errors.Is(err, errConflict) }

// Requeue delays, jittered: a crashed worker's task (asynq.ErrLeaseExpired)
// waited a minute in asynq's recoverer already, and many come at once.
const (
	conflictDelayMin     = 200 * time.Millisecond
	conflictDelayMax     = time.Second
	quorumDelayMin       = time.Second
	quorumDelayMax       = 5 * time.Second
	leaseExpiredDelayMin = 100 * time.Millisecond
	leaseExpiredDelayMax = time.Second
)

// RetryDelay is for asynq.Config.RetryDelayFunc: a short jittered delay for
// conflicts (paced by the resource's measured hold times) and for tasks of a
// crashed worker, whose lock has expired by then (asynq.ErrLeaseExpired;
// docs/guide/MIDDLEWARE.md, "Conflicts"), asynq's default backoff otherwise.
// To combine it with your own, call RetryDelay when IsFailure(err) is false
// or err is asynq.ErrLeaseExpired, and yours otherwise.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	var ce *conflictError
	switch {
	case errors.Is(err, errConflict) && quorumLost(err):
		return jitter(quorumDelayMin, quorumDelayMax)
	case errors.As(err, &ce) && ce.delay > 0:
		return ce.delay
	case errors.Is(err, errConflict):
		return jitter(conflictDelayMin, conflictDelayMax)
	case errors.Is(err, asynq.ErrLeaseExpired):
		return jitter(leaseExpiredDelayMin, leaseExpiredDelayMax)
	}
	return asynq.DefaultRetryDelayFunc(n, err, t)
}

func jitter(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}
