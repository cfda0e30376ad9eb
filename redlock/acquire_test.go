package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestAcquireReturnsContextErrorWrappingCause: Acquire waits until its
// context ends, then returns the context's error with the last cause.
func TestAcquireReturnsContextErrorWrappingCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3, WithNodeTimeout(10*time.Millisecond))
		held, err := c.TryAcquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err = c.Acquire(ctx, "r", time.Minute)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrLocked) {
			t.Fatalf("got %v, want DeadlineExceeded wrapping ErrLocked", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("waited %v, want the context's 1s", waited)
		}
		// A cancelled context is returned as itself.
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel()
		if _, err := c.Acquire(cctx, "r", time.Minute); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
}

// TestAcquireAfterExpiry: a holder that never releases blocks waiters only
// until its keys expire; the retry fallback then gets the lock.
func TestAcquireAfterExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3, WithNodeTimeout(10*time.Millisecond), WithRetryDelay(20*time.Millisecond, 40*time.Millisecond))
		if _, err := c.TryAcquire(context.Background(), "r", 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := c.Acquire(context.Background(), "r", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		waited := time.Since(start)
		if waited < 500*time.Millisecond || waited > 500*time.Millisecond+40*time.Millisecond+10*time.Millisecond {
			t.Fatalf("waited %v for a 500ms lock to expire", waited)
		}
		_ = l.Release(context.Background())
	})
}

// TestLocalQueueIsFIFO: waiters of one Client on one resource get the lock
// in the order they asked, each as soon as the previous holder releases.
func TestLocalQueueIsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3, WithNodeTimeout(10*time.Millisecond))
		first, err := c.Acquire(context.Background(), "hot", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.Acquire(context.Background(), "hot", time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}()
			synctest.Wait() // goroutine i is queued before i+1 starts
		}
		start := time.Now()
		if err := first.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, v := range order {
			if v != i {
				t.Fatalf("grant order %v, want FIFO", order)
			}
		}
		// Five holders of 10ms each, handed over without retry sleeps.
		if took := time.Since(start); took != 50*time.Millisecond {
			t.Fatalf("hand-offs took %v, want 50ms (no retry delay)", took)
		}
	})
}

// TestLocalQueueMovesOnWhenHolderLosesLock: a holder that neither releases
// nor extends passes its turn when its validity ends.
func TestLocalQueueMovesOnWhenHolderLosesLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3, WithNodeTimeout(10*time.Millisecond), WithRetryDelay(5*time.Millisecond, 10*time.Millisecond))
		if _, err := c.Acquire(context.Background(), "hot", 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "hot", time.Second)
		if err != nil {
			t.Fatalf("waiter stuck behind an abandoned lock: %v", err)
		}
		_ = l.Release(context.Background())
	})
}

// TestLateSuccessIsReleased: two nodes answer after the node timeout but do
// set the key; the attempt fails, and the late keys are removed.
func TestLateSuccessIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nt = 20 * time.Millisecond
		c, mems := memClient(t, 5, WithNodeTimeout(nt))
		k := c.keysFor("r")
		mems[0].data[k.key] = memEntry{val: "other", exp: time.Now().Add(time.Hour)}
		mems[1].data[k.key] = memEntry{val: "other", exp: time.Now().Add(time.Hour)}
		mems[3].delay = nt + nt/2
		mems[4].delay = nt + nt/2
		_, err := c.TryAcquire(context.Background(), "r", time.Minute)
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("got %v, want ErrLocked", err)
		}
		synctest.Wait()
		time.Sleep(2 * nt)
		synctest.Wait()
		for i, m := range mems {
			if v, ok := m.get(k.key); ok && v != "other" {
				t.Fatalf("node %d kept a late key %q of the failed attempt", i, v)
			}
		}
		if mems[3].count("set") != 1 {
			t.Fatal("the slow node never received the SET: test does not exercise a late success")
		}
	})
}

// TestReleaseWaitsOnlyForQuorum: a hung node does not delay Release.
func TestReleaseWaitsOnlyForQuorum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 5, WithNodeTimeout(50*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "r", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		mems[4].set(func(m *memNode) { m.hang = true })
		start := time.Now()
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("release took %v with one node hung", d)
		}
	})
}

// TestObserverSeesEvents: acquisitions (with their outcome), extensions,
// losses and node errors reach the observer.
func TestObserverSeesEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		kinds := map[EventKind]int{}
		var outcomes []string
		obs := func(e Event) {
			mu.Lock()
			kinds[e.Kind]++
			if e.Kind == EventAcquire {
				outcomes = append(outcomes, e.Outcome)
			}
			mu.Unlock()
		}
		c, mems := memClient(t, 3, WithNodeTimeout(10*time.Millisecond), WithObserver(obs))
		mems[2].set(func(m *memNode) { m.err = errMemDown })
		l, err := c.TryAcquire(context.Background(), "r", 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(context.Background(), 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(context.Background(), "r", 200*time.Millisecond); !errors.Is(err, ErrLocked) {
			t.Fatalf("second TryAcquire: %v, want ErrLocked", err)
		}
		<-l.Lost()
		_ = l.Release(context.Background())
		// The loss is reported after Lost() closes, from the watchdog.
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []EventKind{EventAcquire, EventExtend, EventLost, EventNodeError} {
			if kinds[k] == 0 {
				t.Errorf("no %v event (got %v)", k, kinds)
			}
		}
		if !slices.Equal(outcomes, []string{"acquired", "locked"}) {
			t.Errorf("acquire events' outcomes %q, want acquired then locked", outcomes)
		}
	})
}

// TestAcquireQueuedLocallyReportsLocked: a caller that times out while
// queued behind another caller of the same client learns the resource was
// locked, not only that its context ended.
func TestAcquireQueuedLocallyReportsLocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3, WithNodeTimeout(10*time.Millisecond))
		held, err := c.Acquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		waiting := make(chan struct{})
		go func() { // the head of the local queue, waiting on the nodes
			defer close(waiting)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, _ = c.Acquire(ctx, "r", time.Minute)
		}()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = c.Acquire(ctx, "r", time.Minute)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrLocked) {
			t.Fatalf("got %v, want DeadlineExceeded wrapping ErrLocked", err)
		}
		<-waiting
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
// same client gets errClosed when the client closes.
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
		if err := <-got; !errors.Is(err, errClosed) {
			t.Fatalf("queued waiter: %v, want errClosed", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("queued waiter returned %v after Close", d)
		}
	})
}

// TestSplitDelaySpreadsOverTheAttempt: after a split vote that lasted a
// node timeout, the retry is spread over about that long.
func TestSplitDelaySpreadsOverTheAttempt(t *testing.T) {
	c, _ := memClient(t, 3)
	var longest time.Duration
	for range 200 {
		d := c.retryDelay(&opError{kinds: []error{ErrLocked}, split: true, took: 50 * time.Millisecond})
		if d > 100*time.Millisecond {
			t.Fatalf("split delay %v beyond twice the attempt", d)
		}
		longest = max(longest, d)
	}
	if longest < 50*time.Millisecond {
		t.Fatalf("split delays never exceeded %v after a 50ms attempt", longest)
	}
	if d := c.retryDelay(&opError{kinds: []error{ErrLocked}, split: true}); d > 5*time.Millisecond {
		t.Fatalf("split delay %v after an instant attempt", d)
	}
}
