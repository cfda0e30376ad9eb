package redlock

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TryAcquire makes one attempt to lock resource for ttl. It fails with an
// error matching ErrLocked when another holder has it, ErrQuorum when too many
// nodes failed, or the context's error.
func (c *Client) TryAcquire(ctx context.Context, resource string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, resource, ttl, opts, false)
}

// Acquire locks resource for ttl, waiting as long as ctx allows. Waiters are
// woken by release announcements (pub/sub) and otherwise retry after a random
// delay; waiters of the same Client queue in FIFO order. When ctx ends it
// returns ctx's error wrapped together with the last attempt's cause, so both
// errors.Is(err, context.DeadlineExceeded) and errors.Is(err, ErrLocked) hold.
func (c *Client) Acquire(ctx context.Context, resource string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, resource, ttl, opts, true)
}

// acquire is TryAcquire (one try) or, with wait, Acquire.
func (c *Client) acquire(ctx context.Context, resource string, ttl time.Duration, opts []LockOption, wait bool) (l *Lock, err error) {
	begin := time.Now()
	span := c.startSpan(ctx, spanAcquire, resource)
	attempts := 1
	if wait {
		attempts = 0 // none yet
	}
	defer func() { endAcquireSpan(span, l, attempts, err) }()
	ttl, lc, err := c.prepare(ctx, resource, ttl, opts)
	if err != nil {
		return nil, err
	}
	if wait {
		l, attempts, err = c.acquireLoop(ctx, c.keysFor(resource), ttl, lc)
	} else {
		l, err = c.try(ctx, c.keysFor(resource), ttl, lc, -1, nil)
	}
	d := time.Since(begin)
	if err != nil {
		c.cfg.logger.Debug("redlock acquire failed", "resource", resource, "attempts", attempts, "wait", d, "err", err)
	}
	c.observe(Event{Kind: EventAcquire, Resource: resource, Duration: d, Attempts: attempts,
		Outcome: outcomeOf(err), Err: err})
	return l, err
}

// prepare validates a call's input and options (bad input before an ended ctx).
func (c *Client) prepare(ctx context.Context, resource string, ttl time.Duration, opts []LockOption) (time.Duration, *lockConfig, error) {
	if err := c.usable(ctx); err != nil {
		return 0, nil, err
	}
	if resource == "" {
		return 0, nil, invalidf("empty resource name")
	}
	if err := c.checkTTL(ttl); err != nil {
		return 0, nil, err
	}
	lc := &lockConfig{limit: 1}
	for _, o := range opts {
		if o == nil {
			return 0, nil, invalidf("nil lock option")
		}
		o(lc)
	}
	if lc.limit < 1 || lc.limit > maxLimit { // worded as the middleware's check
		return 0, nil, invalidf("limit must be in [1, %d], got %d", maxLimit, lc.limit)
	}
	if err := c.keyRecord(resource, lc.rec); err != nil {
		return 0, nil, err
	}
	lc.suffix = c.holderSuffix(ctx)
	c.awaitWarm(ctx) // a fresh client's first call: see awaitWarm
	return ttl.Truncate(time.Millisecond), lc, ctx.Err()
}

// checkTTL rejects TTLs that cannot leave any validity.
func (c *Client) checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return invalidf("ttl must be positive, got %v", ttl)
	}
	// The smallest TTL that leaves a validity after a whole node timeout.
	m := time.Duration(float64(c.cfg.nodeTimeout+driftFloor) / (1 - c.cfg.driftFactor))
	if ttl.Truncate(time.Millisecond) <= m {
		return invalidf("ttl %v is too small: with node timeout %v and drift factor %v it must exceed %v",
			ttl, c.cfg.nodeTimeout, c.cfg.driftFactor, m.Round(time.Microsecond))
	}
	return nil
}

