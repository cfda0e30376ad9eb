package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestInspectWaitsForEveryNode: one failing node does not hide the others.
func TestInspectWaitsForEveryNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mems[0].set(func(m *memNode) { m.err = errMemDown })
		mems[1].set(func(m *memNode) { m.delay = time.Millisecond })
		mems[2].set(func(m *memNode) { m.delay = time.Millisecond })
		st, err := c.Inspect(context.Background(), "r")
		if err != nil {
			t.Fatal(err)
		}
		if st[0].Err == nil {
			t.Fatal("failing node has no error")
		}
		for _, s := range st[1:] {
			if s.Err != nil || s.Token != l.Token() {
				t.Fatalf("node %d reported %+v", s.Node, s)
			}
		}
	})
}
