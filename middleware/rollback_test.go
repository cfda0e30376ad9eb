package middleware

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// TestRollbackOnHandlerErrorRunsUnderTheLock: the hook runs while the same
// lock is held, and its error is joined to the task's.
func TestRollbackOnHandlerErrorRunsUnderTheLock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	failed := errors.New("payment declined")
	rbErr := errors.New("compensation failed")
	var token, holderDuringRollback string
	var gotCause error
	rec := &recorder{fn: func(ctx context.Context) error {
		li, _ := LockFromContext(ctx)
		token = li.Token
		return failed
	}}
	h := Lock(e.locks, ByField("sku"), WithRollback(func(ctx context.Context, _ *asynq.Task, cause error) error {
		gotCause = cause
		holderDuringRollback = e.holder(t, res)
		return rbErr
	}))(rec)
	err := h.ProcessTask(ctx, adjust())
	if !errors.Is(err, failed) || !errors.Is(err, rbErr) {
		t.Fatalf("task error %v, want the handler's and the rollback's", err)
	}
	if !errors.Is(gotCause, failed) {
		t.Fatalf("rollback cause %v", gotCause)
	}
	if holderDuringRollback == "" || holderDuringRollback != token {
		t.Fatalf("rollback ran with holder %q, handler's token %q", holderDuringRollback, token)
	}
	if e.heldAfter(t, res) != "" {
		t.Fatal("lock not released after the rollback")
	}
}

// TestRollbackAfterLockLoss: the lock's key vanishes while the handler runs
// (the node lost its data); the handler's context is cancelled with
// ErrLockLost, the lock is re-acquired and the rollback runs under it, and
// the task fails with ErrLockLost so that it is retried.
func TestRollbackAfterLockLoss(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	var handlerToken, rollbackToken, holderDuringRollback string
	var handlerCause error
	rec := &recorder{fn: func(ctx context.Context) error {
		li, _ := LockFromContext(ctx)
		handlerToken = li.Token
		e.raw.Del(context.Background(), "asynqlock:{"+res+"}")
		<-ctx.Done()
		handlerCause = context.Cause(ctx)
		return ctx.Err()
	}}
	h := Lock(e.locks, ByField("sku"), WithTTL(300*time.Millisecond), WithRollback(func(ctx context.Context, _ *asynq.Task, cause error) error {
		li, _ := LockFromContext(ctx)
		rollbackToken = li.Token
		holderDuringRollback = e.holder(t, res)
		return nil
	}))(rec)
	err := h.ProcessTask(ctx, adjust())
	if !errors.Is(handlerCause, redlock.ErrLockLost) {
		t.Fatalf("handler's context cause %v, want ErrLockLost", handlerCause)
	}
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("task error %v, want ErrLockLost (retry)", err)
	}
	if rollbackToken == "" || rollbackToken == handlerToken || holderDuringRollback != rollbackToken {
		t.Fatalf("rollback token %q (handler's %q, holder %q): not run under a re-acquired lock", rollbackToken, handlerToken, holderDuringRollback)
	}
	if e.heldAfter(t, res) != "" {
		t.Fatal("re-acquired lock not released")
	}
}

// TestRollbackNotRunWhenReacquireFails: after the loss another task takes
// the resource; the rollback must not run without the lock, and the task
// fails with ErrLockLost.
func TestRollbackNotRunWhenReacquireFails(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	var ran atomic.Bool
	rec := &recorder{fn: func(ctx context.Context) error {
		e.raw.Del(context.Background(), "asynqlock:{"+res+"}")
		if _, err := e.other.TryAcquire(context.Background(), res, 10*time.Second); err != nil {
			t.Error(err)
		}
		<-ctx.Done()
		return nil // the handler even claims success
	}}
	h := Lock(e.locks, ByField("sku"), WithTTL(300*time.Millisecond), withRollbackTimeout(300*time.Millisecond),
		WithRollback(func(context.Context, *asynq.Task, error) error { ran.Store(true); return nil }))(rec)
	err := h.ProcessTask(ctx, adjust())
	if ran.Load() {
		t.Fatal("rollback ran without the lock")
	}
	if !errors.Is(err, redlock.ErrLockLost) || !IsFailure(err) {
		t.Fatalf("task error %v, want a failure matching ErrLockLost", err)
	}
}

// TestRollbackPanicIsAnError: a panicking hook fails the task, and the lock
// is still released.
func TestRollbackPanicIsAnError(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	rec := &recorder{fn: func(context.Context) error { return errors.New("boom") }}
	h := Lock(e.locks, ByField("sku"), WithRollback(func(context.Context, *asynq.Task, error) error { panic("bad rollback") }))(rec)
	err := h.ProcessTask(context.Background(), adjust())
	if err == nil || !strings.Contains(err.Error(), "rollback panicked: bad rollback") {
		t.Fatalf("task error %v", err)
	}
	if e.heldAfter(t, res) != "" {
		t.Fatal("lock not released")
	}
}

// TestRollbackRunsOnHandlerPanic: a panicking handler's partial work is
// rolled back under the lock before the panic goes on to asynq.
func TestRollbackRunsOnHandlerPanic(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	var cause error
	var held string
	rec := &recorder{fn: func(context.Context) error { panic("half done") }}
	h := Lock(e.locks, ByField("sku"), WithRollback(func(ctx context.Context, _ *asynq.Task, c error) error {
		cause, held = c, e.holder(t, res)
		return nil
	}))(rec)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = h.ProcessTask(context.Background(), adjust())
	}()
	if cause == nil || !strings.Contains(cause.Error(), "half done") || held == "" {
		t.Fatalf("rollback cause %v, holder during rollback %q", cause, held)
	}
	if e.heldAfter(t, res) != "" {
		t.Fatal("lock not released")
	}
}
