package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// keys are the Redis names used for one resource. The hash tag keeps them in
// one slot should a node be a Redis Cluster (see keyOf).
type keys struct {
	resource string
	key      string // the lock: token with a TTL (a slot's key under WithLimit)
	fenceKey string // the fencing counter
	channel  string // release announcements
}

func (c *Client) keysFor(resource string) keys {
	k := keyOf(c.cfg.prefix, resource)
	return keys{resource: resource, key: k, fenceKey: k + fenceSuffix, channel: k + channelSuffix}
}

// fenceSuffix follows a lock key in the name of its fencing counter.
const fenceSuffix = ":fence"

// channelSuffix follows a lock key in the name of its release channel
// (lua/release_many.lua builds it too).
const channelSuffix = ":released"

func (k keys) lockKeys() []string { return []string{k.key} }
func (k keys) bothKeys() []string { return []string{k.key, k.fenceKey} }

// minTTL is the smallest TTL that can leave a positive validity after an
// attempt that used its whole node timeout.
func (c *Client) minTTL() time.Duration {
	return time.Duration(float64(c.cfg.nodeTimeout+driftFloor) / (1 - c.cfg.driftFactor))
}

// prepare validates a call's input and options; a context that has
// already ended is reported after bad input.
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
	lc := &lockConfig{}
	for _, o := range opts {
		if o == nil {
			return 0, nil, invalidf("nil lock option")
		}
		o(lc)
	}
	if lc.maxHold < 0 {
		return 0, nil, invalidf("max hold must not be negative, got %v", lc.maxHold)
	}
	if err := checkLimit(lc); err != nil {
		return 0, nil, err
	}
	if err := lc.checkCompletion(); err != nil {
		return 0, nil, err
	}
	lc.rec = c.recordOf(resource, lc)
	lc.suffix = c.holderSuffix(ctx, lc)
	c.awaitWarm(ctx) // a fresh client's first call: see awaitWarm
	return ttl.Truncate(time.Millisecond), lc, ctx.Err()
}

// checkTTL rejects TTLs that cannot leave any validity.
func (c *Client) checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return invalidf("ttl must be positive, got %v", ttl)
	}
	if m := c.minTTL(); ttl.Truncate(time.Millisecond) <= m {
		return invalidf("ttl %v is too small: with node timeout %v and drift factor %v it must exceed %v",
			ttl, c.cfg.nodeTimeout, c.cfg.driftFactor, m.Round(time.Microsecond))
	}
	return nil
}

// TryAcquire makes one attempt to lock resource for ttl. It fails with an
// error matching ErrLocked when another holder has it, ErrQuorum when too many
// nodes failed, or the context's error.
func (c *Client) TryAcquire(ctx context.Context, resource string, ttl time.Duration, opts ...LockOption) (l *Lock, err error) {
	begin := time.Now()
	span := c.startSpan(ctx, spanAcquire, resource)
	defer func() { endAcquireSpan(span, l, 1, err) }()
	ttl, lc, err := c.prepare(ctx, resource, ttl, opts)
	if err != nil {
		return nil, err
	}
	if lc.limit > 1 {
		l, err = c.trySlots(ctx, resource, ttl, lc, -1, nil)
	} else {
		l, err = c.attempt(ctx, c.keysFor(resource), ttl, lc, nil)
	}
	c.acquired(resource, begin, 1, err)
	return l, err
}

// Acquire locks resource for ttl, waiting as long as ctx allows. Waiters are
// woken by release announcements (pub/sub) and otherwise retry after a random
// delay; waiters of the same Client queue in FIFO order. When ctx ends it
// returns ctx's error wrapped together with the last attempt's cause, so both
// errors.Is(err, context.DeadlineExceeded) and errors.Is(err, ErrLocked) hold.
func (c *Client) Acquire(ctx context.Context, resource string, ttl time.Duration, opts ...LockOption) (l *Lock, err error) {
	begin := time.Now()
	span := c.startSpan(ctx, spanAcquire, resource)
	attempts := 0
	defer func() { endAcquireSpan(span, l, attempts, err) }()
	ttl, lc, err := c.prepare(ctx, resource, ttl, opts)
	if err != nil {
		return nil, err
	}
	if lc.limit > 1 {
		l, attempts, err = c.acquireLimited(ctx, resource, ttl, lc)
	} else {
		l, attempts, err = c.acquireLoop(ctx, c.keysFor(resource), ttl, lc)
	}
	c.acquired(resource, begin, attempts, err)
	return l, err
}

