package scheduler

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test for them with errors.Is; the message of a returned
// error names the job and what is wrong.
var (
	// ErrInvalidSpec means a cron spec could not be parsed, or describes a
	// schedule that never activates.
	ErrInvalidSpec = errors.New("scheduler: invalid cron spec")
	// ErrInvalidName means a job name is empty, too long, or contains
	// whitespace, control characters, '{' or '}'.
	ErrInvalidName = errors.New("scheduler: invalid job name")
	// ErrDuplicateName means a Scheduler already has a job of that name.
	ErrDuplicateName = errors.New("scheduler: duplicate job name")
	// ErrSkewTooLarge is no longer returned: a run's tick is the latest
	// activation within the skew, so the skew may exceed the interval.
	//
	// Deprecated: kept so that code testing for it still compiles.
	ErrSkewTooLarge = errors.New("scheduler: skew not smaller than the schedule's interval")
	// ErrNoSchedule is no longer returned: a Singleton needs no schedule.
	//
	// Deprecated: kept so that code testing for it still compiles.
	ErrNoSchedule = errors.New("scheduler: no schedule given")
	// ErrInvalid marks other bad input: a nil client, job or task, or a bad
	// option value.
	ErrInvalid = errors.New("scheduler: invalid argument")
	// ErrNoTick is the reason a run was skipped because it did not start
	// within the skew of any activation of its schedule (a delivery later
	// than the skew, or a cron that fires on another schedule than the one
	// given to Singleton). An EnqueueJob run outside Singleton fails with it
	// too.
	ErrNoTick = errors.New("scheduler: run is not within the skew of an activation")
	// ErrStopped is returned by Register after Stop, and is the cause of the
	// context of jobs still running when Stop's context ends.
	ErrStopped = errors.New("scheduler: stopped")
)

// PanicError is the error reported for a job that panicked: the panic value
// and the stack of the panicking goroutine.
type PanicError struct {
	Value any
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("scheduler: job panicked: %v", e.Value) }

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
