package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestCloseWaitsForAsyncReleases: Close, called right after ReleaseAsync
// while the nodes are still slow to answer, lets the release reach them
// instead of refusing it: the keys go at once, not at the end of their
// TTL, and done gets the release's result.
func TestCloseWaitsForAsyncReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(time.Second))
		l, err := c.TryAcquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mems {
			m.set(func(m *memNode) { m.delay = 200 * time.Millisecond })
		}
		results := make(chan error, 1)
		(*mechanics)(l).ReleaseAsync(context.Background(), func(err error) { results <- err })
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-results:
			if err != nil {
				t.Fatalf("release: %v", err)
			}
		default:
			t.Fatal("Close returned before the release it was to wait for")
		}
		if n := holders(c, mems, "r", l.token); n != 0 {
			t.Fatalf("%d nodes still hold the released lock after Close", n)
		}
	})
}

// TestReleaseAsyncAfterClose: a release started after Close is answered
// (errClosed) without waiting, as Release is.
func TestReleaseAsyncAfterClose(t *testing.T) {
	c, _ := memClient(t, 3)
	l, err := c.TryAcquire(context.Background(), "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var got error
	(*mechanics)(l).ReleaseAsync(context.Background(), func(err error) { got = err })
	if got == nil {
		t.Fatal("a release after Close reported success, or did not report before returning")
	}
}

// TestReleaseAsyncHandsOverBeforeReturning: with a caller of the same
// Client waiting, ReleaseAsync hands the lock over before it returns, as
// Release does, and reports the hand-over's result first; the waiter gets
// the lock.
func TestReleaseAsyncHandsOverBeforeReturning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3, WithNodeTimeout(time.Second))
		ctx := context.Background()
		l, err := c.Acquire(ctx, "r", time.Minute) // holds the local turn
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			next, err := c.Acquire(ctx, "r", time.Minute)
			if err == nil {
				err = next.Release(ctx)
			}
			got <- err
		}()
		synctest.Wait() // the waiter is queued behind l
		if !l.turn.waited() {
			t.Fatal("no local waiter queued behind the lock")
		}
		reported := false
		(*mechanics)(l).ReleaseAsync(ctx, func(err error) {
			if err != nil {
				t.Errorf("hand-over: %v", err)
			}
			reported = true
		})
		if !reported {
			t.Fatal("ReleaseAsync returned before the hand-over to the waiting caller was made")
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	})
}