func (c *Client) acquireLoop(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig) (*Lock, int, error) {
	var t *turn
	tk := newTicket()
	if c.cfg.localQueue {
		var l *Lock
		var err error
		t, l, err = c.gates.enter(ctx, k.key, c.closed, c.waitReq(k, ttl, lc, tk))
		if l != nil {
			if err == nil {
				l.via = handoverLocal
				return l, 1, nil // handed over by the previous holder
			}
			if !c.spawn(func() { _ = l.Release(context.Background()) }) {
				_ = l.Release(context.Background())
			}
		}
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, 0, err
			}
			// The context ended while another caller of this client held
			// or was acquiring the resource: it was locked all along.
			return nil, 0, waitError(ctx, nil, &opError{kinds: []error{ErrLocked}, summary: "waited behind another caller of this client"})
		}
	}
	return c.attemptLoop(ctx, k, ttl, lc, t, tk)
}

// attemptLoop is Acquire's rounds once the caller has its local turn t. The
// first round is a plain one (SET NX, or the fencing script), as TryAcquire's:
// it takes a free key and cannot take one reserved for a queued waiter, so
// an uncontended Acquire costs what Redlock costs. Only once that fails does
// the caller queue on the nodes with ticket tk, taken before the first round
// so that its place in the FIFO is its arrival (docs/design/HANDOVER.md). A
// resource whose releases this client watches (a waiter of it, now or
// within subscriptionLinger) was contended lately: its first round queues.
func (c *Client) attemptLoop(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig, t *turn, tk *ticket) (*Lock, int, error) {
	p := pauser{c: c}
	defer p.stop()
	var last error
	var queued *ticket // nil until the first round failed: nothing to leave on the nodes
	if c.notify.watched(k.channel) {
		// Contended here lately: a SET NX round would most likely be
		// refused, so queue from the first round, watching already.
		p.watch(ctx, k, tk)
		queued = tk
	}
	for attempts := 1; ; attempts++ {
		p.reset()
		l, err := c.attempt(ctx, k, ttl, lc, queued)
		if err == nil {
			if queued != nil && attempts > 1 {
				l.via = handoverRemote
			}
			l.adoptTurn(t)
			l.refreshLooks()
			return l, attempts, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			c.giveUp(k, queued, t)
			return nil, attempts, waitError(ctx, err, last)
		}
		queued = tk
		last = err
		if p.w == nil && errors.Is(err, ErrLocked) {
			// Subscribe to the release, then try once more at once: the
			// holder may have released between the attempt and now.
			p.watch(ctx, k, tk)
			continue
		}
		switch err := p.pause(ctx, err); {
		case errors.Is(err, ErrClosed):
			t.leave()
			return nil, attempts, ErrClosed
		case err != nil:
			c.giveUp(k, queued, t)
			return nil, attempts, waitError(ctx, nil, last)
		}
	}
}

