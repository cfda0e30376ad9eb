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
	jumps     int       // hand-overs in a row that passed a waiter of another process
	firstJump time.Time // the first of them
	// settled is closed once the early hand-over round that gave the lock is decided.
	settled <-chan struct{}
	prev    string // the predecessor's token a failed early hand-over left: released with it
}

// handoffReq is what a queued Acquire caller asks a Release to acquire for it.
type handoffReq struct {
	ttl  time.Duration
	lc   *lockConfig
	tk   *ticket
	look *lookAhead // withCompletion: sent as the caller started to wait
}

// ticket is an Acquire call's place in the nodes' waiter queue: its start in
// microseconds (the same on every node) and a random id that breaks ties.
type ticket struct {
	score int64
	id    string
}

func newTicket() *ticket {
	return &ticket{score: time.Now().UnixMicro(), id: rand.Text()[:16]}
}

// queueKeys: the lock key, the waiter queue, its lease ends, the fencing counter.
func (k keys) queueKeys() []string {
	return []string{k.key, k.key + ":q", k.key + ":qx", k.fenceKey}
}

// queueLease is how long a queue entry or reservation lasts unrenewed: well
// above a live waiter's gap between attempts, so that only a dead one lapses.
func (c *Client) queueLease() time.Duration {
	return max(500*time.Millisecond, 4*(c.cfg.retryMax+c.cfg.nodeTimeout))
}

// maxJumps and maxJumpSpan bound the local hand-overs in a row that pass a
// waiter of another process (HANDOVER.md, "Within one process").
const (
	maxJumps    = 16
	maxJumpSpan = 100 * time.Millisecond
)

// owesQueue reports whether a release at now must go to the nodes' queue.
func (ho handoffState) owesQueue(now time.Time) bool {
	return ho.jumps >= maxJumps || ho.jumps > 0 && now.Sub(ho.firstJump) >= maxJumpSpan
}

// after is the state of ho's successor, passed on at now (jumped: the queue).
func (ho handoffState) after(jumped bool, now time.Time) handoffState {
	if !jumped {
		return handoffState{}
	}
	if ho.jumps == 0 {
		ho.firstJump = now
	}
	return handoffState{jumps: ho.jumps + 1, firstJump: ho.firstJump}
}

// tryHandOver hands l to a queued local waiter in one round, unless l owes
// the nodes' queue its turn; then it returns Release's result.
func (l *Lock) tryHandOver(ctx context.Context) (handed bool, err error) {
	l.mu.Lock()
	ho, until := l.handoff, l.until
	l.mu.Unlock()
	if ho.settled != nil && !ho.owesQueue(time.Now()) && l.turn.waited() {
		// Waiting for the round that gave l costs less than the nodes' queue.
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
		// The waiter gets this slot; it leaves the nodes' queue itself.
		lc := *w.req.lc
		lc.slot = l.slot
		w.req = &handoffReq{ttl: w.req.ttl, lc: &lc, look: w.req.look}
	}
	return true, l.handOver(ctx, w, until, ho)
}

// handOverRound is one round passing l's keys to w's new token, sent at start.
type handOverRound struct {
	l       *Lock
	w       *waiter
	r       *round
	token   string
	start   time.Time
	ho      handoffState  // l's
	next    *Lock         // early mode: the successor, started at once
	settled chan struct{} // early mode: closed once the round decided next
}

// handOver passes l's keys to a new token for the claimed waiter w: early (at
// once, with the shorter of l's validity and the new one's) or waiting for the
// round (fencing, or too little validity left). ctx bounds Release's wait.
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
	known := req.lc.rec == nil || req.look.known().ok ||
		req.lc.limit <= 1 && req.look.clearSince(l.chainStart)
	early := ho.settled == nil && !req.lc.fencing && known &&
		time.Until(until) > 2*c.cfg.nodeTimeout+lossGuard(req.ttl)
	s, args := c.turnCall(k, l.token, token, req, early, l.written())
	deadline := start.Add(c.cfg.nodeTimeout)
	r := c.broadcastLook("handover", k.resource, c.allNodes(), c.q, deadline, false, args, s,
		lookOf(req.lc.rec))
	h := &handOverRound{l: l, w: w, r: r, token: token, start: start, ho: ho}
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
		if orphan, _ := l.turn.pass(w, h.next); orphan != nil {
			c.releaseSoon(orphan)
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

// settle decides the round and sends Release's answer on done. When it
// failed, a waiting successor acquires by itself once both tokens are
// released; an early one keeps its lock and nothing is released (confirm).
func (h *handOverRound) settle(done chan<- error) {
	l, r, next, req := h.l, h.r, h.next, h.w.req
	c, k := l.c, l.res
	// A failed round's answer for l also needs whether a majority dropped l.
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
			// Nobody acquires with this ticket: its entry must not get the key.
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

// confirm applies the round to the early successor: its validity counts from
// the round. When it failed, it keeps its first validity, and neither token
// is released before it is: it may be running already (HANDOVER.md, "Early").
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
		deadline := time.Now().Add(c.cfg.nodeTimeout)
		c.broadcast("handover", l.res.resource, mask, 1, deadline, true, args, s).free()
		c.leaveQueue(l.res, req.tk, 1, mask)
	case l.state == stateReleased:
		// Released before the round failed, without prev; its ticket is dead.
		l.unlockQueued(prev, c.allNodes())
		c.leaveQueue(l.res, req.tk, 1, mask)
	}
	return r.err([]error{ErrQuorum}, r.setSummary("; the successor keeps its first validity"))
}

