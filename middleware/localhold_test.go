package middleware

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// failedAcquires counts the lock client's acquisition calls that returned
// an error: a refused TryAcquire is one.
type failedAcquires struct{ n atomic.Int32 }

func (f *failedAcquires) Observe(ev redlock.Event) {
	if ev.Kind == redlock.EventAcquire && ev.Err != nil {
		f.n.Add(1)
	}
}

// TestArrivalBesideALocalHolderSkipsTryAcquire: a task that arrives while a
// task of the same process holds its resource waits without a TryAcquire
// round (the nodes could only refuse it) and runs after the holder; beside
// another process's holder it still tries first (the control).
func TestArrivalBesideALocalHolderSkipsTryAcquire(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var failed failedAcquires
	lc, err := redlock.NewFromURLs([]string{e.srv.URL()}, redlock.WithRetryDelay(5*time.Millisecond, 10*time.Millisecond),
		redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithObserver(failed.Observe))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	e.locks = lc
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	release := make(chan struct{})
	var runs atomic.Int32
	rec := &recorder{fn: func(context.Context) error {
		if runs.Add(1) == 1 {
			<-release
		}
		return nil
	}}
	h := Lock(e.locks, ByField("sku"), WithPolicy(Wait(5*time.Second)))(rec)
	done := make(chan error, 2)
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	for deadline := time.Now().Add(10 * time.Second); e.holder(t, res) == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first task never held its lock")
		}
	}
	before := failed.n.Load()
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	time.Sleep(300 * time.Millisecond) // the second task is waiting
	if n := failed.n.Load() - before; n != 0 {
		t.Fatalf("the task arriving beside a local holder was refused %d times, want no TryAcquire", n)
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs while the first task held the lock, want 1", runs.Load())
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2", runs.Load())
	}

	// Control: held by another process, the arriving task tries first.
	held, err := e.other.TryAcquire(ctx, res, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before = failed.n.Load()
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	time.Sleep(300 * time.Millisecond)
	if n := failed.n.Load() - before; n == 0 {
		t.Fatal("the task arriving beside another process's holder was never refused: the control cannot fail")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestParkingLeavesHalfTheShareToPromotedTasks: with parking, tasks that
// meet their resource busy wait only while fewer than half of WithMaxWaiters
// wait (the rest of the share is for promoted tasks); the next one is parked
// at once. Without parking (the control), the whole share waits.
func TestParkingLeavesHalfTheShareToPromotedTasks(t *testing.T) {
	for _, parking := range []bool{true, false} {
		t.Run(map[bool]string{true: "parking", false: "control"}[parking], func(t *testing.T) {
			ctx := context.Background()
			e, held := busyEnv(t, taskMeta{id: "t1", queue: "default", maxRetry: 3, known: true})
			opts := []Option{WithPolicy(Wait(10 * time.Second)), WithMaxWaiters(4)}
			if parking {
				opts = append(opts, WithBroker(e.raw))
			}
			h := Lock(e.locks, ByField("sku"), opts...)(&recorder{})
			done := make(chan error, 3)
			for range 2 {
				go func() { done <- h.ProcessTask(ctx, adjust()) }()
			}
			time.Sleep(300 * time.Millisecond) // both wait
			go func() { done <- h.ProcessTask(ctx, adjust()) }()
			select {
			case err := <-done:
				if !parking {
					t.Fatalf("without parking a third task returned (%v) while 4 may wait", err)
				}
				if !errors.Is(err, ErrConflict) {
					t.Fatalf("third task: %v, want parked (ErrConflict)", err)
				}
			case <-time.After(2 * time.Second):
				if parking {
					t.Fatal("the third task waited: half the share (2) was taken")
				}
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			for range map[bool]int{true: 2, false: 3}[parking] {
				if err := <-done; err != nil {
					t.Fatalf("waiter: %v", err)
				}
			}
		})
	}
}

// TestWaiterBehindALocalHolderEndsOnANodeOutage: a task waiting in the
// lock client's local queue, behind a task of its process that acquired by
// waiting, hears only that the resource is busy here; when the lock nodes
// stop answering, its wait ends at the next bound end as an outage
// (requeued for want of a quorum), not renewed bound after bound and then
// reported as a conflict; tasks arriving after that try the nodes first.
func TestWaiterBehindALocalHolderEndsOnANodeOutage(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	first, second := make(chan struct{}), make(chan struct{})
	defer close(second)
	var runs atomic.Int32
	rec := &recorder{fn: func(context.Context) error {
		switch runs.Add(1) {
		case 1:
			<-first
		case 2:
			<-second
		}
		return nil
	}}
	h := Lock(e.locks, ByField("sku"), WithPolicy(Wait(200*time.Millisecond)), WithMaxWaiters(4))(rec)
	done := make(chan error, 3)
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	waitRuns := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); runs.Load() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("handler runs %d, want %d", runs.Load(), n)
			}
		}
	}
	waitRuns(1)
	go func() { done <- h.ProcessTask(ctx, adjust()) }() // waits on the node
	time.Sleep(100 * time.Millisecond)
	go func() { done <- h.ProcessTask(ctx, adjust()) }() // waits behind it, in the process
	time.Sleep(100 * time.Millisecond)
	close(first)
	waitRuns(2) // the second task holds the lock, acquired by waiting
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.srv.Close()
	select {
	case err := <-done:
		if !errors.Is(err, redlock.ErrQuorum) || errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("waiting task ended with %v, want a lock-node outage (ErrQuorum)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiting task still waiting 30s into the outage")
	}
	// Once a wait ended so, a task arriving beside the local holder tries
	// the nodes at once and is requeued without waiting a bound.
	if err := h.ProcessTask(ctx, adjust()); !errors.Is(err, redlock.ErrQuorum) || strings.Contains(err.Error(), "after waiting") {
		t.Fatalf("task arriving in the outage ended with %v, want an outage found without a wait", err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}