// acquireLimited is Acquire for a resource of n > 1 slots. As for one
// holder, only the first of this client's callers (in FIFO order) tries the
// nodes, so that a release sets one caller per process on the freed slot,
// not all of them; once it holds a slot, the next caller tries the others.
// A slot this client releases goes to the first of its callers in one round
// (slot_turn.lua): to the one trying the nodes while it pauses between its
// rounds (pauseParked), else to the first queued behind it (enterSlots).
// The trying caller's first round is plain (slot_acquire.lua, as
// TryAcquire's) unless the resource was contended here lately; after a
// refusal it queues on the nodes with ticket tk, taken on arrival, in the
// resource's queue shared by the slots (slot_wait.lua), and leaves it when
// it wins or gives up. It is woken by a release that reserves a slot for
// it (then it tries that slot alone) or by the retry delay (then it tries
// all slots).
func (c *Client) acquireLimited(ctx context.Context, resource string, ttl time.Duration, lc *lockConfig) (*Lock, int, error) {
	tk := newTicket()
	req := c.waitReq(c.keysFor(resource), ttl, lc, nil)
	t, l, err := c.enterSlots(ctx, resource, lc, req)
	switch {
	case err != nil:
		return nil, 0, err
	case l != nil:
		return l, 1, nil // handed over by a holder of this client
	}
	p := pauser{c: c}
	defer p.stop()
	var last error
	var queued *ticket // nil until the first round failed: nothing to leave on the nodes
	if ch := c.keysFor(resource).channel; c.notify.watched(ch) && c.slotTicket(tk) != nil {
		// Contended here lately: queue and watch from the first round, as
		// attemptLoop does.
		p.w = c.notify.watch(ctx, ch)
		p.w.forWaiter(tk.id)
		queued = tk
	}
	only := -1
	for attempts := 1; ; attempts++ {
		p.reset()
		if c.cfg.slotRound != nil {
			c.cfg.slotRound()
		}
		l, err := c.trySlots(ctx, resource, ttl, lc, only, c.slotTicket(queued))
		if err == nil {
			t.leave() // the next caller of this client tries the other slots
			return l, attempts, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			c.leaveSlots(resource, queued, lc, t)
			return nil, attempts, waitError(ctx, err, last)
		}
		queued, last = tk, err
		if p.w == nil && errors.Is(err, ErrLocked) {
			p.w = c.notify.watch(ctx, c.keysFor(resource).channel)
			p.w.forWaiter(tk.id) // a reservation is announced to the queue's head
			continue             // a slot may have been released before the watch
		}
		l, err = c.pauseParked(ctx, &p, t, req, err)
		if l != nil || err != nil {
			c.leaveSlots(resource, queued, lc, t)
		}
		if l != nil {
			l.via = handoverLocal
			return l, attempts, nil
		}
		if err != nil {
			return nil, attempts, waitError(ctx, err, last)
		}
		only = announcedSlot(&p, int(lc.limit))
	}
}

// enterSlots queues the caller behind this client's other callers of the
// resource until it holds the turn t, or is handed a slot released by this
// client (a slot does not keep the turn: it comes alone, with no turn).
func (c *Client) enterSlots(ctx context.Context, resource string, lc *lockConfig, req *handoffReq) (*turn, *Lock, error) {
	if !c.cfg.localQueue {
		return nil, nil, nil
	}
	t, l, err := c.gates.enter(ctx, gateKey(c.keysFor(resource), lc.limit), c.closed, req)
	if l != nil {
		if err == nil {
			l.via = handoverLocal
			return nil, l, nil
		}
		// It arrived as the caller gave up.
		if !c.spawn(func() { _ = l.Release(context.Background()) }) {
			_ = l.Release(context.Background())
		}
	}
	switch {
	case err == nil:
		return t, nil, nil
	case errors.Is(err, ErrClosed):
		return nil, nil, err
	}
	return nil, nil, waitError(ctx, nil, &opError{kinds: []error{ErrLocked}, summary: "waited behind other callers of this client"})
}

// gateKey names the local queue of a resource's callers with limit n.
func gateKey(base keys, n int32) string { return base.key + "#" + strconv.Itoa(int(n)) }

// slotTicket is the ticket a waiter's slot rounds queue with: none when the
// queue of slots is turned off (a test's control).
func (c *Client) slotTicket(tk *ticket) *ticket {
	if c.cfg.noSlotQueue {
		return nil
	}
	return tk
}