// acquireLoop is Acquire's rounds, by this client's first caller (enter):
// plain until one is refused (or contended lately), then queued on the nodes.
func (c *Client) acquireLoop(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig) (*Lock, int, error) {
	tk := newTicket()
	req := c.waitReq(k, ttl, lc, tk)
	t, l, err := c.enter(ctx, k, lc, req)
	switch {
	case err != nil:
		return nil, 0, err
	case l != nil:
		return l, 1, nil // handed over by a holder of this client
	}
	qt := tk // what the rounds queue with once one failed
	if lc.limit > 1 && c.cfg.noSlotQueue {
		qt = nil // the slots' queue turned off: a test's control
	}
	var w *watch // the release announcements, once watched
	defer func() {
		if w != nil {
			w.close()
		}
	}()
	var last error
	var queued *ticket // nil until a round failed: nothing to leave on the nodes
	if qt != nil && c.notify.watched(k.channel) {
		// Contended here lately: queue (and watch) from the first round.
		w, queued = c.notify.watch(ctx, k.channel, tk.id), qt
	}
	only, attempts := -1, 1 // only: the slot a release reserved for the caller
	for ; ; attempts++ {
		if w != nil {
			w.reset() // forget the announcements heard before this round
		}
		if lc.limit > 1 && c.cfg.slotRound != nil {
			c.cfg.slotRound()
		}
		if l, err = c.try(ctx, k, ttl, lc, only, queued); err == nil {
			return c.won(l, t, lc, queued != nil && attempts > 1), attempts, nil
		}
		if ctx.Err() != nil || errors.Is(err, errClosed) {
			break
		}
		queued, last = qt, err
		if w == nil && errors.Is(err, ErrLocked) {
			// Watch (deaf to others' reservations), then try again at once:
			// the holder may have released since the attempt.
			w = c.notify.watch(ctx, k.channel, tk.id)
			continue
		}
		if l, only, err = c.pause(ctx, w, t, req, err); l != nil || err != nil {
			break
		}
	}
	c.leaveQueue(k, queued, int(lc.limit), c.allNodes()) // if it queued on the nodes
	t.leave()
	if l != nil {
		return l, attempts, nil
	}
	return nil, attempts, waitError(ctx, err, last)
}

// waitReq is what an Acquire caller asks of a hand-over.
func (c *Client) waitReq(k keys, ttl time.Duration, lc *lockConfig, tk *ticket) *handoffReq {
	req := &handoffReq{ttl: ttl, lc: lc}
	if lc.limit <= 1 {
		req.tk = tk // a slot's waiter leaves the nodes' queue itself (acquireLoop)
	}
	if lc.rec != nil {
		req.look = &lookAhead{c: c, k: k, want: lc.rec}
	}
	return req
}

// enter queues the caller behind this client's other callers of the resource
// until it holds the turn t or is handed the lock (a slot: no turn).
func (c *Client) enter(ctx context.Context, k keys, lc *lockConfig, req *handoffReq) (*turn, *Lock, error) {
	if !c.cfg.localQueue {
		return nil, nil, nil
	}
	gate := k.key
	if lc.limit > 1 {
		gate = gateKey(k, lc.limit)
	}
	t, l, err := c.gates.enter(ctx, gate, c.closed, req)
	if l, err = c.handed(l, err); l != nil {
		return nil, l, nil
	}
	if err == nil || errors.Is(err, errClosed) {
		return t, nil, err
	}
	// ctx ended behind another caller of this client: locked all along.
	return nil, nil, waitError(ctx, nil, &opError{kinds: []error{ErrLocked}, summary: "waited behind other callers of this client"})
}

// gateKey names the local queue of a resource's callers with limit n.
func gateKey(base keys, n int32) string { return base.key + "#" + strconv.Itoa(int(n)) }

// handed is a lock a holder of this client handed over, if any: released if
// it came as the caller gave up.
func (c *Client) handed(l *Lock, err error) (*Lock, error) {
	if l == nil {
		return nil, err
	}
	if err == nil {
		l.via = handoverLocal
		return l, nil
	}
	c.releaseSoon(l)
	return nil, err
}

// releaseSoon releases l in the background, or at once on a closed client
// (which ends its watchdog).
func (c *Client) releaseSoon(l *Lock) {
	if !c.spawn(func() { _ = l.Release(context.Background()) }) {
		_ = l.Release(context.Background())
	}
}

