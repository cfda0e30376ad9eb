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

// TestHolderWithBareMajorityIsNotASplit: a holder whose key is missing on
// one node still has a majority; waiters must back off with the retry
// delay, not hammer the nodes as after a split vote.
func TestHolderWithBareMajorityIsNotASplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(10*time.Millisecond), WithRetryDelay(25*time.Millisecond, 100*time.Millisecond))
		if _, err := c.TryAcquire(context.Background(), "r", time.Minute); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		k := c.keysFor("r")
		mems[0].set(func(m *memNode) { delete(m.data, k.key) })
		_, err := c.TryAcquire(context.Background(), "r", time.Minute)
		var oe *opError
		if !errors.As(err, &oe) || oe.split {
			t.Fatalf("1 set and 2 held by another classified as a split: %v", err)
		}
	})
}

// TestQueuedWaiterEndsOnClose: a caller queued behind another caller of the
// same client gets ErrClosed when the client closes.
func TestQueuedWaiterEndsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3, WithNodeTimeout(10*time.Millisecond))
		if _, err := c.Acquire(context.Background(), "r", time.Minute); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := c.Acquire(context.Background(), "r", time.Minute)
			got <- err
		}()
		synctest.Wait()
		start := time.Now()
		_ = c.Close()
		if err := <-got; !errors.Is(err, ErrClosed) {
			t.Fatalf("queued waiter: %v, want ErrClosed", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("queued waiter returned %v after Close", d)
		}
	})
}

// TestRunReleasesOnPanic: a panicking fn does not keep the lock.
func TestRunReleasesOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(10*time.Millisecond))
		var token string
		func() {
			defer func() {
				if recover() == nil {
					t.Error("panic swallowed")
				}
			}()
			_ = c.Run(context.Background(), "r", time.Minute, func(ctx context.Context) error {
				st, _ := c.Inspect(ctx, "r")
				token = st[0].Token
				panic("bug")
			})
		}()
		synctest.Wait()
		if token == "" || holders(c, mems, "r", token) != 0 {
			t.Fatalf("lock %q still held after fn panicked", token)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "r", time.Minute)
		if err != nil {
			t.Fatalf("local queue stuck after the panic: %v", err)
		}
		_ = l.Release(context.Background())
	})
}

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

// TestReleaseReportsLockTakenOver: when fewer than a majority of nodes still
// hold the token at release (their data was lost), Release says the lock
// was lost instead of reporting a clean release.
func TestReleaseReportsLockTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		k := c.keysFor("r")
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { delete(m.data, k.key) })
		}
		if err := l.Release(context.Background()); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Release: %v, want ErrLockLost", err)
		}
	})
}

// TestSplitDelaySpreadsOverTheAttempt: after a split vote that lasted a
// node timeout, the retry is spread over about that long.
func TestSplitDelaySpreadsOverTheAttempt(t *testing.T) {
	c, _ := memClient(t, 3)
	var longest time.Duration
	for range 200 {
		d := c.splitDelay(50 * time.Millisecond)
		if d > 100*time.Millisecond {
			t.Fatalf("split delay %v beyond twice the attempt", d)
		}
		longest = max(longest, d)
	}
	if longest < 50*time.Millisecond {
		t.Fatalf("split delays never exceeded %v after a 50ms attempt", longest)
	}
	if d := c.splitDelay(0); d > 5*time.Millisecond {
		t.Fatalf("split delay %v after an instant attempt", d)
	}
}
