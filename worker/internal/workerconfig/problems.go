package workerconfig

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid marks a configuration error (worker.ErrConfig).
var ErrInvalid = errors.New("worker: invalid configuration")

// Problem is one bad or missing variable.
type Problem struct {
	Var     string // the environment variable
	Message string // what is wrong and what is expected
}

// Error lists every problem found in the environment, one per variable,
// each with what is expected. Values of secret-bearing variables (URLs) are
// never shown.
type Error struct {
	Problems []Problem
	// Cause is the error behind the problems, when one error made them
	// (errors.Is and errors.As reach it).
	Cause error
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Cause }

// Error lists the problems, one per line.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	b.WriteString(":")
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  %s: %s", p.Var, p.Message)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Only keeps the problems of err about variables with one of the prefixes:
// nil when none is left. Other errors are returned as they are. Tools that
// talk to the lock nodes alone use it to ignore the broker's and the
// worker's variables.
func Only(err error, prefixes ...string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	var kept []Problem
	for _, p := range e.Problems {
		for _, pre := range prefixes {
			if strings.HasPrefix(p.Var, pre) {
				kept = append(kept, p)
				break
			}
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return &Error{Problems: kept}
}
