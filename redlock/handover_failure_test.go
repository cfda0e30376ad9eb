package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestReleaseContextEndingMidHandOverPassesTheTurn: a fenced hand-over waits
// for its round; when Release's context ends first, the round still decides
// for the claimed waiter, which gets the lock, and the waiter behind it gets
// it only when that one releases (not when a stranded lock expires).
func TestReleaseContextEndingMidHandOverPassesTheTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(50*time.Millisecond))
		holder, err := c.Acquire(context.Background(), "r", time.Second, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		second := waitFor(context.Background(), c, "r", time.Second, WithFencing())
		synctest.Wait()
		third := waitFor(context.Background(), c, "r", time.Second, WithFencing())
		synctest.Wait()
		for _, m := range mems {
			m.set(func(m *memNode) { m.delay = 10 * time.Millisecond })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		defer cancel()
		_ = holder.Release(ctx)
		var got acquired
		select {
		case got = <-second:
		case g := <-third:
			t.Fatalf("the third waiter went first (err %v)", g.err)
		case <-time.After(10 * time.Second):
			t.Fatal("the claimed waiter never got the lock")
		}
		if got.err != nil || got.l.Fence() <= holder.Fence() {
			t.Fatalf("claimed waiter: err %v, fence %d after %d", got.err, got.l.Fence(), holder.Fence())
		}
		synctest.Wait()
		select {
		case g := <-third:
			t.Fatalf("the third waiter got the lock while the second held it (err %v)", g.err)
		default:
		}
		released := time.Now()
		if err := got.l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		g := <-third
		if g.err != nil || g.at.Sub(released) > 200*time.Millisecond {
			t.Fatalf("third waiter: err %v, %v after the release (a stranded lock lasts 1s)", g.err, g.at.Sub(released))
		}
		_ = g.l.Release(context.Background())
	})
}

// TestEarlySuccessorReleasedBeforeItsRoundFailsFreesThePredecessor: the
// successor of an early hand-over finishes before its round times out on a
// majority; the predecessor's token left there is released when the round
// fails, not left for its whole TTL.
func TestEarlySuccessorReleasedBeforeItsRoundFailsFreesThePredecessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(50*time.Millisecond))
		holder, successor := delayedEarlyHandOver(t, c, mems, time.Second)
		_ = successor.Release(context.Background()) // a quick task
		time.Sleep(500 * time.Millisecond)
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.delay = 0 })
		}
		time.Sleep(500 * time.Millisecond)
		if n := holders(c, mems, "r", holder.Token()); n > 0 {
			t.Fatalf("the predecessor's token (TTL 1m) is still on %d nodes after both locks were released", n)
		}
	})
}

// TestWaiterGoneDuringAFailedHandOverLeavesTheQueue: a fenced hand-over
// refused because a waiter of another process is ahead queues the claimed
// waiter on the nodes; when that waiter gives up meanwhile, its entry goes
// at once, not after its lease.
func TestWaiterGoneDuringAFailedHandOverLeavesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := []Option{WithNodeTimeout(50 * time.Millisecond), WithRetryDelay(5*time.Millisecond, 20*time.Millisecond)}
		a, mems := memClient(t, 3, opts...)
		holder, err := a.Acquire(context.Background(), "r", time.Minute, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		remote := waitFor(context.Background(), memClientOn(t, mems, opts...), "r", time.Minute, WithFencing())
		time.Sleep(50 * time.Millisecond) // the remote waiter is queued on the nodes
		ctx, cancel := context.WithCancel(context.Background())
		local := waitFor(ctx, a, "r", time.Minute, WithFencing())
		synctest.Wait()
		for _, m := range mems {
			m.set(func(m *memNode) { m.delay = 10 * time.Millisecond })
		}
		go func() { _ = holder.Release(context.Background()) }()
		time.Sleep(5 * time.Millisecond) // the hand-over round is on the wire
		cancel()
		if got := <-local; got.err == nil {
			t.Fatal("the local waiter got the lock ahead of the remote one")
		}
		got := <-remote
		if got.err != nil {
			t.Fatal(got.err)
		}
		for _, m := range mems {
			m.set(func(m *memNode) { m.delay = 0 })
		}
		time.Sleep(100 * time.Millisecond) // well inside the 500ms lease
		k := a.keysFor("r")
		for i, m := range mems {
			m.mu.Lock()
			z := m.zsets[k.key+":q"]
			left := z != nil && len(z.m) > 0 && time.Now().Before(z.exp)
			m.mu.Unlock()
			if left {
				t.Fatalf("node %d: a waiter entry is left after every waiter left or won", i)
			}
		}
		_ = got.l.Release(context.Background())
	})
}

// TestRoundFailingAfterItsSuccessorReleasedKeepsOthersOut: an early
// successor is released while its round is out and the round then fails
// (two of three nodes answer past the node timeout, for several delays).
// The next local waiter gets the lock by a round that respects safety
// (waiting mode); while it holds, another client never gets in; afterwards
// no token and no queue entry is left on any node.
func TestRoundFailingAfterItsSuccessorReleasedKeepsOthersOut(t *testing.T) {
	for _, d := range []time.Duration{30 * time.Millisecond, 60 * time.Millisecond, 200 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			opts := []Option{WithNodeTimeout(50 * time.Millisecond), WithRetryDelay(5*time.Millisecond, 50*time.Millisecond)}
			a, mems := memClient(t, 3, opts...)
			other := memClientOn(t, mems, opts...)
			l, err := a.Acquire(context.Background(), "r", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			first := waitFor(context.Background(), a, "r", time.Minute)
			synctest.Wait()
			second := waitFor(context.Background(), a, "r", time.Minute)
			synctest.Wait()
			for _, m := range mems[:2] {
				m.set(func(m *memNode) { m.delay = d })
			}
			go func() { _ = l.Release(context.Background()) }()
			got := <-first
			if got.err != nil {
				t.Fatal(got.err)
			}
			time.Sleep(time.Millisecond)
			go func() { _ = got.l.Release(context.Background()) }()
			time.Sleep(80 * time.Millisecond)
			for _, m := range mems[:2] {
				m.set(func(m *memNode) { m.delay = 0 })
			}
			n := <-second
			if n.err != nil {
				t.Fatalf("delay %v: next waiter: %v", d, n.err)
			}
			for range 20 {
				if x, err := other.TryAcquire(context.Background(), "r", time.Minute); err == nil {
					_ = x.Release(context.Background())
					t.Fatalf("delay %v: another client got the lock while the next waiter held it", d)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := n.l.Release(context.Background()); err != nil {
				t.Fatalf("delay %v: release: %v", d, err)
			}
			time.Sleep(time.Second)
			k := a.keysFor("r")
			for i, m := range mems {
				if v, ok := m.get(k.key); ok {
					t.Errorf("delay %v: node %d still holds %q", d, i, v)
				}
				if q := m.zset(k.key+":q", false); q != nil && len(q.m) > 0 {
					t.Errorf("delay %v: node %d still queues %v", d, i, q.m)
				}
			}
		})
	}
}
