package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// A released lock's hand-over to a local waiter in the releasing round, and
// the nodes' waiter queue: docs/design/HANDOVER.md argues each step's safety.

// handoffState is a lock's part in hand-overs; under the lock's mu.
type handoffState struct {
	// jumps counts the hand-overs in a row, up to this lock, that passed
	// ahead of a waiter of another process; firstJump is the first's time.
	jumps     int
	firstJump time.Time
	// settled, while the lock came by an early hand-over whose round is out
	// or failed, is closed once that round is decided.
	settled <-chan struct{}
	// prev: the predecessor's token a failed early hand-over left behind;
	// released with this lock, never before.
	prev string
}

// handoffReq is what a queued Acquire caller asks for, so that a Release of
// the same Client can acquire the lock for it in the releasing round.
type handoffReq struct {
	ttl  time.Duration
	lc   *lockConfig
	tk   *ticket
	look *lookAhead // withCompletion: sent as the caller started to wait
}

// ticket is an Acquire call's place in a resource's waiter queue on the
// nodes: its start time in microseconds, the same on every node so that all
// nodes order the same waiters alike, and a random id that breaks ties.
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

// queueLease is how long a queue entry, or a reservation for it, lasts
// unrenewed: well above the longest gap between two attempts of a live
// waiter, so that only a dead one lapses, and holds the others back no longer.
func (c *Client) queueLease() time.Duration {
	return max(500*time.Millisecond, 4*(c.cfg.retryMax+c.cfg.nodeTimeout))
}

// maxJumps and maxJumpSpan bound the local hand-overs in a row that may
// pass ahead of a waiter of another process: not once, because a local
// hand-over keeps a hot lock far busier.
const (
	maxJumps    = 16
	maxJumpSpan = 100 * time.Millisecond
)

// owesQueue reports whether a release at now must go to the nodes' queue.
func (ho handoffState) owesQueue(now time.Time) bool {
	return ho.jumps >= maxJumps || ho.jumps > 0 && now.Sub(ho.firstJump) >= maxJumpSpan
}

// after is the hand-over state of the successor of a lock whose state is
// ho, passed on at now: one more jump if it jumped the nodes' queue.
func (ho handoffState) after(jumped bool, now time.Time) handoffState {
	if !jumped {
		return handoffState{}
	}
	if ho.jumps == 0 {
		ho.firstJump = now
	}
	return handoffState{jumps: ho.jumps + 1, firstJump: ho.firstJump}
}

// tryHandOver is Release's hand-over path: unless the lock owes the nodes'
// queue its turn, a queued local waiter gets the lock in one round. It
// reports whether it handed over, and then Release's result.
func (l *Lock) tryHandOver(ctx context.Context) (handed bool, err error) {
	l.mu.Lock()
	ho, until := l.handoff, l.until
	l.mu.Unlock()
	if ho.settled != nil && !ho.owesQueue(time.Now()) && l.turn.waited() {
		// Waiting (a node timeout at most) for the round that handed l over
		// to decide costs less than passing through the nodes' queue.
		select {
		case <-ho.settled:
		case <-ctx.Done():
		case <-time.After(l.c.cfg.nodeTimeout):
		}
		l.mu.Lock()
		ho, until = l.handoff, l.until
		l.mu.Unlock()
	}
	if ho.owesQueue(time.Now()) {
		return false, nil
	}
	w := l.turn.claim()
	if w == nil {
		return false, nil
	}
	if l.limit > 1 {
		// The waiter asked for any slot: it gets this one. Its ticket
		// stays out: it leaves the nodes' queue itself (acquireLoop).
		lc := *w.req.lc
		lc.slot = l.slot
		w.req = &handoffReq{ttl: w.req.ttl, lc: &lc, look: w.req.look}
	}
	return true, l.handOver(ctx, w, until, ho)
}

// handOverRound is one hand-over round of l's keys to the claimed waiter
// w's new token, sent at start.
type handOverRound struct {
	l     *Lock
	w     *waiter
	r     *round
	token string
	start time.Time
	ho    handoffState // l's
	// Early mode only: the successor, started at once, and closed once the
	// round decided its state.
	next    *Lock
	settled chan struct{}
}

