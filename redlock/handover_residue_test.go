package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestSuccessfulHandOverLeavesNoPredecessorKey (issue 20, finding 1): a
// hand-over round that succeeds on a majority while its call to a slow node
// waits behind a batch past its deadline (and is dropped unsent) must still
// release the predecessor's token there: Release returned nil, so no key of
// that token may outlive one more round. Early (unfenced, 3 nodes) and
// waiting (fenced, 5 nodes: a fence needs 4 carriers) hand-overs alike.
func TestSuccessfulHandOverLeavesNoPredecessorKey(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		opts  []LockOption
	}{
		{"early", 3, nil},
		{"waiting", 5, []LockOption{WithFencing()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, mems := memClient(t, tc.nodes, WithNodeTimeout(50*time.Millisecond))
				holder, err := c.Acquire(context.Background(), "r", time.Minute, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				next := waitFor(context.Background(), c, "r", time.Minute, tc.opts...)
				synctest.Wait()
				mems[0].set(func(m *memNode) { m.delay = 100 * time.Millisecond })
				// Node 0's worker is busy for 100ms with another resource's
				// call: the hand-over's call to it waits past its deadline.
				go func() { _, _ = c.TryAcquire(context.Background(), "other", time.Second) }()
				time.Sleep(time.Millisecond)
				if err := holder.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				got := <-next
				if got.err != nil {
					t.Fatal(got.err)
				}
				time.Sleep(500 * time.Millisecond) // node 0 has run everything queued
				if n := holders(c, mems, "r", holder.Token()); n > 0 {
					t.Fatalf("the released predecessor's token (TTL 1m) is still on %d node(s)", n)
				}
				if n := holders(c, mems, "r", got.l.Token()); n < c.q {
					t.Fatalf("the successor's token is on %d nodes, want a quorum", n)
				}
				if err := got.l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				time.Sleep(500 * time.Millisecond)
				k := c.keysFor("r")
				for i, m := range mems {
					if v, ok := m.get(k.key); ok {
						t.Errorf("node %d still holds %q after both locks were released", i, v)
					}
				}
			})
		})
	}
}

// TestLostEarlySuccessorFreesThePredecessorAtItsEnd (issue 20, suspicion
// 7): an early successor whose round failed on two of three nodes (its call
// dropped there, then the resend failed) keeps the predecessor's token
// there; it cannot extend, so it is lost, and its owner never releases it.
// The predecessor's token (TTL 1m) must go once the successor's validity
// has ended, not at its own TTL.
func TestLostEarlySuccessorFreesThePredecessorAtItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(50*time.Millisecond))
		holder, successor := droppedEarlyHandOver(t, c, mems, time.Second)
		kctx, stop := successor.KeepAlive(context.Background())
		defer stop()
		<-kctx.Done()
		if !errors.Is(context.Cause(kctx), ErrLockLost) {
			t.Fatalf("successor ended with %v, want a loss", context.Cause(kctx))
		}
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.err, m.delay = nil, 0 })
		}
		if n := holders(c, mems, "r", holder.Token()); n == 0 {
			t.Fatal("the predecessor's token was not left behind: the case is not forced")
		}
		time.Sleep(2 * time.Second) // well past the successor's validity
		if n := holders(c, mems, "r", holder.Token()); n > 0 {
			t.Fatalf("the predecessor's token (TTL 1m) is still on %d nodes after its lost successor's validity ended", n)
		}
	})
}

// TestLeftEarlySuccessorKeepsTheResourceToItsEnd: an early successor whose
// round was dropped on two of three nodes holds the resource there through
// the predecessor's token. Left to expire, it must keep the resource held
// until its validity ends: another process acquires only after Until.
func TestLeftEarlySuccessorKeepsTheResourceToItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(50*time.Millisecond))
		other := memClientOn(t, mems, WithNodeTimeout(50*time.Millisecond))
		holder, successor := droppedEarlyHandOver(t, c, mems, 30*time.Second)
		time.Sleep(200 * time.Millisecond)
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.err, m.delay = nil, 0 })
		}
		if n := holders(c, mems, "r", holder.Token()); n < 2 {
			t.Fatalf("the predecessor's token is on %d nodes: the case is not forced", n)
		}
		until := successor.Until()
		if err := (*mechanics)(successor).LeaveToExpire(); err != nil {
			t.Fatal(err)
		}
		for {
			l, err := other.TryAcquire(context.Background(), "r", time.Second)
			if err == nil {
				if early := time.Until(until); early > 0 {
					t.Fatalf("another process acquired the resource %v before the left lock's validity ended", early)
				}
				_ = l.Release(context.Background())
				return
			}
			if time.Now().After(until.Add(2 * time.Minute)) {
				t.Fatalf("the resource is still held 2m after the left lock's validity: %v", err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}

// droppedEarlyHandOver is delayedEarlyHandOver whose resend fails on nodes
// 0 and 1 too: the successor holds those two nodes only through the
// predecessor's token. Nodes 0 and 1 are left down; the caller brings them
// back.
func droppedEarlyHandOver(t *testing.T, c *Client, mems []*memNode, ttl time.Duration) (holder, successor *Lock) {
	t.Helper()
	holder, successor = delayedEarlyHandOver(t, c, mems, ttl)
	for _, m := range mems[:2] {
		m.set(func(m *memNode) { m.err = errMemDown }) // the resend fails too
	}
	return holder, successor
}

// delayedEarlyHandOver hands "r" (held with a 1m TTL) over early to a
// waiter of ttl whose round misses its deadline on nodes 0 and 1 (their
// workers busy past it, each call there delayed 100ms until the caller
// sets the delay back).
func delayedEarlyHandOver(t *testing.T, c *Client, mems []*memNode, ttl time.Duration) (holder, successor *Lock) {
	t.Helper()
	holder, err := c.Acquire(context.Background(), "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next := waitFor(context.Background(), c, "r", ttl)
	synctest.Wait()
	for _, m := range mems[:2] {
		m.set(func(m *memNode) { m.delay = 100 * time.Millisecond })
	}
	go func() { _, _ = c.TryAcquire(context.Background(), "other", time.Second) }() // nodes 0 and 1 busy
	time.Sleep(time.Millisecond)
	go func() { _ = holder.Release(context.Background()) }()
	got := <-next
	if got.err != nil {
		t.Fatal(got.err)
	}
	return holder, got.l
}