// waitReq is what an Acquire caller asks of a hand-over; withCompletion, it
// looks its record up as it starts to wait behind another caller.
func (c *Client) waitReq(k keys, ttl time.Duration, lc *lockConfig, tk *ticket) *handoffReq {
	req := &handoffReq{ttl: ttl, lc: lc, tk: tk}
	if lc.rec != nil {
		req.look = &lookAhead{}
		req.onWait = func() { c.spawn(func() { c.lookUp(k, req, time.Time{}) }) }
	}
	return req
}

// leaveSlots ends a waiter's wait for a slot: it leaves the nodes' queue
// (if it queued) and passes its local turn t on.
func (c *Client) leaveSlots(resource string, tk *ticket, lc *lockConfig, t *turn) {
	if tk = c.slotTicket(tk); tk != nil {
		c.leaveSlotQueue(c.slotKeys(resource, 0), tk, int(lc.limit), c.allNodes())
	}
	t.leave()
}

// giveUp ends a waiter's wait: it leaves the nodes' queue (if it queued:
// tk is nil when only plain rounds were sent) and passes its local turn on.
func (c *Client) giveUp(k keys, tk *ticket, t *turn) {
	if tk != nil {
		c.leaveQueue(k, tk, c.allNodes())
	}
	t.leave()
}

// park makes the caller holding the turn t of a resource of n > 1 slots
// claimable while it pauses between rounds: it is the oldest of this
// client's callers, so a slot this client releases meanwhile may be handed
// to it (handover.go). unpark ends that. Only this caller is ever handed a
// slot, which keeps the process's callers in FIFO order.
func (t *turn) park(req *handoffReq) *waiter {
	if t == nil {
		return nil
	}
	w := &waiter{ready: make(chan struct{}), req: req}
	t.gs.mu.Lock()
	if g := t.gs.m[t.key]; g != nil {
		g.idle = w
	}
	t.gs.mu.Unlock()
	return w
}

// pauseParked is acquireLimited's pause after a failed try (last), with
// the caller parked on its turn t (see park): a slot this client releases
// meanwhile is handed to it, and comes back. It returns ctx's error or
// ErrClosed when the wait must end instead.
func (c *Client) pauseParked(ctx context.Context, p *pauser, t *turn, req *handoffReq, last error) (*Lock, error) {
	w := t.park(req)
	var handed <-chan struct{}
	if w != nil {
		handed = w.ready
	}
	perr := p.pauseOr(ctx, last, handed)
	l, err := t.unpark(ctx, w, c.closed)
	switch {
	case l != nil && err == nil:
		return l, nil
	case l != nil:
		// It arrived as the caller gave up.
		if !c.spawn(func() { _ = l.Release(context.Background()) }) {
			_ = l.Release(context.Background())
		}
		return nil, err
	case err != nil:
		return nil, err
	}
	return nil, perr
}