// pause waits after a round failed with last for a release announcement, the
// retry delay, a slot handed over (park), ctx's end or the client's close. It
// returns a lock handed over, the slot whose release woke it (-1 if none), or
// why the wait must end.
func (c *Client) pause(ctx context.Context, w *watch, t *turn, req *handoffReq,
	last error) (*Lock, int, error) {
	timer := time.NewTimer(c.retryDelay(last))
	defer timer.Stop()
	var wake <-chan struct{} // a nil channel is never ready
	if w != nil {
		wake = w.C
	}
	pw, handed := t.park(req)
	var perr error
	only := -1
	select {
	case <-ctx.Done():
		perr = ctx.Err()
	case <-c.closed:
		perr = errClosed
	case <-wake:
		only = announcedSlot(w.payload(), int(req.lc.limit))
	case <-handed:
	case <-timer.C:
	}
	if l, err := c.handed(t.unpark(ctx, pw, c.closed)); l != nil || err != nil {
		return l, -1, err
	}
	return nil, only, perr
}

// park makes the turn's holder for n > 1 slots claimable while it pauses: a
// slot this client releases may be handed to it (HANDOVER.md, "Slots").
func (t *turn) park(req *handoffReq) (*waiter, <-chan struct{}) {
	if t == nil || req.lc.limit <= 1 { // one holder's lock comes with the turn
		return nil, nil
	}
	w := &waiter{ready: make(chan struct{}), req: req}
	t.gs.mu.Lock()
	if g := t.gs.m[t.key]; g != nil {
		g.idle = w
	}
	t.gs.mu.Unlock()
	return w, w.ready
}

// unpark ends w's pause: the slot handed to it, if any, once a hand-over
// under way ends. If ctx ends or the client closes first: the error, with
// the lock if it came as the caller gave up (else its sender releases it).
func (t *turn) unpark(ctx context.Context, w *waiter, closed <-chan struct{}) (*Lock, error) {
	if w == nil {
		return nil, nil
	}
	gs := t.gs
	gs.mu.Lock()
	claimed := w.claimed
	if g := gs.m[t.key]; !claimed && g != nil && g.idle == w {
		g.idle = nil
	}
	gs.mu.Unlock()
	if !claimed {
		return nil, nil
	}
	granted, err := gs.await(ctx, t.key, w, closed)
	if !granted {
		return nil, err
	}
	return w.lock, err
}

// retryDelay is a random delay in [retryMin, retryMax], or after a split vote
// a short one, for one contender to go first (REDLOCK.md, "Split votes").
func (c *Client) retryDelay(last error) time.Duration {
	if oe := (*opError)(nil); errors.As(last, &oe) && oe.split {
		span := max(min(c.cfg.retryMin, 5*time.Millisecond), 2*oe.took)
		return time.Duration(mrand.Int64N(int64(span) + 1))
	}
	return c.cfg.retryMin + time.Duration(mrand.Int64N(int64(c.cfg.retryMax-c.cfg.retryMin)+1))
}

// announcedSlot is the slot of limit an announcement names, or -1.
func announcedSlot(pl string, limit int) int {
	if i := strings.LastIndexByte(pl, '/'); i >= 0 {
		pl = pl[i+1:] // a reservation: queued:<head>/<slot> (slot_wait.lua)
	}
	s, err := strconv.Atoi(pl)
	if err != nil || s < 0 || s >= limit {
		return -1
	}
	return s
}

// won settles a lock won by the holder of turn t (remote: queued on the
// nodes); a lock of one holder keeps t, a slot passes it on.
func (c *Client) won(l *Lock, t *turn, lc *lockConfig, remote bool) *Lock {
	if lc.limit > 1 {
		t.leave()
		return l
	}
	if remote {
		l.via = handoverRemote
	}
	l.adoptTurn(t)
	l.refreshLooks()
	return l
}

