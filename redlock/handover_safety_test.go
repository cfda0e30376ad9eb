package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestEarlySuccessorKeepsExclusivityWhenItsRoundTimesOut: a successor that
// started at once (early hand-over) keeps its lock when the hand-over round
// misses its node timeout on a majority (slow nodes, a loaded machine): its
// handler may already be running, so nobody else may get the resource
// before the validity it was given ends. The slow nodes still run the round,
// so the successor's keys are there and it can extend.
func TestEarlySuccessorKeepsExclusivityWhenItsRoundTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		opts := []Option{WithNodeTimeout(50 * time.Millisecond), WithRetryDelay(5*time.Millisecond, 20*time.Millisecond)}
		a, mems := memClient(t, 3, opts...)
		other := memClientOn(t, mems, opts...)
		holder, err := a.Acquire(context.Background(), "r", ttl)
		if err != nil {
			t.Fatal(err)
		}
		next := waitFor(context.Background(), a, "r", ttl)
		synctest.Wait()
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.delay = 100 * time.Millisecond })
		}
		go func() { _ = holder.Release(context.Background()) }()
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		until := got.l.Until()
		// Another process waits for the resource while the round is out.
		rival := waitFor(context.Background(), other, "r", ttl)
		time.Sleep(200 * time.Millisecond) // the round timed out; the slow nodes ran it since
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.delay = 0 })
		}
		time.Sleep(300 * time.Millisecond) // well within the successor's validity
		select {
		case r := <-rival:
			if r.err == nil && r.at.Before(until) {
				t.Fatalf("another process got the lock %v before the successor's validity ended", until.Sub(r.at))
			}
			t.Fatalf("rival returned early: %v", r.err)
		default:
		}
		select {
		case <-got.l.Lost():
			t.Fatalf("successor declared lost %v before its validity ended: %v", time.Until(until), got.l.cause)
		default:
		}
		if err := got.l.Extend(context.Background(), ttl); err != nil {
			t.Fatalf("successor cannot extend although its token is on every node: %v", err)
		}
		if err := got.l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		r := <-rival
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.l.Release(context.Background())
	})
}

// TestFailedEarlyHandOverLeavesNoKeyBehind: the predecessor's token, left
// on the nodes a failed early hand-over did not reach, is released with the
// successor's lock, not left to its (longer) TTL.
func TestFailedEarlyHandOverLeavesNoKeyBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		holder, err := c.Acquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		next := waitFor(context.Background(), c, "r", time.Second)
		synctest.Wait()
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.err = errMemDown })
		}
		go func() { _ = holder.Release(context.Background()) }()
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		<-got.l.Lost() // it could not extend with 2 of 3 nodes down
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.err = nil })
		}
		if n := holders(c, mems, "r", holder.Token()); n != 2 {
			t.Fatalf("predecessor's token on %d nodes, want the 2 the round missed", n)
		}
		_ = got.l.Release(context.Background())
		time.Sleep(100 * time.Millisecond)
		if n := holders(c, mems, "r", holder.Token()) + holders(c, mems, "r", got.l.Token()); n != 0 {
			t.Fatalf("%d keys left after the successor's release", n)
		}
	})
}

// TestFailedEarlyHandOverIsRetriedWhereItWasDropped: a node that dropped
// the hand-over call (it waited past its deadline behind a slow batch)
// still holds the predecessor's token; the round is sent there again, so
// the successor, which may be running, can extend instead of being declared
// lost (its task then retried, a write applied twice).
func TestFailedEarlyHandOverIsRetriedWhereItWasDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		c, mems := memClient(t, 3, WithNodeTimeout(50*time.Millisecond))
		holder, err := c.Acquire(context.Background(), "r", ttl)
		if err != nil {
			t.Fatal(err)
		}
		next := waitFor(context.Background(), c, "r", ttl)
		synctest.Wait()
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.delay = 100 * time.Millisecond })
		}
		go func() { _, _ = c.TryAcquire(context.Background(), "other", ttl) }() // keeps nodes 0 and 1 busy
		time.Sleep(time.Millisecond)
		go func() { _ = holder.Release(context.Background()) }()
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		time.Sleep(250 * time.Millisecond)
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.delay = 0 })
		}
		if err := got.l.Extend(context.Background(), ttl); err != nil {
			t.Fatalf("successor cannot extend: %v", err)
		}
		if n := holders(c, mems, "r", got.l.Token()); n != 3 {
			t.Fatalf("successor's token on %d nodes, want 3", n)
		}
		k := c.keysFor("r")
		for i, m := range mems {
			m.mu.Lock()
			z := m.zsets[k.key+":q"]
			left := z != nil && len(z.m) > 0 && time.Now().Before(z.exp)
			m.mu.Unlock()
			if left {
				t.Fatalf("node %d: waiter entries left", i)
			}
		}
		_ = got.l.Release(context.Background())
	})
}
