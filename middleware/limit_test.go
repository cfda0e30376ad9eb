package middleware

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// TestLimitRunsUpToNTasksOfAKey: with WithLimit(3), three tasks of one key
// run at once, the others wait for a slot, and all run in the end.
func TestLimitRunsUpToNTasksOfAKey(t *testing.T) {
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t", queue: "default"})
	const n, tasks = 3, 6
	var inside, peak atomic.Int32
	release := make(chan struct{})
	h := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		now := inside.Add(1)
		defer inside.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	_, wrapped := lockMW(t, e.locks, ByType(), h, WithLimit(n), WithTTL(5*time.Second), Wait(time.Minute))
	errs := make(chan error, tasks)
	var wg sync.WaitGroup
	for range tasks {
		wg.Go(func() { errs <- wrapped.ProcessTask(context.Background(), task("import", "{}")) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for inside.Load() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := inside.Load(); got != n {
		t.Fatalf("%d tasks of one key running with limit %d", got, n)
	}
	states, err := e.locks.Inspect(context.Background(), "task:import:import")
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, s := range states {
		if s.Token != "" {
			held++
		}
	}
	if held != n {
		t.Fatalf("%d slots held on the node, want %d: %+v", held, n, states)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if p := peak.Load(); p != n {
		t.Fatalf("peak %d tasks at once, want %d", p, n)
	}
}

// TestLimitChangeRunsTheTask: a task whose resource is held with another
// limit runs beside it on a free slot (limits 2 and 3 share the slots; a
// plain holder holds slot 0): never failed for the difference
// (docs/design/REDLOCK.md, "Changing n").
func TestLimitChangeRunsTheTask(t *testing.T) {
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t", queue: "default"})
	ctx := context.Background()
	for range 2 {
		held, err := e.other.TryAcquire(ctx, "task:import:import", 5*time.Second, redlock.WithLimit(2))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Release(ctx) }()
	}
	rec := &recorder{}
	_, wrapped := lockMW(t, e.locks, ByType(), rec, WithLimit(3))
	if err := wrapped.ProcessTask(ctx, task("import", "{}")); err != nil {
		t.Fatalf("task with limit 3 beside both slots of limit 2: %v, want it run on slot 2", err)
	}
	plain, err := e.other.TryAcquire(ctx, "task:export:export", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, func() { _ = plain.Release(ctx) })
	if err := wrapped.ProcessTask(ctx, task("export", "{}")); err != nil {
		t.Fatalf("task with limit 3 beside a plain holder: %v, want it run", err)
	}
	if rec.count() != 2 {
		t.Fatalf("the handler ran %d times, want 2", rec.count())
	}
}

// TestLimitCountsSlotsInShares: a resource of n slots is held here only
// once n tasks hold it, and has n times the shares of waiters and promoted
// tasks, and n times the pace.
func TestLimitCountsSlotsInShares(t *testing.T) {
	e := patientEnv(t)
	m, _ := lockMW(t, e.locks, ByType(), &recorder{}, WithLimit(3), withMaxWaiters(2))
	one, _ := lockMW(t, e.locks, ByType(), &recorder{}, withMaxWaiters(2))
	ent := m.holding("r")
	if m.heldHere("r") {
		t.Fatal("one holder of 3 slots counts as held here")
	}
	m.holding("r")
	m.holding("r")
	if !m.heldHere("r") {
		t.Fatal("3 holders of 3 slots do not count as held here")
	}
	m.ended("r", ent, "", time.Time{})
	if got, want := m.freshShare("r", true), 3*one.freshShare("r", true); got != want {
		t.Errorf("share of waiters %d, want %d", got, want)
	}
	if got, want := m.promoteDepth("r"), (depths{busy: 6, idle: 18}); got != want {
		t.Errorf("promotion depths %+v, want %+v", got, want)
	}
	if got, want := m.turnOf(0), one.turnOf(0)/3; got != want {
		t.Errorf("a turn every %v, want %v", got, want)
	}
	c := newWaitCap(8)
	if !c.enter("s", 1) {
		t.Fatal("a waiter of a one-slot resource refused under an empty cap")
	}
	for i := range 6 { // 3 of 4 slots waiting: 3/4 of the cap
		if !c.enter("r", 3) {
			t.Fatalf("waiter %d of a 3-slot resource refused beside a 1-slot one under a cap of 8", i)
		}
	}
	if c.enter("r", 3) {
		t.Fatal("a 3-slot resource went past its share of 3/4 of the cap")
	}
	if !c.enter("s", 1) || c.enter("s", 1) {
		t.Fatal("the 1-slot resource did not get its share of 1/4 of the cap, exactly")
	}
}
