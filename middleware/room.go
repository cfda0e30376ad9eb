package middleware

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// room is a process's places for its tasks, shared by every middleware given
// the same WithRoom option: run places for the tasks that try for their locks or run
// their handlers, and wait places for the tasks that wait for a busy lock,
// shared among the hot resources by their WithLimit slots, half the larger
// number at most each. Give asynq's server as many workers as both
// (docs/guide/HOTKEYS.md, "Waiting beside running"). Safe for concurrent use.
type room struct {
	run        *runGate // nil: no bound on running tasks
	wait       *waitCap // nil: waiting tasks take run places
	maxWaiters int
}

// newRoom returns a room of run places (0: no bound but asynq's Concurrency)
// and wait places (0: tasks wait in run places).
func newRoom(run, wait int) *room {
	r := &room{maxWaiters: max(1, max(run, wait)/2)}
	if run > 0 {
		r.run = &runGate{size: run}
	}
	if wait > 0 {
		r.wait = newWaitCap(wait)
	}
	return r
}

// runGate is a Room's run places.
type runGate struct {
	mu          sync.Mutex
	size, taken int
	// Tasks waiting for a place, oldest first: [0] the holders of their
	// locks, let in first; [1] the tasks that have not tried yet.
	queues [2][]chan struct{}
}

// leave gives a place back, to the first waiter if there is one.
func (g *runGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queues {
		if len(q) > 0 {
			close(q[0])
			g.queues[i] = q[1:]
			return
		}
	}
	g.taken--
}

// place is one task's place in a gate, of the task's goroutine; nil does nothing.
type place struct {
	g    *runGate
	held bool
}

func (g *runGate) place() *place {
	if g == nil {
		return nil
	}
	return &place{g: g}
}

// take takes the place if not held, waiting while the gate is full, until
// ctx ends; a holder of its lock is let in ahead of the others.
func (p *place) take(ctx context.Context, holder bool) error {
	if p == nil || p.held {
		return nil
	}
	g := p.g
	g.mu.Lock()
	if g.taken < g.size { // then nobody waits: leave hands places on
		g.taken++
		g.mu.Unlock()
		p.held = true
		return nil
	}
	ch, q := make(chan struct{}), &g.queues[1]
	if holder {
		q = &g.queues[0]
	}
	*q = append(*q, ch)
	g.mu.Unlock()
	select {
	case <-ch:
		p.held = true
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	i := slices.Index(*q, ch)
	if i >= 0 {
		*q = slices.Delete(*q, i, i+1)
	}
	g.mu.Unlock()
	if i < 0 { // let in as ctx ended: pass it on
		g.leave()
	}
	return context.Cause(ctx)
}

func (p *place) drop() {
	if p != nil && p.held {
		p.held = false
		p.g.leave()
	}
}

type waitHow uint8

const (
	waitFresh waitHow = iota // a task that met its resource busy, with parking
	waitSoft                 // the same without parking, where a requeue costs more
	waitPast                 // a task parked once: past the share, within the cap
)

// admits takes a wait place for a task of res (limit slots), n of whose tasks
// wait here already: fewer than freshShare wait, or (soft) the tasks ahead
// should be done soon (short), or past the share (waitPast).
func (r *room) admits(res string, limit, n int, how waitHow, short bool) bool {
	full := how != waitPast && n >= r.freshShare(res, limit, how == waitSoft)
	if full && (how == waitFresh || r.maxWaiters == 0 || !short) {
		return false
	}
	return r.wait.enter(res, limit)
}

// freshShare is how many tasks of a process may wait for res (limit slots)
// when a task meets it busy: maxWaiters per slot, with parking (not soft)
// half of it and of res's share of the wait places.
func (r *room) freshShare(res string, limit int, soft bool) int {
	if soft || r.maxWaiters <= 1 {
		return r.maxWaiters * limit
	}
	return min(r.maxWaiters/2*limit, max(1, r.wait.share(res, limit)/2))
}

// depths bound the promoted tasks of one resource on their way at once.
type depths struct {
	busy int // while other tasks of the queue wait for a worker
	idle int // while none do
}

// promoteDepth is as many promoted tasks of res (limit slots) as one process
// lets wait (at least 2), three times that without a backlog, and (shared)
// at most res's share (docs/guide/HOTKEYS.md, "Promote ahead").
func (r *room) promoteDepth(res string, limit int, shared bool) depths {
	n, share := max(1, r.maxWaiters)*limit, math.MaxInt
	if shared {
		share = r.wait.share(res, limit)
	}
	n = min(n, share)
	return depths{busy: max(2, n), idle: max(2, min(3*n, share))}
}

var errWaitCap = fmt.Errorf("middleware: %w: the waiters across resources are at their cap", redlock.ErrLocked)

// waitCap is a Room's wait places, each resource with waiters an equal share
// per slot (docs/guide/HOTKEYS.md, "Several hot resources").
type waitCap struct {
	max       int
	now, most atomic.Int64 // tasks in the middleware now, most at once (arrive)

	mu    sync.Mutex
	total int
	per   map[string]waiters // the resources with waiters or refused lately
}

// waiters is a resource's waiters and slots; one refused while it had none
// counts until claimed (docs/guide/HOTKEYS.md, "Refused resources count").
type waiters struct {
	n, limit int
	claimed  time.Time
}

const claimFor = time.Second // how long a refused resource with no waiter counts

// arrive counts a task that entered a middleware whose default wait places
// (mw.atOnce) are two thirds of the most tasks seen at once, as worker.New
// gives its waiting tasks.
func (c *waitCap) arrive() {
	n := c.now.Add(1)
	for m := c.most.Load(); n > m; m = c.most.Load() {
		if c.most.CompareAndSwap(m, n) {
			c.mu.Lock()
			c.max = max(int(2*n/3), 1)
			c.mu.Unlock()
			return
		}
	}
}

func newWaitCap(n int) *waitCap {
	return &waitCap{max: max(n, 1), per: make(map[string]waiters)}
}

// enter takes a slot for a waiter of res, a resource of limit slots, if the
// cap and res's share allow. A nil cap always allows.
func (c *waitCap) enter(res string, limit int) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	w := c.per[res]
	if c.total >= c.max || w.n >= c.shareLocked(res, limit, now) {
		if w.n == 0 {
			c.per[res] = waiters{limit: limit, claimed: now.Add(claimFor)}
		}
		return false
	}
	c.add(res, w, limit)
	return true
}

// add counts a waiter of res (entry w), a resource of limit slots; c.mu is held.
func (c *waitCap) add(res string, w waiters, limit int) {
	if w.n == 0 {
		w = waiters{limit: limit}
	}
	w.n++
	c.per[res] = w
	c.total++
}

// share is how many tasks of res may wait under the cap now (at least one;
// math.MaxInt for a nil cap).
func (c *waitCap) share(res string, limit int) int {
	if c == nil {
		return math.MaxInt
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shareLocked(res, limit, time.Now())
}

// shareLocked is share with c.mu held; it drops the claims that are over.
func (c *waitCap) shareLocked(res string, limit int, now time.Time) int {
	weight := 0
	if c.per[res].n == 0 {
		weight = limit
	}
	for r, w := range c.per {
		switch {
		case w.n == 0 && now.After(w.claimed):
			delete(c.per, r)
		case w.n > 0 || r != res:
			weight += w.limit
		}
	}
	return max(1, c.max*limit/weight)
}

func (c *waitCap) leave(res string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.per[res]; w.n > 1 {
		w.n--
		c.per[res] = w
	} else {
		delete(c.per, res)
	}
	c.total--
}
