package redlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// gates queues a process's own Acquire callers per resource, in FIFO order,
// so that only the head contends on the nodes. It is an optimisation of who
// asks, never a substitute for the quorum: the head still has to win it.
// Callers withCompletion learn of their record while they wait (lookAhead).
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

// lookAhead is what a caller acquiring withCompletion learned of its record
// while it waited in its Client's queue: a look-up sent as it started to
// wait, so that a hand-over need not wait for a round to learn it (docs/
// RELIABILITY.md, "Once: what the completion record covers"). Safe for
// concurrent use.
type lookAhead struct {
	c    *Client
	k    keys
	want *completionRecord // the record it looks for
	mu   sync.Mutex
	done bool // a quorum answered, or one node found the record
	// rec: the record exists (the look-up, or a local holder of the same
	// id wrote it), with its run and expiry
	rec recordSeen
	// forgot: when a local holder's release deleted the record
	// (forgetCompletion): a look-up sent before says nothing.
	forgot time.Time
	at     time.Time // when the look-up was sent
	// after is the start of the chain the look-up was sent after
	// (refreshLooks): at may equal it on a coarse clock.
	after time.Time
}

// clearSince reports whether the record is known absent for a hand-over
// from a lock whose chain of local hand-overs began at chainStart: the
// look-up found nothing on a quorum, and was sent after that chain began
// (docs/guide/RELIABILITY.md, "Hand-overs", says why that is enough; limit
// 1 only).
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

// notice records that a lock of this Client writes rec (its expiry from
// now on this process's clock: a local hand-over's successor starts right
// after it), or deletes it (forgetRun): then nothing is known of it until a
// look-up or a round tells.
func (la *lookAhead) notice(rec *completionRecord) {
	la.mu.Lock()
	defer la.mu.Unlock()
	if rec.run == forgetRun {
		la.rec, la.done, la.forgot = recordSeen{}, false, time.Now()
		return
	}
	la.rec.add(recordSeen{ok: true, run: rec.run, expiry: time.Now().Add(rec.window).UnixMilli()})
}

// send looks the record up in the background: for a caller that starts to
// wait, or waits behind a chain of local hand-overs that began at after.
func (la *lookAhead) send(after time.Time) {
	la.c.spawn(func() { la.lookUp(after) })
}

// lookUp sends the look-up to every node and records the answer: found
// when a node has the record, absent when a quorum answered that it has
// not. A failed look-up leaves it undecided: a hand-over then waits for its
// round, which looks again.
func (la *lookAhead) lookUp(after time.Time) {
	c := la.c
	start := time.Now()
	deadline := start.Add(c.cfg.nodeTimeout)
	r := c.broadcastLook("look", la.k.resource, c.allNodes(), c.q, deadline, false, []any{"time"}, nil, lookOf(la.want))
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
	if la.rec.ok || !start.Before(la.at) { // a look-up sent earlier answers after a later one: keep the later
		la.done = la.rec.ok || r.t.refused >= c.q
		la.at, la.after = start, after
	}
}

// refreshLooks sends the look-ups of this Client's callers waiting for the
// lock's resource again once the lock was decided by a round of its own: a
// look-up sent before that (the caller waited behind another process's
// holder) is too old for clearSince, and each of their hand-overs would wait
// for its round. A look-up sent now is as good as one of a caller that starts
// to wait now.
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

// classifyLook reads a look-up's answer (the call is a TIME, its look-up
// the record's): a record found within its window is OK, none a refusal.
func classifyLook(rep transport.Reply) outcome {
	switch {
	case rep.Err != nil:
		return outFailed
	case rep.Seen == 0:
		return outRefused
	}
	return outOK
}

// noticeRecord tells this Client's callers waiting for the lock's resource
// with the lock's completion id that the lock's release writes their
// record: a hand-over that reaches one of them later, through other locks
// of this Client, need not look again.
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

// lookers calls f, under the gate's lock, with the look-up of each caller
// of t's resource that waits with one (the one parked between its rounds
// too, withIdle).
func (t *turn) lookers(withIdle bool, f func(*lookAhead)) {
	t.gs.mu.Lock()
	defer t.gs.mu.Unlock()
	g := t.gs.m[t.key]
	if g == nil {
		return
	}
	for _, w := range g.queue {
		if w.req != nil && w.req.look != nil {
			f(w.req.look)
		}
	}
	if w := g.idle; withIdle && w != nil && w.req != nil && w.req.look != nil {
		f(w.req.look)
	}
}
