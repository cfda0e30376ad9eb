package middleware

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// TestKeeperStartsOnlyLongRuns: a run's keep-alive starts once it has run
// keepAfter, and never for a run that ended before (the common short task
// costs no keep-alive at all).
func TestKeeperStartsOnlyLongRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var started []*guard
		old := startKeepAlive
		startKeepAlive = func(g *guard) {
			mu.Lock()
			started = append(started, g)
			mu.Unlock()
		}
		defer func() { startKeepAlive = old }()
		short, long1, long2 := &guard{}, &guard{}, &guard{}
		short.keepAliveAfter(time.Second)
		long1.keepAliveAfter(time.Second)
		time.Sleep(400 * time.Millisecond)
		short.timer.Stop() // ended after 400ms (as end does): never kept alive
		long2.keepAliveAfter(time.Second)
		time.Sleep(700 * time.Millisecond) // long1 due at 1s, long2 at 1.4s
		synctest.Wait()
		mu.Lock()
		if len(started) != 1 || started[0] != long1 {
			t.Fatalf("at 1.1s started %d runs (want only the first long one)", len(started))
		}
		mu.Unlock()
		time.Sleep(400 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(started) != 2 || started[1] != long2 {
			t.Fatalf("at 1.5s started %d runs, want both long ones", len(started))
		}
	})
}

// TestShortRunHasNoKeepAlive: a task that ends before keepAfter runs
// without a keep-alive, leaves no timer pending, and releases its lock.
func TestShortRunHasNoKeepAlive(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	cfg := defaultConfig()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	m := newMW(e.locks, ByField("sku"), cfg)
	var g *guard
	rec := &recorder{fn: func(ctx context.Context) error {
		g, _ = ctx.(*guard)
		return nil
	}}
	if err := m.process(context.Background(), adjust(), rec); err != nil {
		t.Fatal(err)
	}
	if g == nil {
		t.Fatal("the handler's context is not the run's guard")
	}
	if pending := g.timer.Stop(); g.kctx != nil || pending {
		t.Fatalf("a 30s-TTL lock of a short run was kept alive (keep-alive %v, timer pending %v)", g.kctx != nil, pending)
	}
	if h := e.heldAfter(t, res); h != "" {
		t.Fatalf("lock still held by %q after the task", h)
	}
}

// TestLossBeforeKeepAliveIsReported: a lock that runs out before its
// keep-alive started (a timer far too late, which keepAfter rules out in
// practice) still fails the task with ErrLockLost: its work was not
// protected to its end.
func TestLossBeforeKeepAliveIsReported(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	cfg := defaultConfig()
	cfg.ttl = 300 * time.Millisecond
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	m := newMW(e.locks, ByField("sku"), cfg)
	m.keepAfter = time.Hour
	rec := &recorder{fn: func(ctx context.Context) error {
		g := ctx.(*guard)
		select {
		case <-g.lock.Lost():
			return nil
		case <-time.After(20 * time.Second):
			return errors.New("lock not lost within 20s of a 300ms TTL")
		}
	}}
	err := m.process(context.Background(), adjust(), rec)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("task error %v, want ErrLockLost", err)
	}
}
