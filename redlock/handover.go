package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// handoffState is a lock's part in hand-overs; under the lock's mu.
type handoffState struct {
	// jumps counts the hand-overs in a row, up to this lock, that passed
	// the lock ahead of a waiter of another process in the nodes' queue;
	// firstJump is when the first of them was confirmed.
	jumps     int
	firstJump time.Time
	// settled, not nil while the lock came by an early hand-over whose
	// round is still out or failed (it may pass on only by a round that
	// respects the nodes' queue), is closed once that round is decided.
	settled <-chan struct{}
	// prev: the predecessor's token, left on the nodes that a failed early
	// hand-over did not reach; released with this lock, never before.
	prev string
}

// handoffReq is what a queued Acquire caller asks for, so that a Release of
// the same Client can acquire the lock on its behalf in the round that
// releases it (docs/design/HANDOVER.md).
type handoffReq struct {
	ttl time.Duration
	lc  *lockConfig
	tk  *ticket
	// withCompletion: the look-up sent as the caller started to wait
	// (gate.go).
	look *lookAhead
}

// The waiter queue keeps Acquire callers of different processes in FIFO
// order on every node; docs/design/HANDOVER.md explains the design and why it is
// safe. Each node has, per resource, a sorted set of waiters by ticket and a
// sorted set of their lease ends. A release hands the key to the queue head
// as a reservation (reservePrefix + waiter id, with the lease as TTL), which
// plain SET NX, i.e. newcomers, cannot take.

// ticket is an Acquire call's place in a resource's waiter queue: its start
// time in microseconds (the same on every node, so all nodes order the same
// waiters alike) and a random id that breaks ties and names its entries.
type ticket struct {
	score int64
	id    string
}

func newTicket() *ticket {
	return &ticket{score: time.Now().UnixMicro(), id: rand.Text()[:16]}
}

// queueKeys are the lock key, the waiter queue, the queue's lease ends and
// the fencing counter.
func (k keys) queueKeys() []string {
	return []string{k.key, k.key + ":q", k.key + ":qx", k.fenceKey}
}

// queueLease is how long a waiter's queue entry, or a reservation for it,
// lasts without being renewed: well above the longest gap between two
// attempts of a live waiter (a retry delay plus an attempt), so that only a
// waiter that is gone lets its entry lapse, and a dead waiter holds the
// others back for at most this long.
func (c *Client) queueLease() time.Duration {
	return max(500*time.Millisecond, 4*(c.cfg.retryMax+c.cfg.nodeTimeout))
}

// claim takes the next local waiter out of the turn's queue for a hand-over.
// The resource's queue stays, so that callers arriving meanwhile queue behind.
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
		g.queue[0] = nil
		g.queue = g.queue[1:]
		w.queued = t.slots
	}
	w.claimed = true
	return w
}

// waited reports whether a local waiter is queued for the turn (claim would
// return one, unless it gives up meanwhile).
func (t *turn) waited() bool {
	if t == nil {
		return false
	}
	t.gs.mu.Lock()
	defer t.gs.mu.Unlock()
	_, w := t.next()
	return w != nil
}

// next is the waiter a hand-over would go to, with its gate: for a slot
// holder's handle the caller holding the turn, paused between its rounds
// (the oldest), else the first caller queued if it says what it asks for.
// Called with gs.mu held.
func (t *turn) next() (*gate, *waiter) {
	g := t.gs.m[t.key]
	switch {
	case g == nil:
		return nil, nil
	case t.slots && g.idle != nil:
		return g, g.idle
	case len(g.queue) == 0 || g.queue[0].req == nil:
		return nil, nil
	}
	return g, g.queue[0]
}

// pass gives the turn to a claimed waiter, with the lock acquired for it or
// nil (it then acquires by itself). When the waiter gave up meanwhile, gone
// is true and the lock is returned for the caller to release (its turn
// moves on then).
// A slot holder's handle (t.slots) passes only the lock: the turn is not
// its to give. A waiter claimed from the queue whose hand-over failed goes
// back to the queue's head.
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
				g.queue = append([]*waiter{w}, g.queue...)
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

