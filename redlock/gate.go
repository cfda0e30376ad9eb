package redlock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// gates queues a process's own Acquire callers per resource, in FIFO order,
// so that only the head contends on the nodes. It is an optimisation of who
// asks, never a substitute for the quorum: the head still has to win it.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	queue []*waiter // callers waiting for their turn, oldest first
	// idle is, for a resource of n > 1 slots, the caller holding the turn
	// while it pauses between rounds: a release of a slot by this client
	// may hand the slot to it (see park).
	idle *waiter
}

type waiter struct {
	ready   chan struct{}
	granted bool
	req     *handoffReq // what the waiter asks for, so a Release can hand over
	lock    *Lock       // handed over with the turn; nil: acquire it yourself
	claimed bool        // a hand-over to this waiter is under way
	gone    bool        // gave up while claimed: the claimer releases the lock
	// queued: a waiter of a resource of n > 1 slots claimed from the
	// queue, not the turn's holder: a hand-over that fails puts it back
	// (pass), since the turn is not the slot holder's to give.
	queued bool
}

// turn is a caller's place at the head of a resource's queue. Leaving passes
// it to the next waiter.
type turn struct {
	gs   *gates
	key  string
	once sync.Once
	// slots: not the turn but a slot holder's handle on its resource's
	// queue (n > 1): it never passes the turn (holders of slots do not hold
	// it) and it hands its slot to the idle caller (see park).
	slots bool
}

// enter waits until the caller is at the head of key's queue, ctx ends or
// closed is closed (then it returns ErrClosed). A lock handed over by the
// previous holder comes with the turn (then the turn is nil: the lock has
// it); it can come with an error too, when the caller gave up as it arrived:
// the caller must release it.
func (gs *gates) enter(ctx context.Context, key string, closed <-chan struct{}, req *handoffReq) (*turn, *Lock, error) {
	gs.mu.Lock()
	if gs.m == nil {
		gs.m = make(map[string]*gate)
	}
	g, busy := gs.m[key]
	if !busy {
		gs.m[key] = &gate{}
		gs.mu.Unlock()
		return &turn{gs: gs, key: key}, nil, nil
	}
	w := &waiter{ready: make(chan struct{}), req: req}
	g.queue = append(g.queue, w)
	gs.mu.Unlock()
	if req != nil && req.look != nil {
		req.look.send(time.Time{}) // as the caller starts to wait
	}

	var err error
	select {
	case <-w.ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = ErrClosed
	}
	gs.mu.Lock()
	switch {
	case w.granted:
		gs.mu.Unlock()
		var t *turn // none when a lock came with it: the lock holds the turn
		if w.lock == nil {
			t = &turn{gs: gs, key: key}
		}
		if err != nil {
			t.leave() // the turn arrived as we gave up: pass it on
			t = nil
		}
		return t, w.lock, err
	case w.claimed:
		// A hand-over is under way: its sender releases what it gets.
		w.gone = true
		gs.mu.Unlock()
		return nil, nil, err
	}
	// The gate now, not g: a requeued waiter may be in a newer one.
	if g := gs.m[key]; g != nil {
		g.queue = slices.DeleteFunc(g.queue, func(q *waiter) bool { return q == w })
	}
	gs.mu.Unlock()
	return nil, nil, err
}

// leave hands the turn to the next waiter, or frees the resource's queue.
// It is idempotent and safe on a nil turn.
func (t *turn) leave() {
	if t == nil || t.slots {
		return
	}
	t.once.Do(func() {
		gs := t.gs
		gs.mu.Lock()
		defer gs.mu.Unlock()
		g := gs.m[t.key]
		if g == nil {
			return
		}
		if len(g.queue) == 0 {
			delete(gs.m, t.key)
			return
		}
		w := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		w.granted = true
		close(w.ready)
	})
}
