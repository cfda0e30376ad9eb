package middleware

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// TestClientClosedRightAfterAcquireIsALoss (issue 20, finding 3): the lock
// client closes between the acquire and the keep-alive's start (a worker's
// shutdown race), so the lock can no longer be extended. The handler must be
// told before Until, with a cause matching redlock.ErrLockLost, and the task
// must not be reported as done.
func TestClientClosedRightAfterAcquireIsALoss(t *testing.T) {
	srv := redistest.StartServer(t)
	var c *redlock.Client
	var closeOnce sync.Once
	closeOnAcquire := func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire && e.Err == nil {
			closeOnce.Do(func() { _ = c.Close() })
		}
	}
	c, err := redlock.NewFromURLs([]string{srv.URL()}, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithObserver(closeOnAcquire))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	var told bool
	var cause error
	var until time.Time
	rec := &recorder{fn: func(hctx context.Context) error {
		li, _ := LockFromContext(hctx)
		until = li.Until
		select {
		case <-hctx.Done():
			told, cause = time.Now().Before(until), context.Cause(hctx)
		case <-time.After(time.Until(until) + 2*time.Second): // well past the validity
		}
		return nil
	}}
	h := Lock(c, ByField("sku"), WithTTL(time.Second))(rec)
	err = h.ProcessTask(context.Background(), adjust())
	if rec.count() != 1 {
		t.Fatalf("handler ran %d times, want 1", rec.count())
	}
	if !told || !errors.Is(cause, redlock.ErrLockLost) {
		t.Errorf("handler told before Until: %v (cause %v), want told with a cause matching ErrLockLost", told, cause)
	}
	if err == nil || !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("task returned %v, want an error matching ErrLockLost (never a success)", err)
	}
}

// TestLossAfterTheHandlerReturnedIsNoFailure (issue 20, suspicion 6): the
// handler returns nil while its lock is valid; the watchdog declares the
// lock lost (the node went away, so no extension came) before the
// middleware ends the run. The run finished protected: it must not be
// reported as lost and retried.
func TestLossAfterTheHandlerReturnedIsNoFailure(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	old := afterHandler
	afterHandler = func(l *redlock.Lock) {
		_ = e.srv.Kill() // no extension can come now
		select {
		case <-l.Lost():
		case <-time.After(time.Minute):
			t.Error("the lock was never declared lost")
		}
	}
	t.Cleanup(func() { afterHandler = old })
	rec := &recorder{fn: func(context.Context) error { return nil }}
	h := Lock(e.locks, ByField("sku"), WithTTL(time.Second))(rec)
	if err := h.ProcessTask(context.Background(), adjust()); err != nil {
		t.Fatalf("a run that returned before its lock was declared lost: %v, want nil", err)
	}
}