// tryHandOver is Release's hand-over path: when a local waiter is queued
// and the lock does not owe the nodes' queue its turn, the lock passes to the
// waiter in one round. It reports whether it handed over, and then Release's
// result.
func (l *Lock) tryHandOver(ctx context.Context) (handed bool, err error) {
	ho, until := l.settledHandoff(ctx)
	if ho.owesQueue(time.Now()) {
		return false, nil
	}
	w := l.turn.claim()
	if w == nil {
		return false, nil
	}
	if l.limit > 1 {
		// The waiter asked for any slot: it gets this one. Its ticket
		// stays out: it leaves the nodes' queue itself (giveUp).
		lc := *w.req.lc
		lc.slot = l.slot
		w.req = &handoffReq{ttl: w.req.ttl, lc: &lc, look: w.req.look}
	}
	return true, l.handOver(ctx, w, until, ho)
}

// settledHandoff returns the lock's hand-over state and validity, once the
// round that handed it over is decided (within a node timeout) if a local
// waiter could get the lock then: waiting costs less than passing through
// the nodes' queue (docs/design/HANDOVER.md).
func (l *Lock) settledHandoff(ctx context.Context) (handoffState, time.Time) {
	l.mu.Lock()
	ho, until := l.handoff, l.until
	l.mu.Unlock()
	if ho.settled == nil || ho.owesQueue(time.Now()) || !l.turn.waited() {
		return ho, until
	}
	t := time.NewTimer(l.c.cfg.nodeTimeout)
	defer t.Stop()
	select {
	case <-ho.settled:
	case <-ctx.Done():
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handoff, l.until
}

// owesQueue reports whether a release at now must go to the nodes' queue:
// the lock passed ahead of a remote waiter maxJumps times in a row, or the
// first of those jumps is maxJumpSpan old.
func (ho handoffState) owesQueue(now time.Time) bool {
	return ho.jumps >= maxJumps || ho.jumps > 0 && now.Sub(ho.firstJump) >= maxJumpSpan
}

// maxJumps and maxJumpSpan bound the local hand-overs in a row that may
// pass ahead of a waiter of another process: not once, because a local
// hand-over keeps a hot lock far busier (docs/design/HANDOVER.md).
const (
	maxJumps    = 16
	maxJumpSpan = 100 * time.Millisecond
)

// handOver sends turnScript to pass l's keys to a new token for the claimed
// waiter w: early (at once, with the shorter of l's validity and the new
// one's) or waiting for the round (fencing, or too little validity left),
// as docs/design/HANDOVER.md argues. ctx only bounds how long Release waits.
func (l *Lock) handOver(ctx context.Context, w *waiter, until time.Time, ho handoffState) error {
	c, k, req := l.c, l.res, w.req
	token := newToken(req.lc.suffix)
	start := time.Now()
	if end := start.Add(req.ttl - driftAllowance(req.ttl, c.cfg.driftFactor)); end.Before(until) {
		until = end
	}
	if rec := l.written(); rec != nil && req.lc.rec != nil && req.lc.rec.id == rec.id {
		req.look.notice(rec) // the waiter may have left the queue noticeRecord walks
	}
	// Under a limit, a look-up's absence does not stay true: other
	// processes' slots are held beside this chain, and their holders may
	// have recorded the work since (issue 45, 5(b)).
	known := req.lc.rec == nil || req.look.known().ok || req.lc.limit <= 1 && req.look.clearSince(l.chainStart)
	early := ho.settled == nil && !req.lc.fencing && known && time.Until(until) > 2*c.cfg.nodeTimeout+lossGuard(req.ttl)
	deadline := start.Add(c.cfg.nodeTimeout)
	s, args := c.turnCall(k, l.token, token, req, early, l.written())
	r := c.broadcastLook("handover", k.resource, c.allNodes(), c.q, deadline, false, args, s, lookOf(req.lc.rec))
	var next *Lock
	var settled chan struct{}
	if early {
		settled = make(chan struct{})
		next = c.newLock(k, token, 0, req.ttl, start, until, req.lc)
		next.found = req.look.known()
		next.chainStart = l.chainStart
		next.mu.Lock()
		next.handoff = handoffState{jumps: ho.jumps, firstJump: ho.firstJump, settled: settled}
		next.mu.Unlock()
	}
	done := make(chan error, 1)
	settling := c.spawn(func() {
		passed, err := l.settleHandOver(r, deadline, w, next, token, start, settled, ho)
		done <- err
		if passed {
			l.dropResidue(r, deadline)
		}
	})
	if early || !settling {
		// Readied last, the successor runs first: goroutine order in
		// docs/design/HANDOVER.md.
		if orphan, _ := l.turn.pass(w, next); orphan != nil && !c.spawn(func() { _ = orphan.Release(context.Background()) }) {
			_ = orphan.Release(context.Background()) // closed client: ends its watchdog
		}
	}
	if !settling {
		if settled != nil {
			close(settled)
		}
		r.idle()
		return ErrClosed
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settleHandOver decides the hand-over round (settled, early hand-overs
// only, is closed once the successor's state is). On success the waiter holds
// the lock on the new token. Otherwise a waiter that was still waiting
// acquires by itself once both tokens are released (reserving the key for
// the nodes' queue head); one that had started keeps its lock and the
// validity it was given (confirmHandOver), and nothing is released. passed
// reports that the successor holds the lock by this round.
func (l *Lock) settleHandOver(r *round, deadline time.Time, w *waiter, next *Lock, token string, start time.Time, settled chan struct{}, ho handoffState) (passed bool, _ error) {
	c, k, req := l.c, l.res, w.req
	// Decided for the successor; when it did not get the lock, Release's
	// answer for l also needs to know whether a majority dropped l's token.
	_ = r.wait(context.Background(), deadline, classifyTurn, func() bool {
		return r.t.success() || (r.t.decided() && (r.releasedOn() >= c.q || r.pending&^r.answered == 0))
	})
	early := next != nil
	var err error
	if early {
		// A failed round frees nothing: the successor may be running
		// already, protected by the validity it was given, which the keys
		// it holds or l's outlast (docs/design/HANDOVER.md).
		err = next.confirmHandOver(r, start, l.token, req)
		close(settled) // next's release may go on (settledHandoff)
	} else if next, err = c.handedLock(r, k, token, start, req); err != nil {
		l.unlockQueued(token, c.allNodes())
		l.unlockQueued(l.token, c.allNodes())
	} else if next.chainStart = l.chainStart; r.jumped() {
		// A slot's hand-over (which does not ask the nodes' queue)
		// counts as passing ahead of other processes' waiters, in this
		// mode too.
		next.mu.Lock()
		next.handoff = ho.jumped(time.Now())
		next.mu.Unlock()
	}
	if mask := r.notSet(); err == nil && mask != 0 {
		c.leaveQueue(k, req.tk, 1, mask)
	}
	if !early {
		orphan, gone := l.turn.pass(w, next)
		if orphan != nil {
			_ = orphan.Release(context.Background())
		} else if gone && req.tk != nil {
			// Nobody will acquire with this ticket: drop the entry the
			// round may have queued for it, so that no release reserves
			// the key for a waiter that left.
			c.leaveQueue(k, req.tk, 1, c.allNodes())
		}
	}
	l.noticeRecord() // for callers that queued while the round was out
	if c.cfg.onHandOver != nil {
		c.cfg.onHandOver(err)
	}
	return err == nil, r.releaseResult(err)
}

// dropResidue releases l's token where a hand-over round that passed the
// lock on did not set the new one, once the round's stragglers are heard:
// a key left there would hold the resource for the rest of l's TTL (issue
// 20, docs/design/HANDOVER.md).
func (l *Lock) dropResidue(r *round, deadline time.Time) {
	_ = r.collectAll(context.Background(), deadline, classifyTurn)
	l.unlockQueued(l.token, r.notSet())
}

// dropPrevAtEnd, for a lock being lost or left to expire (l.mu held),
// releases the predecessor's token a failed early hand-over left behind
// (handoff.prev) once l's validity has ended, not before: l's holder may run
// until then.
func (l *Lock) dropPrevAtEnd() {
	prev := l.handoff.prev
	if prev == "" {
		return
	}
	time.AfterFunc(time.Until(l.until), func() { l.unlockQueued(prev, l.c.allNodes()) })
}

// confirmHandOver applies the round of a hand-over whose successor l started
// at once: its validity now counts from the round. When the round failed, l
// keeps its first validity, unconfirmed, and no key of it or prev is
// released before l is (docs/design/HANDOVER.md, "Early").
func (l *Lock) confirmHandOver(r *round, start time.Time, prev string, req *handoffReq) error {
	c := l.c
	l.mu.Lock()
	if !r.t.success() {
		l.handoff.prev = prev
		switch l.state {
		case stateHeld:
			// Under l.mu, so that l's release reaches each node after it.
			c.retryTurn(l.res, prev, l.token, req, r.notSet())
		case stateReleased:
			// l was released before the round failed, without prev; its
			// ticket, queued where the round was refused, is dead.
			l.unlockQueued(prev, c.allNodes())
			c.leaveQueue(l.res, req.tk, 1, r.notSet())
		}
		l.mu.Unlock()
		return r.err([]error{ErrQuorum}, fmt.Sprintf("hand-over set on %d of %d nodes (quorum %d); the successor keeps its first validity", r.t.ok, r.t.total, c.q))
	}
	// It passed ahead of a waiter of another process: after maxJumps such
	// hand-overs in a row, or maxJumpSpan after the first, the next
	// release goes to the nodes' queue.
	ho := handoffState{}
	if r.jumped() {
		ho = l.handoff.jumped(time.Now())
	}
	l.handoff = ho
	if l.state == stateHeld {
		l.until = lockutil.Later(l.until, start.Add(l.ttl-driftAllowance(l.ttl, c.cfg.driftFactor)))
		l.watchdog.Reset(time.Until(l.until) - lossGuard(l.ttl))
	}
	l.mu.Unlock()
	return nil
}

// jumped is the hand-over state of the successor of a lock whose state is
// ho, passed on ahead of waiters of other processes at now: one more jump.
func (ho handoffState) jumped(now time.Time) handoffState {
	next := handoffState{jumps: ho.jumps + 1, firstJump: ho.firstJump}
	if next.jumps == 1 {
		next.firstJump = now
	}
	return next
}

// releaseResult is Release's answer for the previous holder of a hand-over
// round: nil when the lock passed on or a majority released its token;
// ErrLockLost when too few nodes can still have held it, as Release says.
func (r *round) releaseResult(err error) error {
	released := r.releasedOn()
	notMine := r.t.ok + r.t.refused - released
	switch {
	case err == nil || released >= r.c.q:
		return nil
	case r.t.total-notMine < r.c.q:
		return r.err([]error{ErrLockLost}, fmt.Sprintf("only %d of %d nodes still held the lock at release", released, r.t.total))
	}
	return r.err([]error{ErrQuorum}, "release not confirmed by a majority; the keys expire within the TTL")
}

// releasedOn counts the nodes that answered that they dropped the previous
// holder's token (for the new one or for the nodes' queue).
func (r *round) releasedOn() int {
	n := 0
	for _, sl := range r.slots {
		if sl.out == outOK || sl.out == outRefused {
			if rel, _, _ := turnReply(sl.val); rel {
				n++
			}
		}
	}
	return n
}

// handedLock builds the successor's lock from a won hand-over round, as
// attempt does for a won acquire round.
func (c *Client) handedLock(r *round, k keys, token string, start time.Time, req *handoffReq) (*Lock, error) {
	if !r.t.success() {
		return nil, r.err(r.t.causes(), fmt.Sprintf("hand-over set on %d of %d nodes (quorum %d)", r.t.ok, r.t.total, c.q))
	}
	until := start.Add(req.ttl - driftAllowance(req.ttl, c.cfg.driftFactor))
	if !time.Now().Before(until) {
		return nil, r.err([]error{ErrQuorum}, "hand-over reached its quorum past the validity")
	}
	var fence int64
	if req.lc.fencing {
		var err error
		if fence, err = c.settleFence(context.Background(), r, true, k, until, stepOf(req.lc)); err != nil {
			return nil, err
		}
	}
	next := c.newLock(k, token, fence, req.ttl, start, until, req.lc)
	next.found = req.look.known()
	next.found.add(r.rec)
	return next, nil
}

// unlockQueued releases token from l's key (its slot's, under a limit) on
// the nodes in mask, reserving the key for the queue head and announcing it,
// without waiting for the answers.
func (l *Lock) unlockQueued(token string, mask uint64) {
	c, k := l.c, l.res
	if mask == 0 || c.isClosed() {
		return
	}
	s, args := queueReleaseScript, c.releaseArgs(k, token, nil)
	if l.limit > 1 {
		s, args = c.slotRelease(k, token, k.channel, int(l.slot), int(l.limit), nil)
	}
	c.broadcast("release", k.resource, mask, len(c.nodes), time.Now().Add(c.cfg.nodeTimeout), true, args, s).free()
}

// retryTurn sends a failed early hand-over's script again, without waiting,
// to the nodes in mask that did not answer that they set the new token
// (where a dropped call left prev); the successor's ticket, queued by a
// refusal, leaves the queue at once.
func (c *Client) retryTurn(k keys, prev, token string, req *handoffReq, mask uint64) {
	if mask == 0 || c.isClosed() {
		return
	}
	s, args := c.turnCall(k, prev, token, req, true, nil)
	c.broadcast("handover", k.resource, mask, 1, time.Now().Add(c.cfg.nodeTimeout), true, args, s).free()
	c.leaveQueue(k, req.tk, 1, mask)
}

// notSet is the mask of nodes that did not answer that they set the round's
// token, stragglers included: a successor's waiter entry may be left there,
// or come later (a node still pending when the round was decided may refuse
// and queue it), and a release there would reserve the key for a waiter
// that no longer waits, for a lease. Leaving is harmless where it was set.
func (r *round) notSet() uint64 {
	var m uint64
	for i := range r.c.nodes {
		if r.slots[i].out != outOK {
			m |= 1 << i
		}
	}
	return m
}

// turnCall builds a hand-over round's script and arguments for req (see
// turnArgs): for a slot of a limited resource, slotTurnScript, which does
// not ask the waiter queue. With rec, the releasing holder of old writes
// its completion record where old still held the key.
func (c *Client) turnCall(k keys, old, token string, req *handoffReq, keep bool, rec *completionRecord) (*transport.Script, []any) {
	lc := req.lc
	if lc.limit > 1 {
		return slotTurnScript, recordedArgs(slotTurnScript, k.bothKeys(), rec, old, token, req.ttl.Milliseconds(),
			flag(lc.fencing), fenceRetentionMs, fenceClasses, lc.slot)
	}
	return turnScript, c.turnArgs(k, old, token, req.ttl, req.tk, lc, keep, rec)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// releaseArgs builds queueReleaseScript's arguments for a holder's release.
func (c *Client) releaseArgs(k keys, token string, rec *completionRecord) []any {
	return recordedArgs(queueReleaseScript, k.queueKeys()[:3], rec, token, c.queueLease().Milliseconds(), k.channel)
}

// turnReply reads one node's turnScript answer.
func turnReply(v any) (released, set bool, fence int64) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return false, false, 0
	}
	r, _ := a[0].(int64)
	s, _ := a[1].(int64)
	f, _ := a[2].(int64)
	return r == 1, s == 1, f
}

// jumped reports whether a keep-mode hand-over passed the lock ahead of a
// waiter queued on any node that answered.
func (r *round) jumped() bool {
	for _, sl := range r.slots {
		if a, ok := sl.val.([]any); ok && len(a) == 4 {
			if j, _ := a[3].(int64); j == 1 {
				return true
			}
		}
	}
	return false
}

// classifyTurn counts a node that set the new token as OK.
func classifyTurn(rep transport.Reply) outcome {
	if rep.Err != nil {
		return outFailed
	}
	if _, set, _ := turnReply(rep.Val); set {
		return outOK
	}
	return outRefused
}
