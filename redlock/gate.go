package redlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// gates queues a Client's Acquire callers per resource in FIFO order: only
// the head tries the nodes, and a Release can hand the lock to the next.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	queue []*waiter // callers waiting for their turn, oldest first
	idle  *waiter   // under a limit, the turn's holder while it pauses (park)
}

type waiter struct {
	ready   chan struct{}
	granted bool
	req     *handoffReq // what the waiter asks for, so a Release can hand over
	lock    *Lock       // handed over with the turn; nil: acquire it yourself
	claimed bool        // a hand-over to this waiter is under way
	gone    bool        // gave up while claimed: the claimer releases the lock
	queued  bool        // a slot's waiter claimed from the queue: pass may put it back
}

// turn is a caller's place at the head of a resource's queue; leave passes it on.
type turn struct {
	gs   *gates
	key  string
	once sync.Once
	// slots: a slot holder's handle on the queue, not the turn: it never
	// passes the turn, and hands its slot to the idle caller (park).
	slots bool
}

// enter waits until the caller heads key's queue, ctx ends or closed is
// closed (errClosed). A lock handed over comes instead of the turn, with an
// error if the caller gave up as it came: the caller must release it then.
func (gs *gates) enter(ctx context.Context, key string, closed <-chan struct{},
	req *handoffReq) (*turn, *Lock, error) {
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
	if req.look != nil {
		req.look.send(time.Time{}) // as the caller starts to wait
	}
	granted, err := gs.await(ctx, key, w, closed)
	if !granted {
		return nil, nil, err
	}
	var t *turn // none when a lock came with it: the lock holds the turn
	if w.lock == nil {
		t = &turn{gs: gs, key: key}
	}
	if err != nil {
		t.leave() // the turn arrived as we gave up: pass it on
		t = nil
	}
	return t, w.lock, err
}

// await waits for w's grant till ctx ends or closed is closed (errClosed). A
// waiter giving up while claimed is gone (its claimer releases what it gets);
// an unclaimed one leaves key's queue.
func (gs *gates) await(ctx context.Context, key string, w *waiter,
	closed <-chan struct{}) (bool, error) {
	var err error
	select {
	case <-w.ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = errClosed
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	switch {
	case w.granted:
	case w.claimed:
		w.gone = true
	default:
		// The gate now, not g: a requeued waiter may be in a newer one.
		if g := gs.m[key]; g != nil {
			g.queue = slices.DeleteFunc(g.queue, func(q *waiter) bool { return q == w })
		}
	}
	return w.granted, err
}

// leave hands the turn to the next waiter, or frees the resource's queue
// (idempotent, nil-safe).
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
		g.queue = slices.Delete(g.queue, 0, 1)
		w.granted = true
		close(w.ready)
	})
}

// claim takes the next local waiter out of the queue for a hand-over; the
// queue stays, so that callers arriving meanwhile queue behind.
func (t *turn) claim() *waiter {
	if t == nil {
		return nil
	}
	t.gs.mu.Lock()
	defer t.gs.mu.Unlock()
	g, w := t.next()
	switch {
	case w == nil:
		return nil
	case w == g.idle:
		g.idle = nil
	default:
		g.queue = slices.Delete(g.queue, 0, 1)
		w.queued = t.slots
	}
	w.claimed = true
	return w
}

// waited reports whether claim would return a waiter now.
func (t *turn) waited() bool {
	if t == nil {
		return false
	}
	t.gs.mu.Lock()
	defer t.gs.mu.Unlock()
	_, w := t.next()
	return w != nil
}

// next is the waiter a hand-over would go to, with its gate (gs.mu held): a
// slot handle's idle caller (the oldest), else the first queued.
func (t *turn) next() (*gate, *waiter) {
	g := t.gs.m[t.key]
	switch {
	case g != nil && t.slots && g.idle != nil:
		return g, g.idle
	case g == nil || len(g.queue) == 0:
		return nil, nil
	}
	return g, g.queue[0]
}

// pass gives the turn to the claimed waiter w with its lock, or nil (it then
// acquires by itself); gone: w gave up, and the lock is the caller's to
// release. A slot handle passes only the lock; without one, its w requeues.
func (t *turn) pass(w *waiter, l *Lock) (orphan *Lock, gone bool) {
	t.once.Do(func() {
		gs := t.gs
		next := &turn{gs: gs, key: t.key, slots: t.slots}
		if l != nil {
			l.adoptTurn(next)
		}
		gs.mu.Lock()
		if w.gone {
			gs.mu.Unlock()
			if l == nil {
				next.leave() // a slot handle's does nothing
			}
			orphan, gone = l, true
			return
		}
		if l == nil && w.queued {
			// Back to the head of the queue: the turn is another caller's,
			// unless nobody holds it any more (no gate): then w gets it.
			if g := gs.m[t.key]; g != nil {
				w.claimed, w.queued = false, false
				g.queue = slices.Insert(g.queue, 0, w)
				gs.mu.Unlock()
				return
			}
			gs.m[t.key] = &gate{}
		}
		w.granted, w.lock = true, l
		close(w.ready)
		gs.mu.Unlock()
	})
	return orphan, gone
}