// waitError is ctx's error, if it ended, wrapping the last attempt's cause.
func waitError(ctx context.Context, err, last error) error {
	cerr := ctx.Err()
	if cerr == nil {
		return err
	}
	if last == nil && err != nil && !errors.Is(err, cerr) {
		last = err
	}
	if last == nil {
		return cerr
	}
	return fmt.Errorf("%w (last attempt: %w)", cerr, last)
}

// try makes one attempt; for n > 1 slots, one per slot until one is won,
// from a random slot (queued: slot 0) or only the slot only >= 0.
func (c *Client) try(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig, only int, tk *ticket) (*Lock, error) {
	n, start, tries := int(lc.limit), only, 1
	switch {
	case n <= 1:
		return c.attempt(ctx, k, ttl, lc, tk)
	case only >= 0:
	case tk != nil:
		start, tries = 0, n
	default:
		start, tries = mrand.IntN(n), n // spreads uncontended callers over the slots
	}
	all := &opError{summary: fmt.Sprintf("none of the %d slots could be taken", tries)}
	for i := range tries {
		slot, sk := (start+i)%n, k
		sk.key = slotKey(k.key, slot)
		lc.slot = uint16(slot)
		l, err := c.attempt(ctx, sk, ttl, lc, tk)
		if err == nil {
			if c.cfg.localQueue { // its release may hand the slot on here
				l.adoptTurn(&turn{gs: &c.gates, key: gateKey(k, lc.limit), slots: true})
			}
			return l, nil
		}
		if ctx.Err() != nil || errors.Is(err, errClosed) {
			return nil, err
		}
		all.add(err)
	}
	return nil, all
}

// add merges a slot's failure into e: causes, node errors (the last's), split.
func (e *opError) add(err error) {
	var oe *opError
	if !errors.As(err, &oe) {
		oe = &opError{kinds: []error{ErrQuorum}, nodes: e.nodes}
	}
	for _, k := range oe.kinds {
		if !slices.Contains(e.kinds, k) {
			e.kinds = append(e.kinds, k)
		}
	}
	e.nodes = oe.nodes
	e.split = e.split || oe.split
	e.took = max(e.took, oe.took)
}

// attempt is one Redlock round (REDLOCK.md, "The algorithm"); with a ticket,
// turnScript, which also keeps the caller's place in the nodes' queue.
func (c *Client) attempt(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig, tk *ticket) (*Lock, error) {
	token := newToken(lc.suffix)
	s, args, classify := c.roundArgs(k, token, ttl, lc, tk)
	start := time.Now()
	deadline := start.Add(c.cfg.nodeTimeout)
	r := c.broadcastLook("acquire", k.resource, c.allNodes(), c.q, deadline, false, args, s, lookOf(lc.rec))
	defer r.free()
	err := r.collect(ctx, classify)
	until := start.Add(ttl - driftAllowance(ttl, c.cfg.driftFactor))
	var fence int64
	switch {
	case err != nil:
	case !r.t.success():
		e := r.err(r.t.causes(), fmt.Sprintf("%d of %d nodes set (quorum %d), %d held by another, %d failed",
			r.t.ok, r.t.total, c.q, r.t.refused, r.t.failed))
		// A split: some nodes ours, some another's, and no one has a majority.
		e.split = r.t.ok > 0 && r.t.refused > 0 && r.t.refused < c.q
		e.took = time.Since(start)
		err = e
	case !time.Now().Before(until):
		err = r.err([]error{ErrQuorum}, fmt.Sprintf("quorum reached after %v, past the validity of ttl %v", time.Since(start).Round(time.Microsecond), ttl))
	case lc.fencing:
		fence, err = c.settleFence(ctx, r, tk != nil && lc.limit <= 1, k, until, stepOf(lc))
	}
	if err != nil {
		c.undo(k, token, r.unsent, int(lc.limit))
		return nil, err
	}
	c.leaveQueue(k, tk, int(lc.limit), r.notSet()) // where it was not granted the key
	l := c.newLock(k, token, fence, ttl, start, until, lc)
	l.unsent, l.found, l.chainStart = r.unsent, r.rec, time.Now()
	return l, nil
}