// unpark ends the pause of the parked caller w. A slot handed to it comes
// back (nil when none, or when the hand-over failed: the caller acquires by
// itself); a hand-over under way is waited for. When ctx ends or the
// client closes first, the error comes back, with the lock if it arrived
// as the caller gave up (the caller releases it); otherwise the hand-over's
// sender releases what it gets.
func (t *turn) unpark(ctx context.Context, w *waiter, closed <-chan struct{}) (*Lock, error) {
	if w == nil {
		return nil, nil
	}
	gs := t.gs
	gs.mu.Lock()
	if !w.claimed {
		if g := gs.m[t.key]; g != nil && g.idle == w {
			g.idle = nil
		}
		gs.mu.Unlock()
		return nil, nil
	}
	gs.mu.Unlock()
	var err error
	select {
	case <-w.ready:
		return w.lock, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = ErrClosed
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if w.granted {
		return w.lock, err
	}
	w.gone = true
	return nil, err
}

// announcedSlot is the slot whose release woke the pause, -1 when the pause
// ended otherwise (or the announcement names no slot of limit).
func announcedSlot(p *pauser, limit int) int {
	if !p.woke || p.w == nil {
		return -1
	}
	pl := p.w.payload()
	if i := strings.LastIndexByte(pl, '/'); i >= 0 {
		pl = pl[i+1:] // a reservation: queued:<head>/<slot> (slot_queue.lua)
	}
	s, err := strconv.Atoi(pl)
	if err != nil || s < 0 || s >= limit {
		return -1
	}
	return s
}

// pauser is an Acquire's wait between two attempts: for a release
// announcement (once w watches the resource), the retry delay, the end of
// ctx or the client's close.
type pauser struct {
	c     *Client
	w     *watch
	timer *time.Timer
	woke  bool // the last pause ended with an announcement
}

// watch starts listening for k's releases announced to the waiter of ticket tk.
func (p *pauser) watch(ctx context.Context, k keys, tk *ticket) {
	p.w = p.c.notify.watch(ctx, k.channel)
	p.w.forWaiter(tk.id)
}

// reset forgets the announcements heard before the next attempt.
func (p *pauser) reset() {
	if p.w != nil {
		p.w.reset()
	}
}

// stop ends the watch and the timer.
func (p *pauser) stop() {
	if p.w != nil {
		p.w.close()
	}
	if p.timer != nil {
		p.timer.Stop()
	}
}

// pause waits before the attempt that follows one that failed with err. It
// returns ctx's error or ErrClosed when the wait must end instead.
func (p *pauser) pause(ctx context.Context, err error) error { return p.pauseOr(ctx, err, nil) }

// pauseOr is pause that also ends when handed is closed (nil: never, as a
// nil channel is never ready).
func (p *pauser) pauseOr(ctx context.Context, err error, handed <-chan struct{}) error {
	d := p.c.delayAfter(err)
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	var wake <-chan struct{}
	if p.w != nil {
		wake = p.w.C
	}
	p.woke = false
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.c.closed:
		return ErrClosed
	case <-wake:
		p.woke = true
	case <-handed:
	case <-p.timer.C:
	}
	return nil
}

// delayAfter is the wait before the next attempt after a failed one, when no
// release notification comes first.
func (c *Client) delayAfter(err error) time.Duration {
	var oe *opError
	if errors.As(err, &oe) && oe.split {
		// Contenders split the nodes and nobody won: no release will be
		// announced, so retry after a short random delay instead, spread
		// over the attempt's length (a silent node makes a split last a
		// whole node timeout; retrying inside it collides again).
		return c.splitDelay(oe.took)
	}
	return c.retryDelay()
}

// waitError reports a wait that ended with ctx: ctx's error, wrapping the
// last attempt's cause.
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

// retryDelay is a random delay in [retryMin, retryMax].
func (c *Client) retryDelay() time.Duration {
	span := c.cfg.retryMax - c.cfg.retryMin
	if span <= 0 {
		return c.cfg.retryMin
	}
	return c.cfg.retryMin + time.Duration(mrand.Int64N(int64(span)+1))
}

// splitDelay is the short random delay after a split vote: long enough
// (several round trips, or the length of the failed attempt) for one
// contender to go first.
func (c *Client) splitDelay(took time.Duration) time.Duration {
	span := max(min(c.cfg.retryMin, 5*time.Millisecond), 2*took)
	return time.Duration(mrand.Int64N(int64(span) + 1))
}

func (c *Client) acquired(resource string, begin time.Time, attempts int, err error) {
	d := time.Since(begin)
	if err != nil {
		c.cfg.logger.Debug("redlock acquire failed", "resource", resource, "attempts", attempts, "wait", d, "err", err)
	}
	c.observe(Event{Kind: EventAcquire, Resource: resource, Duration: d, Attempts: attempts, Err: err})
}

