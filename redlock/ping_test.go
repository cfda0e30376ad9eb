package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A probe must count the nodes that are up even when the failures decided
// the outcome first: three nodes fail at once, two answer later.
func TestPingCountsNodesThatAnswerAfterTheOutcomeIsDecided(t *testing.T) {
	c, mems := memClient(t, 5, WithNodeTimeout(2*time.Second))
	for _, m := range mems[:3] {
		m.set(func(m *memNode) { m.err = errMemDown })
	}
	for _, m := range mems[3:] {
		m.set(func(m *memNode) { m.delay = 50 * time.Millisecond })
	}
	st, err := c.Admin().Ping(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		var ne *NodeError
		down := errors.As(s.Err, &ne) && errors.Is(s.Err, errMemDown) && ne.Node == i
		if down != (i < 3) || s.Node != i {
			t.Errorf("node %d: %+v (err %v), want down=%v", i, s, s.Err, i < 3)
		}
	}
}