// handOver sends turnScript to pass l's keys to a new token for the claimed
// waiter w: early (at once, with the shorter of l's validity and the new
// one's) or waiting for the round (fencing, or too little validity left).
// ctx only bounds how long Release waits.
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
	// processes' slots are held beside this chain (issue 45, 5(b)).
	known := req.lc.rec == nil || req.look.known().ok || req.lc.limit <= 1 && req.look.clearSince(l.chainStart)
	early := ho.settled == nil && !req.lc.fencing && known && time.Until(until) > 2*c.cfg.nodeTimeout+lossGuard(req.ttl)
	s, args := c.turnCall(k, l.token, token, req, early, l.written())
	deadline := start.Add(c.cfg.nodeTimeout)
	h := &handOverRound{l: l, w: w, token: token, start: start, ho: ho,
		r: c.broadcastLook("handover", k.resource, c.allNodes(), c.q, deadline, false, args, s, lookOf(req.lc.rec))}
	if early {
		h.settled = make(chan struct{})
		h.next = c.newLock(k, token, 0, req.ttl, start, until, req.lc)
		h.next.found = req.look.known()
		h.next.chainStart = l.chainStart
		h.next.mu.Lock()
		h.next.handoff = handoffState{jumps: ho.jumps, firstJump: ho.firstJump, settled: h.settled}
		h.next.mu.Unlock()
	}
	done := make(chan error, 1)
	settling := c.spawn(func() { h.settle(done) })
	if early || !settling {
		// Readied last, the successor runs first (HANDOVER.md, goroutine order).
		if orphan, _ := l.turn.pass(w, h.next); orphan != nil && !c.spawn(func() { _ = orphan.Release(context.Background()) }) {
			_ = orphan.Release(context.Background()) // closed client: ends its watchdog
		}
	}
	if !settling {
		if h.settled != nil {
			close(h.settled)
		}
		h.r.idle()
		return errClosed
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settle decides the hand-over round and sends Release's answer on done. On
// success the waiter holds the lock on the new token (dropResidue follows).
// Otherwise a waiter still waiting acquires by itself once both tokens are
// released; one that had started keeps its lock and nothing is released.
func (h *handOverRound) settle(done chan<- error) {
	l, r, next, req := h.l, h.r, h.next, h.w.req
	c, k := l.c, l.res
	// When the successor did not get the lock, Release's answer for l also
	// needs to know whether a majority dropped l's token.
	_ = r.wait(context.Background(), r.deadline, classifyTurn, func() bool {
		return r.t.success() || (r.t.decided() && (r.releasedOn() >= c.q || r.pending&^r.answered == 0))
	})
	var err error
	if next != nil {
		err = h.confirm()
		close(h.settled) // next's release may go on (tryHandOver)
	} else if next, err = h.successor(); err != nil {
		l.unlockQueued(h.token, c.allNodes())
		l.unlockQueued(l.token, c.allNodes())
	}
	if mask := r.notSet(); err == nil && mask != 0 {
		c.leaveQueue(k, req.tk, 1, mask)
	}
	if h.next == nil {
		orphan, gone := l.turn.pass(h.w, next)
		if orphan != nil {
			_ = orphan.Release(context.Background())
		} else if gone && req.tk != nil {
			// Nobody will acquire with this ticket: no release may reserve
			// the key for the entry the round may have queued.
			c.leaveQueue(k, req.tk, 1, c.allNodes())
		}
	}
	l.noticeRecord() // for callers that queued while the round was out
	if c.cfg.onHandOver != nil {
		c.cfg.onHandOver(err)
	}
	done <- r.releaseResult(err)
	if err == nil {
		l.dropResidue(r)
	}
}

// confirm applies the round to the successor started at once: its validity
// now counts from the round. When the round failed, it keeps its first
// validity, unconfirmed, and no key of it or of its predecessor is released
// before it is: it may be running already (HANDOVER.md, "Early").
func (h *handOverRound) confirm() error {
	l, r, prev, req := h.next, h.r, h.l.token, h.w.req
	c := l.c
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.t.success() {
		l.handoff = l.handoff.after(r.jumped(), time.Now())
		if l.state == stateHeld {
			l.until = lockutil.Later(l.until, h.start.Add(l.ttl-driftAllowance(l.ttl, c.cfg.driftFactor)))
			l.watchdog.Reset(time.Until(l.until) - lossGuard(l.ttl))
		}
		return nil
	}
	l.handoff.prev = prev
	switch mask := r.notSet(); {
	case l.state == stateHeld && mask != 0 && !c.isClosed():
		// Sent again where a dropped call may have left prev, under l.mu so
		// that l's release follows it; a refusal's queued ticket leaves.
		s, args := c.turnCall(l.res, prev, l.token, req, true, nil)
		c.broadcast("handover", l.res.resource, mask, 1, time.Now().Add(c.cfg.nodeTimeout), true, args, s).free()
		c.leaveQueue(l.res, req.tk, 1, mask)
	case l.state == stateReleased:
		// Released before the round failed, without prev; its ticket,
		// queued where the round was refused, is dead.
		l.unlockQueued(prev, c.allNodes())
		c.leaveQueue(l.res, req.tk, 1, mask)
	}
	return r.err([]error{ErrQuorum}, fmt.Sprintf("hand-over set on %d of %d nodes (quorum %d); the successor keeps its first validity", r.t.ok, r.t.total, c.q))
}

// successor builds the waiting successor's lock from a won round, as attempt
// does for an acquire round (a slot's hand-over jumps the nodes' queue).
func (h *handOverRound) successor() (*Lock, error) {
	c, k, r, req := h.l.c, h.l.res, h.r, h.w.req
	if !r.t.success() {
		return nil, r.err(r.t.causes(), fmt.Sprintf("hand-over set on %d of %d nodes (quorum %d)", r.t.ok, r.t.total, c.q))
	}
	until := h.start.Add(req.ttl - driftAllowance(req.ttl, c.cfg.driftFactor))
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
	next := c.newLock(k, h.token, fence, req.ttl, h.start, until, req.lc)
	next.found = req.look.known()
	next.found.add(r.rec)
	next.chainStart = h.l.chainStart
	next.mu.Lock()
	next.handoff = h.ho.after(r.jumped(), time.Now())
	next.mu.Unlock()
	return next, nil
}

// dropResidue releases l's token, once the round's stragglers are heard,
// where a hand-over round that passed the lock on did not set the new one:
// a key left there would hold the resource for the rest of l's TTL (issue 20).
func (l *Lock) dropResidue(r *round) {
	_ = r.collectAll(context.Background(), r.deadline, classifyTurn)
	l.unlockQueued(l.token, r.notSet())
}

// dropPrevAtEnd, for a lock being lost or left to expire (l.mu held),
// releases the predecessor's token a failed early hand-over left behind once
// l's validity has ended, not before: l's holder may run until then.
func (l *Lock) dropPrevAtEnd() {
	prev := l.handoff.prev
	if prev == "" {
		return
	}
	time.AfterFunc(time.Until(l.until), func() { l.unlockQueued(prev, l.c.allNodes()) })
}

// unlockQueued releases token from l's key on the nodes in mask, reserving
// the key for the queue head and announcing it, without waiting.
func (l *Lock) unlockQueued(token string, mask uint64) {
	c := l.c
	if mask == 0 || c.isClosed() {
		return
	}
	s, args := c.releaseCall(l.res, token, int(l.slot), int(l.limit), nil)
	c.broadcast("release", l.res.resource, mask, len(c.nodes), time.Now().Add(c.cfg.nodeTimeout), true, args, s).free()
}

// releaseCall is the script and arguments of a holder's release of token
// from k (slot of limit), writing rec in the same call.
func (c *Client) releaseCall(k keys, token string, slot, limit int, rec *completionRecord) (*transport.Script, []any) {
	if limit > 1 {
		return c.slotRelease(k, token, k.channel, slot, limit, rec)
	}
	lease := c.queueLease().Milliseconds()
	return queueReleaseScript, recordedArgs(queueReleaseScript, k.queueKeys()[:3], rec, token, lease, k.channel)
}

// turnCall builds a hand-over round's script and arguments for req: for a
// slot, slotTurnScript, which does not ask the waiter queue. With rec, the
// releasing holder of old writes its completion record where old held the key.
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
		if (sl.out == outOK || sl.out == outRefused) && turnReply(sl.val).released {
			n++
		}
	}
	return n
}

