package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestFailedShorterExtendKeepsKeys: an extension to a shorter TTL that does
// not reach a quorum must not have cut the keys on the nodes it reached:
// the holder still counts on its Until.
func TestFailedShorterExtendKeepsKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "r", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mems[1].set(func(m *memNode) { m.delay = 30 * time.Millisecond }) // answers late, but applies
		mems[2].set(func(m *memNode) { m.err = errMemDown })
		until := l.Until()
		if err := l.Extend(context.Background(), time.Second); !errors.Is(err, ErrQuorum) {
			t.Fatalf("Extend: %v, want ErrQuorum", err)
		}
		if !l.Until().Equal(until) {
			t.Fatal("a failed extension moved Until")
		}
		mems[1].set(func(m *memNode) { m.delay = 0 })
		mems[2].set(func(m *memNode) { m.err = nil })
		time.Sleep(1100 * time.Millisecond)
		if got := holders(c, mems, "r", l.Token()); got < 2 {
			t.Fatalf("only %d nodes keep the lock 1.1s after a failed 1s extension, with Until %v ahead", got, time.Until(until))
		}
	})
}
