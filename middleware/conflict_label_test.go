package middleware

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/asynqlock/asynqlock/redlock"
)

// The error asynq records as a task's last error (what its CLI shows) says
// whether the resource was busy or the lock nodes were unreachable.
func TestConflictErrorTellsOutageFromBusy(t *testing.T) {
	outage := &conflictError{resource: "sku:1", cause: fmt.Errorf("%w: 2 of 5 nodes answered", redlock.ErrQuorum)}
	busy := &conflictError{resource: "sku:1", cause: redlock.ErrLocked}
	both := &conflictError{resource: "sku:1", cause: errors.Join(redlock.ErrLocked, redlock.ErrQuorum)}
	if s := outage.Error(); strings.Contains(s, "busy") || !strings.Contains(s, "lock nodes unreachable") {
		t.Errorf("quorum outage reads %q", s)
	}
	for _, e := range []*conflictError{busy, both} {
		if s := e.Error(); !strings.Contains(s, "resource busy") {
			t.Errorf("busy resource reads %q", s)
		}
	}
	for _, e := range []error{outage, busy, both} {
		if !errors.Is(e, errConflict) || IsFailure(e) {
			t.Errorf("%v: not a conflict", e)
		}
	}
}
