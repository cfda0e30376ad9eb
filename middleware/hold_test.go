package middleware

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// extensions counts a lock client's successful extensions.
type extensions struct{ n atomic.Int32 }

func (x *extensions) Observe(ev redlock.Event) {
	if ev.Kind == redlock.EventExtend && ev.Err == nil {
		x.n.Add(1)
	}
}

// TestProgressModeStall: a handler that reports progress keeps its lock
// beyond the TTL; once it stops reporting, the keep-alive stops within the
// stall bound, so the lock runs out within the stall bound plus the TTL,
// and the handler's context is cancelled with ErrLockLost.
//
// Not a test of timing: its clients have a 1s node timeout and a TTL that
// allows it (a 300ms TTL with a 100ms node timeout lost the lock while
// progress was reported, on a loaded machine under -race). The bound is
// checked in extensions, which load cannot add: successful extensions start
// at least TTL/3 apart, so after the last report there are at most one in
// flight, stall/(TTL/3) within the stall bound and one for a stall check
// that a loaded machine runs late. A keep-alive that ignored the stall
// would extend every TTL/3 until the handler gave up (30s, some 75 times).
func TestProgressModeStall(t *testing.T) {
	e := patientEnv(t)
	var ext extensions
	locks := e.client(t, patient(redlock.WithObserver(ext.Observe))...)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	const ttl = 1200 * time.Millisecond
	const stall = ttl / 3
	var heldAfterProgress string
	var extBefore int32
	var stalledFor time.Duration
	var cause error
	rec := &recorder{fn: func(ctx context.Context) error {
		li, _ := LockFromContext(ctx)
		for range 42 { // 4.2s of progress: more than three TTLs
			Progress(ctx)
			time.Sleep(100 * time.Millisecond)
		}
		Progress(ctx) // the last report
		extBefore = ext.n.Load()
		heldAfterProgress = e.holder(t, res)
		if heldAfterProgress != li.Token {
			return errors.New("lock not kept while progressing")
		}
		start := time.Now()
		select { // hang, as a stuck handler would
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
		stalledFor = time.Since(start)
		cause = context.Cause(ctx)
		return ctx.Err()
	}}
	h := Lock(locks, ByField("sku"), WithTTL(ttl), WithProgress(stall))(rec)
	err := h.ProcessTask(context.Background(), adjust())
	if heldAfterProgress == "" {
		t.Fatal("lock lost while the handler reported progress")
	}
	if !errors.Is(cause, redlock.ErrLockLost) || !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("cause %v, task error %v after %v of stall; want ErrLockLost", cause, err, stalledFor)
	}
	if n, most := ext.n.Load()-extBefore, int32(stall/(ttl/3))+2; n > most {
		t.Fatalf("%d extensions after the last report (stall %v, ttl %v), want at most %d: the keep-alive went on past the stall bound", n, stall, ttl, most)
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
	if e.heldAfter(t, res) != "" {
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
	if e.heldAfter(t, res) != "" {
		t.Fatal("lock left held after a panic")
	}
}

// TestFencing: redlock.WithFencing, given with WithLockOptions, exposes a
// growing fence.
func TestFencing(t *testing.T) {
	e := patientEnv(t)
	locks := e.client(t, patient()...)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	rec := &recorder{}
	h := Lock(locks, ByField("sku"), WithLockOptions(redlock.WithFencing()))(rec)
	for range 2 {
		if err := h.ProcessTask(context.Background(), adjust()); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.infos) != 2 || rec.infos[0].Fence <= 0 || rec.infos[1].Fence <= rec.infos[0].Fence {
		t.Fatalf("fences %+v", rec.infos)
	}
}

// TestProgressModeRetriesFailedExtension: in progress mode an extension that
// fails is retried soon, not a whole period later. The node refuses every
// command across two extension ticks (1s and 2s of a 3s TTL); a handler that
// keeps reporting progress must keep its lock through it. Without the retries
// the next try would come at 3s, after the lock ran out (the control that
// makes the test fail); with them, the lock is extended within 100ms of the
// outage's end, about 550ms before the keep-alive would call it lost.
func TestProgressModeRetriesFailedExtension(t *testing.T) {
	e := patientEnv(t) // a node timeout far under the TTL: slow answers are not the test
	srv, locks := e.srv, e.locks
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	const ttl = 3 * time.Second // extensions every 1s, retries every 100ms
	outage := time.AfterFunc(300*time.Millisecond, func() {
		if err := srv.Refuse(true); err != nil {
			t.Error(err)
		}
		time.AfterFunc(1800*time.Millisecond, func() {
			if err := srv.Refuse(false); err != nil {
				t.Error(err)
			}
		})
	})
	defer outage.Stop()
	var cause error
	rec := &recorder{fn: func(ctx context.Context) error {
		for range 70 { // 3.5s of progress, the outage (300ms-2.1s) inside
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