// setSummary says on how many nodes the round set the new token.
func (r *round) setSummary(tail string) string {
	return fmt.Sprintf("hand-over set on %d of %d nodes (quorum %d)%s",
		r.t.ok, r.t.total, r.c.q, tail)
}

// successor builds the waiting successor's lock from the round, as attempt does.
func (h *handOverRound) successor() (*Lock, error) {
	c, k, r, req := h.l.c, h.l.res, h.r, h.w.req
	if !r.t.success() {
		return nil, r.err(r.t.causes(), r.setSummary(""))
	}
	until := h.start.Add(req.ttl - driftAllowance(req.ttl, c.cfg.driftFactor))
	if !time.Now().Before(until) {
		return nil, r.err([]error{ErrQuorum}, "hand-over reached its quorum past the validity")
	}
	var fence int64
	if req.lc.fencing {
		var err error
		fence, err = c.settleFence(context.Background(), r, true, k, until, stepOf(req.lc))
		if err != nil {
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

// dropResidue releases l's token where the round that passed the lock on did
// not set the new one, once its stragglers are heard (issue 20).
func (l *Lock) dropResidue(r *round) {
	_ = r.collectAll(context.Background(), r.deadline, classifyTurn)
	l.unlockQueued(l.token, r.notSet())
}

// dropPrevAtEnd, for a lock lost or left to expire (l.mu held), releases
// handoff.prev once l's validity has ended: l's holder may run until then.
func (l *Lock) dropPrevAtEnd() {
	prev := l.handoff.prev
	if prev == "" {
		return
	}
	time.AfterFunc(time.Until(l.until), func() { l.unlockQueued(prev, l.c.allNodes()) })
}

// unlockQueued releases token from l's key on the nodes in mask, without waiting.
func (l *Lock) unlockQueued(token string, mask uint64) {
	c := l.c
	if mask == 0 || c.isClosed() {
		return
	}
	s, args := c.releaseCall(l.res, token, int(l.slot), int(l.limit), nil)
	deadline := time.Now().Add(c.cfg.nodeTimeout)
	c.broadcast("release", l.res.resource, mask, len(c.nodes), deadline, true, args, s).free()
}

// releaseCall is the script and arguments releasing token from k (slot of
// limit), writing rec in the same call.
func (c *Client) releaseCall(k keys, token string, slot, limit int,
	rec *completionRecord) (*transport.Script, []any) {
	if limit > 1 {
		return c.slotRelease(k, token, k.channel, slot, limit, rec)
	}
	lease := c.queueLease().Milliseconds()
	return queueReleaseScript, recordedArgs(queueReleaseScript, k.queueKeys()[:3], rec, token, lease, k.channel)
}

// turnCall is a hand-over round's script and arguments for req (a slot's does
// not ask the waiter queue); rec is written where old held the key.
func (c *Client) turnCall(k keys, old, token string, req *handoffReq, keep bool,
	rec *completionRecord) (*transport.Script, []any) {
	lc := req.lc
	if lc.limit > 1 {
		return slotTurnScript, recordedArgs(slotTurnScript, k.bothKeys(), rec, old, token,
			req.ttl.Milliseconds(), flag(lc.fencing), fenceRetentionMs, fenceClasses, lc.slot)
	}
	return turnScript, c.turnArgs(k, old, token, req.ttl, req.tk, lc, keep, rec)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// releaseResult is Release's answer for a hand-over round's previous holder:
// nil when the lock passed on or a majority released it; ErrLockLost when
// too few nodes can still have held it.
func (r *round) releaseResult(err error) error {
	released := r.releasedOn()
	notMine := r.t.ok + r.t.refused - released
	switch {
	case err == nil || released >= r.c.q:
		return nil
	case r.t.total-notMine < r.c.q:
		return r.err([]error{ErrLockLost},
			fmt.Sprintf("only %d of %d nodes still held the lock at release", released, r.t.total))
	}
	return r.err([]error{ErrQuorum}, "release not confirmed by a majority; the keys expire within the TTL")
}

// releasedOn counts the nodes that answered they dropped the previous token.
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
// token, stragglers included: where the successor's queue entry may be.
func (r *round) notSet() uint64 {
	var m uint64
	for i := range r.c.nodes {
		if r.slots[i].out != outOK {
			m |= 1 << i
		}
	}
	return m
}

// jumped reports whether the round passed a waiter queued on a node.
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

func classifyTurn(rep transport.Reply) outcome { // OK: the node set the new token
	if rep.Err != nil {
		return outFailed
	}
	if turnReply(rep.Val).set {
		return outOK
	}
	return outRefused
}
