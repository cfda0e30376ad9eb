package middleware

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// keepAfterOf is how long a handler runs before its keep-alive starts: half
// the time to the first extension (docs/guide/MIDDLEWARE.md, step 4).
func keepAfterOf(ttl time.Duration) time.Duration { return ttl / 6 }

// startKeepAlive is (*guard).keepAlive; tests watch it.
var startKeepAlive = (*guard).keepAlive

// guard is a handler's run under its lock, and its context: cancelled with
// the loss's cause, carrying the lock for LockFromContext.
type guard struct {
	context.Context // the handler's: a child of the task's, whose values it has

	cancel   context.CancelCauseFunc
	info     LockInfo
	progress *progress // what Progress reports to, in progress mode
	lock     *redlock.Lock
	timer    *time.Timer // starts the keep-alive after keepAfter (keepAliveAfter)

	mu    sync.Mutex // orders a late keepAlive against end
	ended bool
	kctx  context.Context // the keep-alive's, once started
	stop  func()          // ends the keep-alive and its watch
}

// Value answers LockFromContext and Progress, with no WithValue layers.
func (g *guard) Value(key any) any {
	switch key.(type) {
	case infoKey:
		return g.info
	case progressKey:
		if g.progress != nil {
			return g.progress
		}
	}
	return g.Context.Value(key)
}

func (g *guard) keepAliveAfter(d time.Duration) {
	g.timer = time.AfterFunc(d, func() { startKeepAlive(g) })
}

// keepAlive starts the keep-alive and its watch, unless the handler ended.
func (g *guard) keepAlive() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		return
	}
	g.watch(g.lock.KeepAlive(context.WithoutCancel(g.Context)))
}

// watch cancels the handler when kctx, a keep-alive's context, ends with a
// loss; g.mu is held, or g not yet shared.
func (g *guard) watch(kctx context.Context, stop context.CancelFunc) {
	stopLoss := context.AfterFunc(kctx, func() {
		if cause := notKept(kctx); cause != nil {
			g.cancel(cause)
		}
	})
	g.kctx, g.stop = kctx, func() { stopLoss(); stop() }
}

// end stops the keep-alive (or its start) and returns the loss's cause, if any.
func (g *guard) end() (lost error) {
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Lock()
	g.ended = true
	if g.kctx != nil {
		lost = notKept(g.kctx)
		g.stop()
	} else {
		lost = lossOf(g.lock)
	}
	g.mu.Unlock()
	g.cancel(nil)
	if !errors.Is(lost, redlock.ErrLockLost) {
		return nil
	}
	return lost
}

// lossOf returns the cause of lock's loss, if lost (a keep-alive started on a
// lost lock ends at once with it).
func lossOf(lock *redlock.Lock) error {
	select {
	case <-lock.Lost():
	default:
		return nil
	}
	kctx, stop := lock.KeepAlive(context.Background())
	defer stop()
	return context.Cause(kctx)
}

// LockInfo describes the lock a handler runs under.
type LockInfo struct {
	Resource string    // the locked resource's name
	Token    string    // the lock's random token
	Fence    int64     // fencing token, 0 unless acquired with redlock.WithFencing (see WithLockOptions)
	Until    time.Time // end of validity when the handler started (kept alive since)
	Slot     int       // which of WithLimit's n slots the lock holds; 0 without a limit
}

type infoKey struct{}

func lockInfoOf(lock *redlock.Lock) LockInfo {
	return LockInfo{Resource: lock.Resource(), Token: lock.Token(), Fence: lock.Fence(), Until: lock.Until(), Slot: lock.Slot()}
}

// LockFromContext returns the lock the handler runs under; false when the
// task runs without a lock (empty key, or not under this middleware).
func LockFromContext(ctx context.Context) (LockInfo, bool) {
	li, ok := ctx.Value(infoKey{}).(LockInfo)
	return li, ok
}
