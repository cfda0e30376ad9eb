package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestKeepAliveExtendsUntilMajorityLost holds a lock for many TTLs through
// keep-alive, then takes three of five nodes down: the holder's context must
// be cancelled with cause ErrLockLost, and Lost() closed, no later than the
// last validity reported by Until.
func TestKeepAliveExtendsUntilMajorityLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		c, mems := memClient(t, 5, WithNodeTimeout(20*time.Millisecond))
		l, err := c.Acquire(context.Background(), "job", ttl)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := l.KeepAlive(context.Background())
		defer cancel()

		time.Sleep(10 * ttl)
		if ctx.Err() != nil {
			t.Fatalf("keep-alive context ended while all nodes were up: %v", context.Cause(ctx))
		}
		if n := mems[0].count("extend"); n < 25 || n > 32 {
			t.Fatalf("%d extensions in 10 TTLs, want about one per ttl/3 (30)", n)
		}
		if left := time.Until(l.Until()); left < ttl-ttl/3-driftAllowance(ttl, defaultDriftFactor) {
			t.Fatalf("validity left %v after 10 TTLs: not extended in time", left)
		}
		if got := holders(c, mems, "job", l.Token()); got != 5 {
			t.Fatalf("%d nodes hold the lock, want 5", got)
		}

		for _, m := range mems[:3] {
			m.set(func(m *memNode) { m.err = errMemDown })
		}
		<-ctx.Done()
		lostAt := time.Now()
		// An extension may have been in flight when the nodes went down;
		// Until no longer moves once the lock is lost.
		lastUntil := l.Until()
		if cause := context.Cause(ctx); !errors.Is(cause, ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}
		if lostAt.After(lastUntil) {
			t.Fatalf("loss signalled %v after Until", lostAt.Sub(lastUntil))
		}
		if lastUntil.Sub(lostAt) > ttl/2 {
			t.Fatalf("loss signalled %v before Until: too early", lastUntil.Sub(lostAt))
		}
		select {
		case <-l.Lost():
		default:
			t.Fatal("Lost() not closed at the loss")
		}
		if err := l.Extend(context.Background(), ttl); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Extend after loss: %v, want ErrLockLost", err)
		}
		if err := l.Release(context.Background()); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Release after loss: %v, want ErrLockLost", err)
		}
		_ = start
	})
}

// TestKeepAliveStopsOnRelease: releasing ends keep-alive cleanly, without a
// loss signal and without further extensions.
func TestKeepAliveStopsOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "job", ttl)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := l.KeepAlive(context.Background())
		defer cancel()
		time.Sleep(ttl)
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ctx.Err() == nil {
			t.Fatal("keep-alive context still live after Release")
		}
		if cause := context.Cause(ctx); errors.Is(cause, ErrLockLost) {
			t.Fatalf("release reported as a loss: %v", cause)
		}
		n := mems[0].count("extend")
		time.Sleep(3 * ttl)
		if m := mems[0].count("extend"); m != n {
			t.Fatalf("%d extensions after release", m-n)
		}
		select {
		case <-l.Lost():
			t.Fatal("Lost() closed by a release")
		default:
		}
		if holders(c, mems, "job", l.Token()) != 0 {
			t.Fatal("keys left after release")
		}
		if err := l.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Release: %v, want ErrNotHeld", err)
		}
	})
}

// TestLockLostWithoutKeepAlive: Lost() closes when validity runs out even if
// nobody keeps the lock alive.
func TestLockLostWithoutKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "job", 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		<-l.Lost()
		if time.Now().After(l.Until()) {
			t.Fatal("Lost() closed after Until")
		}
		time.Sleep(time.Second)
		// Extending an expired lock never re-creates it.
		if err := l.Extend(context.Background(), time.Second); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Extend of expired lock: %v, want ErrLockLost", err)
		}
		if holders(c, mems, "job", l.Token()) != 0 {
			t.Fatal("an extension re-created an expired lock")
		}
	})
}

// TestExtendFindsKeysGone: when a majority of nodes lost the key (data wiped),
// Extend reports the loss at once instead of waiting for Until.
func TestExtendFindsKeysGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 5, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "job", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // every node has answered the acquire
		k := c.keysFor("job")
		for _, m := range mems[:3] {
			m.set(func(m *memNode) { delete(m.data, k.key) })
		}
		err = l.Extend(context.Background(), 10*time.Second)
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("Extend with keys gone on 3 of 5: %v, want ErrLockLost", err)
		}
		select {
		case <-l.Lost():
		default:
			t.Fatal("Lost() not closed")
		}
	})
}

// TestExtendWithMinorityDownKeepsLock: two failed nodes out of five do not
// stop an extension; three make it fail with ErrQuorum while the lock stays
// held until its validity ends.
func TestExtendWithMinorityDownKeepsLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 5, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "job", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		mems[0].set(func(m *memNode) { m.err = errMemDown })
		mems[1].set(func(m *memNode) { m.hang = true })
		before := l.Until()
		time.Sleep(time.Second)
		if err := l.Extend(context.Background(), 2*time.Second); err != nil {
			t.Fatalf("Extend with 2 of 5 down: %v", err)
		}
		if !l.Until().After(before) {
			t.Fatal("Until did not move")
		}
		mems[2].set(func(m *memNode) { m.err = errMemDown })
		err = l.Extend(context.Background(), 2*time.Second)
		if !errors.Is(err, ErrQuorum) || errors.Is(err, ErrLockLost) {
			t.Fatalf("Extend with 3 of 5 down: %v, want ErrQuorum only", err)
		}
		var ne *NodeError
		if !errors.As(err, &ne) || ne.Op != "extend" {
			t.Fatalf("no *NodeError in %v", err)
		}
		select {
		case <-l.Lost():
			t.Fatal("lock declared lost while still valid")
		default:
		}
	})
}