// trySlots makes one round per slot of a limited resource, from a random
// slot on (from slot 0 for a queued waiter, tk not nil: slot_wait.lua),
// until one is won; or, with only >= 0, one round for that slot. When all
// are refused it returns an error that matches the causes of every slot's
// failure (ErrLocked when all are held).
func (c *Client) trySlots(ctx context.Context, resource string, ttl time.Duration, lc *lockConfig, only int, tk *ticket) (*Lock, error) {
	n, start, tries := int(lc.limit), only, 1
	switch {
	case only >= 0:
	case tk != nil:
		start, tries = 0, n
	default:
		start, tries = mrand.IntN(n), n // spreads uncontended callers over the slots
	}
	all := &opError{summary: fmt.Sprintf("none of the %d slots could be taken", tries)}
	for i := range tries {
		slot := (start + i) % n
		lc.slot = uint16(slot)
		l, err := c.attempt(ctx, c.slotKeys(resource, slot), ttl, lc, tk)
		if err == nil {
			if c.cfg.localQueue {
				// Its release may hand the slot to this client's next
				// caller (docs/design/HANDOVER.md).
				l.adoptTurn(&turn{gs: &c.gates, key: gateKey(c.keysFor(resource), lc.limit), slots: true})
			}
			return l, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return nil, err
		}
		all.add(err)
	}
	return nil, all
}

// add merges a slot's failure into e: its causes, its node errors (the
// last slot's), and whether it was a split.
func (e *opError) add(err error) {
	var oe *opError
	if !errors.As(err, &oe) {
		e.kinds = appendNew(e.kinds, ErrQuorum)
		return
	}
	for _, k := range oe.kinds {
		e.kinds = appendNew(e.kinds, k)
	}
	e.nodes = oe.nodes
	e.split = e.split || oe.split
	e.took = max(e.took, oe.took)
}

func appendNew(errs []error, e error) []error {
	for _, x := range errs {
		if x == e {
			return errs
		}
	}
	return append(errs, e)
}

// slotKeys are the keys of slot i of resource: the slot's lock key (the
// resource's own for slot 0, beside it under the same hash tag otherwise),
// the resource's fencing counter and release channel, shared by the slots.
func (c *Client) slotKeys(resource string, i int) keys {
	k := c.keysFor(resource)
	k.key = slotKey(k.key, i)
	return k
}

func slotKey(lockKey string, i int) string {
	if i == 0 {
		return lockKey
	}
	return lockKey + slotSuffix + strconv.Itoa(i)
}

// attempt is one Redlock round: SET NX PX (or the fencing script) on every
// node at once, decided at quorum; with a ticket, turnScript, which also
// keeps the caller's place in the nodes' waiter queue. A failed round is
// undone on every node that may hold the token, stragglers included.
func (c *Client) attempt(ctx context.Context, k keys, ttl time.Duration, lc *lockConfig, tk *ticket) (*Lock, error) {
	token := newToken(lc.suffix)
	s, args, classify := c.roundArgs(k, token, ttl, lc, tk)
	start := time.Now()
	deadline := start.Add(c.cfg.nodeTimeout)
	r := c.broadcastLook("acquire", k.resource, c.allNodes(), c.q, deadline, false, args, s, lookOf(lc.rec))
	defer r.free()
	err := r.collect(ctx, deadline, classify)
	if err == nil && r.t.success() {
		until := start.Add(ttl - driftAllowance(ttl, c.cfg.driftFactor))
		var fence int64
		if time.Now().Before(until) {
			if lc.fencing {
				fence, err = c.settleFence(ctx, r, fencesOf(tk != nil && lc.limit <= 1), k, until, stepOf(lc))
			}
			if err == nil {
				c.leaveAnyQueue(k, tk, lc, r.notGranted())
				l := c.newLock(k, token, fence, ttl, start, until, lc)
				l.unsent, l.found, l.chainStart = r.unsent, r.rec, time.Now()
				return l, nil
			}
		} else {
			err = r.err([]error{ErrQuorum}, fmt.Sprintf("quorum reached after %v, past the validity of ttl %v", time.Since(start).Round(time.Microsecond), ttl))
		}
	}
	c.undo(k, token, r.unsent, int(lc.limit))
	if err != nil {
		return nil, err
	}
	e := r.err(r.t.causes(), fmt.Sprintf("%d of %d nodes set (quorum %d), %d held by another, %d failed",
		r.t.ok, r.t.total, c.q, r.t.refused, r.t.failed))
	// A split: some nodes ours, some another's, and nobody can hold a
	// majority. A holder with a majority is not a split (refused >= q).
	e.split = r.t.ok > 0 && r.t.refused > 0 && r.t.refused < c.q
	e.took = time.Since(start)
	return nil, e
}

