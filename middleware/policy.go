package middleware

import "time"

// Policy decides what happens to a task whose resource is held by another.
type Policy struct {
	action action
	wait   time.Duration
}

type action int

const (
	actRequeue action = iota + 1
	actSkip
	actFail
)

// Wait blocks up to max for the lock (woken as soon as the holder releases,
// and never past the task's own deadline), then requeues the task — unless
// the resource changed hands meanwhile (a queue of waiters is being served):
// then the wait is renewed, up to 15 times max; a holder that stays put
// gets the waiter requeued after 2×max (with WithBroker; 5×max without).
func Wait(max time.Duration) Policy { return Policy{action: actRequeue, wait: max} }

// Requeue returns the task to asynq at once, to be retried after a short
// jittered delay without consuming its retry budget (see IsFailure and
// RetryDelay).
func Requeue() Policy { return Policy{action: actRequeue} }

// Skip completes the task without running it (logged and observed).
func Skip() Policy { return Policy{action: actSkip} }

// Fail archives the task with asynq.SkipRetry.
func Fail() Policy { return Policy{action: actFail} }

// name names the policy in events and logs.
func (p Policy) name() string {
	switch p.action {
	case actRequeue:
		if p.wait > 0 {
			return "wait"
		}
		return "requeue"
	case actSkip:
		return "skip"
	case actFail:
		return "fail"
	}
	return "invalid"
}
