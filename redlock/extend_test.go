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

// TestExtendRaisesNeverShortens: as its doc says, Extend gives keys with
// less than ttl left ttl, leaves longer ones as they are, and never moves
// Until back; a longer ttl moves it later.
func TestExtendRaisesNeverShortens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "r", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		until := l.Until()
		if err := l.Extend(context.Background(), time.Second); err != nil {
			t.Fatalf("Extend to a shorter TTL: %v", err)
		}
		if !l.Until().Equal(until) {
			t.Fatalf("a shorter extension moved Until by %v", l.Until().Sub(until))
		}
		time.Sleep(1100 * time.Millisecond)
		if got := holders(c, mems, "r", l.Token()); got != 3 {
			t.Fatalf("%d of 3 nodes keep the lock 1.1s after a 1s extension of a 10s one", got)
		}
		if err := l.Extend(context.Background(), 20*time.Second); err != nil {
			t.Fatalf("Extend to a longer TTL: %v", err)
		}
		if !l.Until().After(until) {
			t.Fatal("a longer extension did not move Until later")
		}
		time.Sleep(15 * time.Second)
		if got := holders(c, mems, "r", l.Token()); got != 3 {
			t.Fatalf("%d of 3 nodes keep the lock 15s after a 20s extension", got)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