// slotQueueKeys are the keys of slot_queue.lua for a resource of limit
// slots, k being one slot's keys: the resource's lock key, its waiter queue
// (the same keys as a plain lock's queue), the fencing counter, then every
// slot key.
func (k keys) slotQueueKeys(limit int) []string {
	base := k.baseKey()
	names := make([]string, 4, 4+limit)
	names[0], names[1], names[2], names[3] = base, base+":q", base+":qx", k.fenceKey
	for i := range limit {
		names = append(names, slotKey(base, i))
	}
	return names
}

// baseKey is the resource's own lock key, slot 0's: the fencing
// counter's key without its suffix.
func (k keys) baseKey() string { return strings.TrimSuffix(k.fenceKey, fenceSuffix) }

// undo releases a failed attempt's token on every node its SET was queued
// for (not those in unsent). Even a node that answered that another holder
// has the key gets it: a client that retries commands may have set our key
// and then seen its own retry refused, and compare-and-delete is harmless
// where the key is not ours. Nodes run calls in order, so the undo reaches
// a straggler after its SET.
func (c *Client) undo(k keys, token string, unsent uint64, limit int) {
	if limit > 1 {
		mask := c.allNodes() &^ unsent
		if mask != 0 && !c.isClosed() {
			s, args := c.slotRelease(k, token, "", slotIndex(k), limit, nil) // unannounced: an undo wakes nobody
			c.broadcast("release", k.resource, mask, bits.OnesCount64(mask), time.Now().Add(c.cfg.nodeTimeout), true, args, s).free()
		}
		return
	}
	c.unlock(k, token, c.allNodes()&^unsent)
}

// slotRelease builds the release of slot key k (slot of limit) for token:
// deleted, or reserved for the resource's waiter queue when it is not
// empty, and then announced on channel (none when empty).
func (c *Client) slotRelease(k keys, token, channel string, slot, limit int, rec *completionRecord) (*script, []any) {
	return slotReleaseScript, recordedArgs(slotReleaseScript, k.slotQueueKeys(limit), rec, token, strconv.Itoa(slot), limit,
		c.queueLease().Milliseconds(), channel)
}

// slotIndex is the number of the slot whose keys are k.
func slotIndex(k keys) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(k.key, k.baseKey()+slotSuffix))
	return i
}

// unlock sends the compare-and-delete script, without announcement, to the
// nodes in mask and does not wait for the answers.
func (c *Client) unlock(k keys, token string, mask uint64) {
	if mask == 0 || c.isClosed() {
		return
	}
	args := releaseScript.args(k.lockKeys(), token, "")
	// Nobody waits for an undo: it leaves the busy count at once.
	c.broadcast("release", k.resource, mask, bits.OnesCount64(mask), time.Now().Add(c.cfg.nodeTimeout), true, args, releaseScript).free()
}

// leaveAnyQueue is leaveQueue, or leaveSlotQueue for a slot of a limited
// resource (lc).
func (c *Client) leaveAnyQueue(k keys, tk *ticket, lc *lockConfig, mask uint64) {
	if lc.limit > 1 {
		c.leaveSlotQueue(k, tk, int(lc.limit), mask)
		return
	}
	c.leaveQueue(k, tk, mask)
}

// leaveSlotQueue takes waiter tk out of the queue of slots on the nodes in
// mask, without waiting for the answers.
func (c *Client) leaveSlotQueue(k keys, tk *ticket, limit int, mask uint64) {
	if mask == 0 || tk == nil || c.isClosed() {
		return
	}
	args := slotLeaveScript.args(k.slotQueueKeys(limit), tk.id, limit, k.channel)
	c.broadcast("dequeue", k.resource, mask, 1, time.Now().Add(c.cfg.nodeTimeout), true, args, slotLeaveScript).free()
}
