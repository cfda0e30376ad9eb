package middleware

import (
	"context"
	"errors"
	"fmt"
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
//
// Not a test of timing: its clients have a 1s node timeout (with 100ms, a
// loaded machine under -race saw the first task's TryAcquire fail with
// ErrQuorum, and an acquisition failed so would count as a refusal), and it
// watches the middleware's waiters rather than sleeping: each arrival is
// checked once it waits, so a late goroutine neither passes the check
// unseen nor fails the control.
func TestArrivalBesideALocalHolderSkipsTryAcquire(t *testing.T) {
	ctx := context.Background()
	e := patientEnv(t)
	var failed failedAcquires
	lc := e.client(t, patient(redlock.WithObserver(failed.Observe))...)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	release := make(chan struct{})
	var runs atomic.Int32
	rec := &recorder{fn: func(context.Context) error {
		if runs.Add(1) == 1 {
			<-release
		}
		return nil
	}}
	m, h := lockMW(t, lc, ByField("sku"), rec, Wait(5*time.Second))
	done := make(chan error, 2)
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	waitFor(t, "the first task holding its lock", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the first task ended (%v) instead of holding its lock", err)
		default:
		}
		return runs.Load() == 1 && e.holder(t, res) != ""
	})
	before := failed.n.Load()
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	waitFor(t, "the second task waiting", func() bool { return m.stateOf(res).waiters == 1 })
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
	waitFor(t, "the second task's release answered", func() bool { return !m.heldHere(res) })
	held, err := e.other.TryAcquire(ctx, res, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before = failed.n.Load()
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	waitFor(t, "the task arriving beside another process's holder waiting", func() bool { return m.stateOf(res).waiters == 1 })
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
			opts := []Option{Wait(10 * time.Second), withMaxWaiters(4)}
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
				if !errors.Is(err, errConflict) {
					t.Fatalf("third task: %v, want parked (errConflict)", err)
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
//
// Not a test of timing: its clients have a 1s node timeout (with 100ms, a
// loaded machine under -race saw the second task's wait end in ErrQuorum
// before the outage), it watches the middleware's waiters rather than
// sleeping, and its wait bound, which is also how long arrivals try the
// nodes first after an outage, is long enough for the last arrival to come
// within it on a loaded machine (with 200ms it could come after).
func TestWaiterBehindALocalHolderEndsOnANodeOutage(t *testing.T) {
	ctx := context.Background()
	e := patientEnv(t)
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
	m, h := lockMW(t, e.locks, ByField("sku"), rec, Wait(3*time.Second), withMaxWaiters(4))
	done := make(chan error, 3)
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	waitRuns := func(n int32) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d handler runs", n), func() bool { return runs.Load() >= n })
	}
	waitRuns(1)
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	go func() { done <- h.ProcessTask(ctx, adjust()) }()
	// One waits on the node, the other behind it, in the process.
	waitFor(t, "two tasks waiting", func() bool { return m.stateOf(res).waiters == 2 })
	close(first)
	waitRuns(2) // a waiting task holds the lock, acquired by waiting
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = e.srv.Kill()
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
