package main

import (
	"strings"
	"testing"
	"time"
)

// The demo itself takes a minute (asynq's lease and recoverer), too long
// for the suite: this checks its flags; `go run ./examples/once` runs it.
func TestRejectsBadFlags(t *testing.T) {
	t.Parallel()
	c := defaults()
	if err := c.validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	c.skus, c.work, c.down = 0, 0, time.Minute
	err := c.validate()
	for _, want := range []string{"-skus", "-work", "-down"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