// notSet is the mask of nodes that did not answer that they set the round's
// token, stragglers included: where the successor's queue entry may be, or
// come, and must leave (harmless where it was set).
func (r *round) notSet() uint64 {
	var m uint64
	for i := range r.c.nodes {
		if r.slots[i].out != outOK {
			m |= 1 << i
		}
	}
	return m
}

// jumped reports whether a keep-mode hand-over passed the lock ahead of a
// waiter queued on any node that answered.
func (r *round) jumped() bool {
	return slices.ContainsFunc(r.slots, func(sl slot) bool { return turnReply(sl.val).jumped })
}

// turnAnswer is one node's answer to turnScript or slotTurnScript.
type turnAnswer struct {
	released, set, jumped bool
	fence                 int64
}

func turnReply(v any) turnAnswer {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return turnAnswer{}
	}
	r, _ := a[0].(int64)
	s, _ := a[1].(int64)
	f, _ := a[2].(int64)
	j, _ := a[3].(int64)
	return turnAnswer{released: r == 1, set: s == 1, jumped: j == 1, fence: f}
}

// classifyTurn counts a node that set the new token as OK.
func classifyTurn(rep transport.Reply) outcome {
	if rep.Err != nil {
		return outFailed
	}
	if turnReply(rep.Val).set {
		return outOK
	}
	return outRefused
}
