package middleware

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// TestProgressModeStall: a handler that reports progress keeps its lock
// beyond the TTL; once it stops reporting, it loses the lock within the
// stall bound plus the TTL and its context is cancelled with ErrLockLost.
func TestProgressModeStall(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	const ttl = 300 * time.Millisecond
	const stall = 200 * time.Millisecond
	var heldAfterProgress string
	var stalledFor time.Duration
	var cause error
	rec := &recorder{fn: func(ctx context.Context) error {
		li, _ := LockFromContext(ctx)
		for range 10 { // 1s of progress: more than three TTLs
			Progress(ctx)
			time.Sleep(100 * time.Millisecond)
		}
		heldAfterProgress = e.holder(t, res)
		if heldAfterProgress != li.Token {
			return errors.New("lock not kept while progressing")
		}
		start := time.Now()
		select { // hang, as a stuck handler would
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		stalledFor = time.Since(start)
		cause = context.Cause(ctx)
		return ctx.Err()
	}}
	h := Lock(e.locks, ByField("sku"), WithTTL(ttl), WithProgress(stall))(rec)
	err := h.ProcessTask(context.Background(), adjust())
	if heldAfterProgress == "" {
		t.Fatal("lock lost while the handler reported progress")
	}
	if !errors.Is(cause, redlock.ErrLockLost) || !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("cause %v, task error %v; want ErrLockLost", cause, err)
	}
	if stalledFor > stall+ttl+ttl {
		t.Fatalf("stalled handler held the lock %v (stall %v, ttl %v)", stalledFor, stall, ttl)
	}
}

// TestDefaultModeOutlivesTaskContext: asynq may cancel the task's context
// (deadline, shutdown) while the handler keeps running; the lock stays held
// until the handler returns, then it is released. The handler runs past the
// TTL, so only extensions keep the lock; the TTL leaves them room on a
// loaded machine (a 300ms one was lost there under -race).
func TestDefaultModeOutlivesTaskContext(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	ctx, cancel := context.WithCancel(context.Background())
	var heldAfterCancel string
	var token string
	rec := &recorder{fn: func(hctx context.Context) error {
		li, _ := LockFromContext(hctx)
		token = li.Token
		cancel() // asynq gives up on the task
		time.Sleep(1500 * time.Millisecond)
		heldAfterCancel = e.holder(t, res) // the handler is still running
		return nil
	}}
	h := Lock(e.locks, ByField("sku"), WithTTL(time.Second))(rec)
	if err := h.ProcessTask(ctx, adjust()); err != nil {
		t.Fatal(err)
	}
	if heldAfterCancel != token {
		t.Fatalf("lock held by %q while the handler still ran after its context ended; want %q", heldAfterCancel, token)
	}
	if e.holder(t, res) != "" {
		t.Fatal("lock not released when the handler returned")
	}
}

// TestHandlerPanicReleasesLock: asynq turns a panic into an error; the lock
// must be released on the way.
func TestHandlerPanicReleasesLock(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	rec := &recorder{fn: func(context.Context) error { panic("handler bug") }}
	h := Lock(e.locks, ByField("sku"))(rec)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = h.ProcessTask(context.Background(), adjust())
	}()
	if e.holder(t, res) != "" {
		t.Fatal("lock left held after a panic")
	}
}

// TestFencingAndMaxHold: redlock.WithFencing exposes a growing fence; redlock.WithMaxHold
// cuts a long handler off.
func TestFencingAndMaxHold(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	rec := &recorder{}
	h := Lock(e.locks, ByField("sku"), WithLockOptions(redlock.WithFencing()))(rec)
	for range 2 {
		if err := h.ProcessTask(context.Background(), adjust()); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.infos) != 2 || rec.infos[0].Fence <= 0 || rec.infos[1].Fence <= rec.infos[0].Fence {
		t.Fatalf("fences %+v", rec.infos)
	}
	var cause error
	long := &recorder{fn: func(ctx context.Context) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}}
	start := time.Now()
	_ = Lock(e.locks, ByField("sku"), WithTTL(200*time.Millisecond), WithLockOptions(redlock.WithMaxHold(500*time.Millisecond)))(long).ProcessTask(context.Background(), adjust())
	if !errors.Is(cause, redlock.ErrMaxHold) {
		t.Fatalf("cause %v, want ErrMaxHold", cause)
	}
	if held := time.Since(start); held > 2*time.Second {
		t.Fatalf("handler kept the lock %v with a 500ms cap", held)
	}
}

