package workerconfig

import (
	"errors"
	"strings"
	"testing"
)

// TestOnlyKeepsTheProblemsOfThePrefixes: problems about other variables
// are dropped (nil when none is left), other errors pass through, and what
// is kept still matches ErrInvalid.
func TestOnlyKeepsTheProblemsOfThePrefixes(t *testing.T) {
	err := &Error{Problems: []Problem{
		{Var: "ASYNQ_REDIS_URL", Message: "is required"},
		{Var: "REDLOCK_TTL", Message: "must be positive"},
		{Var: "LOG_LEVEL", Message: "must be debug, info, warn or error"},
	}}
	got := Only(err, "REDLOCK_", "LOG_")
	var e *Error
	if !errors.As(got, &e) || len(e.Problems) != 2 || !errors.Is(got, ErrInvalid) {
		t.Fatalf("Only = %v", got)
	}
	if msg := got.Error(); strings.Contains(msg, "ASYNQ_REDIS_URL") || !strings.HasPrefix(msg, "worker: invalid configuration:\n  REDLOCK_TTL: ") {
		t.Fatalf("message %q", msg)
	}
	if got := Only(err, "WORKER_"); got != nil {
		t.Fatalf("no problem of the prefix left: %v", got)
	}
	other := errors.New("boom")
	if got := Only(other, "REDLOCK_"); got != other {
		t.Fatalf("another error: %v", got)
	}
	if got := Only(nil, "REDLOCK_"); got != nil {
		t.Fatalf("nil: %v", got)
	}
}
