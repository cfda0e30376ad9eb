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
		l.ReleaseAsync(context.Background(), func(err error) { results <- err })
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
// (ErrClosed) without waiting, as Release is.
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
	l.ReleaseAsync(context.Background(), func(err error) { got = err })
	if got == nil {
		t.Fatal("a release after Close reported success, or did not report before returning")
	}
}