// lookAhead is what a caller acquiring withCompletion learned of its record
// while it waited, so that a hand-over need not wait for a round to learn it
// (docs/guide/RELIABILITY.md, "Once").
type lookAhead struct {
	c      *Client
	k      keys
	want   *completionRecord // the record it looks for
	mu     sync.Mutex
	done   bool       // a quorum answered, or one node found the record
	rec    recordSeen // found by the look-up, or written by a local holder
	forgot time.Time  // when a local release deleted the record: older look-ups say nothing
	at     time.Time  // when the look-up was sent
	after  time.Time  // the start of the chain it was sent after (refreshLooks)
}

// clearSince reports whether the record is known absent on a quorum, looked
// up after chainStart (RELIABILITY.md, "Hand-overs"; limit 1).
func (la *lookAhead) clearSince(chainStart time.Time) bool {
	if la == nil {
		return false
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	return la.done && !la.rec.ok && (la.at.After(chainStart) || !la.after.Before(chainStart))
}

// known is what is known of the record.
func (la *lookAhead) known() recordSeen {
	if la == nil {
		return recordSeen{}
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	return la.rec
}

// notice records that a lock of this Client writes rec, expiring from now,
// or deletes it (forgetRun: nothing is known until a look-up tells).
func (la *lookAhead) notice(rec *completionRecord) {
	la.mu.Lock()
	defer la.mu.Unlock()
	if rec.run == forgetRun {
		la.rec, la.done, la.forgot = recordSeen{}, false, time.Now()
		return
	}
	la.rec.add(recordSeen{ok: true, run: rec.run, expiry: time.Now().Add(rec.window).UnixMilli()})
}

// send looks the record up on every node in the background, after the
// start of a chain of local hand-overs (zero: as the caller starts to wait):
// found on one node, or absent on a quorum; a failed look-up decides nothing.
func (la *lookAhead) send(after time.Time) {
	c := la.c
	c.spawn(func() {
		start := time.Now()
		deadline := start.Add(c.cfg.nodeTimeout)
		r := c.broadcastLook("look", la.k.resource, c.allNodes(), c.q, deadline, false,
			[]any{"time"}, nil, lookOf(la.want))
		defer r.free()
		_ = r.wait(context.Background(), deadline, classifyLook, func() bool {
			return r.t.ok > 0 || r.t.refused >= c.q || r.pending&^r.answered == 0
		})
		la.mu.Lock()
		defer la.mu.Unlock()
		if !start.After(la.forgot) {
			return
		}
		la.rec.add(r.rec)
		if la.rec.ok || !start.Before(la.at) { // a later look-up answered first: keep it
			la.done = la.rec.ok || r.t.refused >= c.q
			la.at, la.after = start, after
		}
	})
}

// refreshLooks sends the lock's local waiters' look-ups again once a round of
// its own won it: one sent before is too old for clearSince.
func (l *Lock) refreshLooks() {
	l.mu.Lock()
	t, chain := l.turn, l.chainStart
	l.mu.Unlock()
	if t == nil || l.record == nil {
		return
	}
	t.lookers(false, func(la *lookAhead) {
		if !la.known().ok {
			la.send(chain)
		}
	})
}

// classifyLook: a record found within its window is OK, none a refusal.
func classifyLook(rep transport.Reply) outcome {
	switch {
	case rep.Err != nil:
		return outFailed
	case rep.Seen == 0:
		return outRefused
	}
	return outOK
}

// noticeRecord tells the lock's local waiters of its completion id that its
// release writes their record.
func (l *Lock) noticeRecord() {
	if l.written() == nil || l.turn == nil {
		return
	}
	rec := l.record
	l.turn.lookers(true, func(la *lookAhead) {
		if la.want.id == rec.id {
			la.notice(rec)
		}
	})
}

// lookers calls f, under the gate's lock, with each waiting caller's
// look-up (the idle one's too, withIdle).
func (t *turn) lookers(withIdle bool, f func(*lookAhead)) {
	t.gs.mu.Lock()
	defer t.gs.mu.Unlock()
	g := t.gs.m[t.key]
	if g == nil {
		return
	}
	for _, w := range g.queue {
		if w.req.look != nil {
			f(w.req.look)
		}
	}
	if w := g.idle; withIdle && w != nil && w.req.look != nil {
		f(w.req.look)
	}
}
