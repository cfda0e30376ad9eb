package redlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// batchCounts returns how many batches each in-memory node ran.
func batchCounts(mems []*memNode) []int {
	out := make([]int, len(mems))
	for i, m := range mems {
		m.set(func(m *memNode) { out[i] = m.batches })
	}
	return out
}

// acquireRelease takes and gives back a lock on resource.
func acquireRelease(t *testing.T, c *Client, resource string) {
	t.Helper()
	l, err := c.TryAcquire(context.Background(), resource, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestBatchWindowNeverDelaysALoneCaller: a lone caller does not wait, alone
// or beside locks held by handlers that do nothing on the nodes, and neither
// does a lone lock's extension.
func TestBatchWindowNeverDelaysALoneCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 5, withBatchWindow(10*time.Millisecond))
		start := time.Now()
		for range 3 {
			acquireRelease(t, c, "lone")
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("three lone acquire+release took %v of virtual time, want 0", d)
		}
		held := acquireTogether(t, c, mems, 3) // calls overlapped once, long ago below
		time.Sleep(time.Second)
		start = time.Now()
		if err := held[0].Extend(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		acquireRelease(t, c, "other")
		if d := time.Since(start); d != 0 {
			t.Fatalf("an extension and an acquire+release beside 3 idle holders took %v, want 0", d)
		}
	})
}

func TestBatchWindowGathersCallsOfConcurrentHolders(t *testing.T) {
	const window = 10 * time.Millisecond
	for _, w := range []time.Duration{window, 0} {
		t.Run("window="+w.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { gatherBesideHolders(t, w) })
		})
	}
}

// acquireTogether acquires n locks so that calls overlap on the nodes, as
// they do under load: while every node takes a millisecond over the first
// acquisition, the n-1 others queue up and share the next batch.
func acquireTogether(t *testing.T, c *Client, mems []*memNode, n int) []*Lock {
	t.Helper()
	for _, m := range mems {
		m.set(func(m *memNode) { m.delay = time.Millisecond })
	}
	held := make([]*Lock, n)
	var wg sync.WaitGroup
	acquire := func(i int) {
		wg.Go(func() {
			l, err := c.TryAcquire(context.Background(), "held-"+strconv.Itoa(i), time.Minute)
			if err != nil {
				t.Error(err)
			}
			held[i] = l
		})
	}
	acquire(0)
	synctest.Wait() // the first batch is on the nodes
	for i := 1; i < n; i++ {
		acquire(i)
	}
	wg.Wait()
	for _, m := range mems {
		m.set(func(m *memNode) { m.delay = 0 })
	}
	if t.Failed() {
		t.FailNow()
	}
	return held
}

// gatherBesideHolders acquires one lock while four holders release theirs
// half a window later. With a window the acquire waits for them and shares
// their pipeline; without one it is sent at once.
func gatherBesideHolders(t *testing.T, window time.Duration) {
	const later = 5 * time.Millisecond
	c, mems := memClient(t, 5, withBatchWindow(window))
	ctx := context.Background()
	held := acquireTogether(t, c, mems, 4)
	before := batchCounts(mems)
	start := time.Now()
	var wg sync.WaitGroup
	for _, l := range held {
		wg.Go(func() {
			time.Sleep(later)
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	var answered time.Duration
	wg.Go(func() {
		l, err := c.TryAcquire(ctx, "new", time.Minute)
		if err != nil {
			t.Error(err)
			return
		}
		answered = time.Since(start)
		_ = l.Release(ctx)
	})
	wg.Wait()
	got := batchCounts(mems)
	for i := range got {
		got[i] -= before[i]
	}
	if window == 0 {
		if answered != 0 {
			t.Fatalf("without a window the acquire answered after %v, want at once", answered)
		}
		return
	}
	if answered != later {
		t.Fatalf("acquire beside 4 holders answered after %v, want %v: held back until their releases came", answered, later)
	}
	for i, n := range got {
		// 6 calls per node: the acquire, 4 releases, the new lock's release.
		if n > 3 {
			t.Fatalf("node %d ran %d batches for 6 calls (all nodes: %v): the window did not gather them", i, n, got)
		}
	}
	if d := time.Since(start); d > later+window {
		t.Fatalf("took %v, more than one window (%v) past the releases", d, window)
	}
}

// TestBusyCountSettles checks that every operation leaves the busy count as
// it found it: a leak would hold every later batch back a window.
func TestBusyCountSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 5)
		ctx := context.Background()
		check := func(step string) {
			t.Helper()
			synctest.Wait()
			if n := c.busy.Load(); n != 0 {
				t.Fatalf("after %s: busy = %d, want 0", step, n)
			}
		}
		l, err := c.TryAcquire(ctx, "r", time.Second, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Inspect(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		check("acquire, extend, inspect, release")

		// A split vote: two nodes hold the key for someone else, a third
		// fails, so the attempt is undone on the two that granted it.
		k := c.keysFor("split")
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.data[k.key] = memEntry{val: "other"} })
		}
		mems[2].set(func(m *memNode) { m.err = errMemDown })
		if _, err := c.TryAcquire(ctx, "split", time.Second); err == nil {
			t.Fatal("acquired without a majority")
		}
		mems[2].set(func(m *memNode) { m.err = nil })
		check("a lost vote and its undo")

		l, err = c.TryAcquire(ctx, "expire", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		<-l.Lost()
		check("a loss")
		if err := l.Release(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("release after loss: %v, want ErrLockLost", err)
		}
		check("a release after the loss")
		if _, err := c.Admin().Ping(ctx); err != nil {
			t.Fatal(err)
		}
		check("ping")
	})
}
