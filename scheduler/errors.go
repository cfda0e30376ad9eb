package scheduler

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test for them with errors.Is; the message of a returned
// error names the job and what is wrong.
var (
	// ErrInvalid means input that cannot work, refused where it is made: a
	// nil client, job or task, a bad or duplicate job name, a cron spec
	// that does not parse or never activates, a bad option value.
	ErrInvalid = errors.New("scheduler: invalid argument")
)

// errStopped is the cause of the context of jobs still running when Stop's
// context ends.
var errStopped = errors.New("scheduler: stopped")

// errNoTick is the cause of a run skipped because it did not start within
// the skew of any activation of its schedule.
var errNoTick = errors.New("scheduler: run is not within the skew of an activation")

// panicError is the error reported for a job that panicked: the panic value
// and the stack of the panicking goroutine (logged with the event).
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("scheduler: job panicked: %v", e.value) }

// Unwrap returns the panic value if it is an error.
func (e *panicError) Unwrap() error {
	err, _ := e.value.(error)
	return err
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