// TestProgressModeRetriesFailedExtension: in progress mode an extension that
// fails is retried soon, not a whole period later. The node refuses every
// command across two extension ticks (200ms and 400ms); a handler that keeps reporting
// progress must keep its lock through it.
func TestProgressModeRetriesFailedExtension(t *testing.T) {
	e := newEnv(t)
	srv, locks := e.srv, e.locks
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	const ttl = 600 * time.Millisecond // extensions every 200ms, retries every 30ms
	outage := time.AfterFunc(150*time.Millisecond, func() {
		srv.Miniredis().SetError("LOADING injected outage")
		time.AfterFunc(300*time.Millisecond, func() { srv.Miniredis().SetError("") })
	})
	defer outage.Stop()
	var cause error
	rec := &recorder{fn: func(ctx context.Context) error {
		for range 20 { // 1s of progress, the outage (150ms-450ms) inside
			Progress(ctx)
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	}}
	h := Lock(locks, ByField("sku"), WithTTL(ttl), WithProgress(time.Second))(rec)
	if err := h.ProcessTask(context.Background(), adjust()); err != nil || cause != nil {
		t.Fatalf("task error %v, handler cause %v: the lock was lost though extensions were retried after the outage", err, cause)
	}
}

// TestProgressModeResumes: a handler that goes quiet past the stall bound
// but reports again before its lock ran out keeps the lock: the keep-alive
// resumes. Without the resumption the lock would run out within the TTL of
// the stall, well inside the 1.5s of progress that follow.
func TestProgressModeResumes(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	const ttl, stall = time.Second, 100 * time.Millisecond
	var cause error
	var heldAtEnd, token string
	rec := &recorder{fn: func(ctx context.Context) error {
		li, _ := LockFromContext(ctx)
		token = li.Token
		Progress(ctx)
		time.Sleep(3 * stall) // quiet: the keep-alive stops
		for range 15 {        // 1.5s of progress: more than the TTL
			Progress(ctx)
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return ctx.Err()
			case <-time.After(stall / 2):
			}
		}
		heldAtEnd = e.holder(t, res)
		return nil
	}}
	h := Lock(e.locks, ByField("sku"), WithTTL(ttl), WithProgress(stall))(rec)
	if err := h.ProcessTask(context.Background(), adjust()); err != nil || cause != nil {
		t.Fatalf("task error %v, handler cause %v: the lock was not kept once progress resumed", err, cause)
	}
	if heldAtEnd != token {
		t.Fatalf("holder %q at the end, want %q", heldAtEnd, token)
	}
}

// TestProgressModeMaxHold: in progress mode too, a max hold given with
// WithLockOptions cuts the handler off with redlock.ErrMaxHold, however
// much progress it reports.
func TestProgressModeMaxHold(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	var cause error
	rec := &recorder{fn: func(ctx context.Context) error {
		for {
			Progress(ctx)
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}}
	start := time.Now()
	_ = Lock(e.locks, ByField("sku"), WithTTL(200*time.Millisecond), WithProgress(time.Second),
		WithLockOptions(redlock.WithMaxHold(500*time.Millisecond)))(rec).ProcessTask(context.Background(), adjust())
	if !errors.Is(cause, redlock.ErrMaxHold) {
		t.Fatalf("cause %v, want ErrMaxHold", cause)
	}
	if held := time.Since(start); held > 3*time.Second {
		t.Fatalf("handler kept the lock %v with a 500ms cap", held)
	}
}
