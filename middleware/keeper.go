package middleware

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// keeper starts the keep-alive of a handler's lock only once the handler
// has run for keepAfter: most tasks end long before they need one. Every
// handler waits the same keepAfter, so a list in start order, earliest at
// its head, is due in order: one timer, O(1) add and remove, no heap
// (docs/guide/MIDDLEWARE.md, "Keep alive", argues that no loss goes unseen).
type keeper struct {
	after time.Duration
	start func(*guard) // (*guard).keepAlive; tests watch it

	mu         sync.Mutex
	head, tail *guard
	timer      *time.Timer // pending while the list is not empty
}

// keepAfterOf is half the time to a lock's first extension (TTL/3), so
// that a late timer still starts the keep-alive in time.
func keepAfterOf(ttl time.Duration) time.Duration { return ttl / 6 }

func newKeeper(after time.Duration) *keeper {
	k := &keeper{after: after, start: (*guard).keepAlive}
	k.timer = time.AfterFunc(time.Hour, k.fire)
	k.timer.Stop()
	return k
}

// add queues g, due keepAfter from now.
func (k *keeper) add(g *guard) {
	k.mu.Lock()
	g.due = time.Now().Add(k.after)
	g.prev, g.queued = k.tail, true
	if k.tail != nil {
		k.tail.next = g
	} else { // the list was empty: no fire pending
		k.head = g
		k.timer.Reset(k.after)
	}
	k.tail = g
	k.mu.Unlock()
}

// remove takes g off the list if it is still there.
func (k *keeper) remove(g *guard) {
	k.mu.Lock()
	k.unlink(g)
	k.mu.Unlock()
}

// unlink takes g off the list if it is there; k.mu is held.
func (k *keeper) unlink(g *guard) {
	if !g.queued {
		return
	}
	if g.prev != nil {
		g.prev.next = g.next
	} else {
		k.head = g.next
	}
	if g.next != nil {
		g.next.prev = g.prev
	} else {
		k.tail = g.prev
	}
	g.prev, g.next, g.queued = nil, nil, false
}

// fire starts the keep-alives that are due and re-arms the timer for the
// next one. The keep-alives start outside k.mu: each spawns a goroutine.
func (k *keeper) fire() {
	var due []*guard
	k.mu.Lock()
	now := time.Now()
	for k.head != nil && !now.Before(k.head.due) {
		g := k.head
		k.unlink(g)
		due = append(due, g)
	}
	if k.head != nil {
		k.timer.Reset(k.head.due.Sub(now))
	}
	k.mu.Unlock()
	for _, g := range due {
		k.start(g)
	}
}

// guard is a handler's run under its lock in the default mode: its context
// (cancelled with the loss's cause when the lock is lost, and carrying the
// lock for LockFromContext) and its place in the keeper. It is the
// handler's context itself, so that a task's run costs one allocation here.
type guard struct {
	context.Context // the handler's: a child of the task's, whose values it has

	cancel   context.CancelCauseFunc
	info     LockInfo
	progress *progress // what Progress reports to, in progress mode
	lock     *redlock.Lock

	due        time.Time
	prev, next *guard
	queued     bool // in the keeper's list (guarded by the keeper's mu)

	mu       sync.Mutex // orders a late keepAlive against end
	ended    bool
	kctx     context.Context // the keep-alive's, once started
	stopKA   context.CancelFunc
	stopLoss func() bool
}

// Value answers LockFromContext and Progress without context.WithValue
// layers.
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

// keepAlive starts the lock's keep-alive and the watch that cancels the
// handler when the lock is lost, unless the handler has ended.
func (g *guard) keepAlive() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		return
	}
	g.watch(g.lock.KeepAlive(context.WithoutCancel(g.Context)))
}

// watch takes kctx, a keep-alive's context, and stop, which ends that
// keep-alive, and cancels the handler when kctx ends with a loss; g.mu is
// held, or g not yet shared.
func (g *guard) watch(kctx context.Context, stop context.CancelFunc) {
	g.kctx, g.stopKA = kctx, stop
	g.stopLoss = context.AfterFunc(kctx, func() {
		if cause := notKept(kctx); cause != nil {
			g.cancel(cause)
		}
	})
}

// end stops the keep-alive (or its start) and returns the loss's cause
// (nil if the lock was kept).
func (g *guard) end(k *keeper) (lost error) {
	k.remove(g)
	g.mu.Lock()
	g.ended = true
	kctx := g.kctx
	if kctx != nil {
		lost = notKept(kctx)
		g.stopLoss()
		g.stopKA()
	}
	g.mu.Unlock()
	if kctx == nil {
		lost = lossOf(g.lock)
	}
	g.cancel(nil)
	if !errors.Is(lost, redlock.ErrLockLost) {
		return nil
	}
	return lost
}

// lossOf returns the cause of lock's loss, nil if it is not lost. Only a
// keep-alive's context carries the cause; one started on a lost lock is
// cancelled with it at once, without a goroutine.
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
