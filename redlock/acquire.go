package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

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
	lc.suffix = c.holderSuffix(ctx)
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

// minTTL is the smallest TTL that can leave a positive validity after an
// attempt that used its whole node timeout.
func (c *Client) minTTL() time.Duration {
	return time.Duration(float64(c.cfg.nodeTimeout+driftFloor) / (1 - c.cfg.driftFactor))
}

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
		p.w = c.notify.watch(ctx, k.channel)
		p.w.forWaiter(tk.id) // deaf to reservations for other waiters
		queued = tk
	}
	for attempts := 1; ; attempts++ {
		if p.w != nil {
			p.w.reset() // forget the announcements heard before this round
		}
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
			p.w = c.notify.watch(ctx, k.channel)
			p.w.forWaiter(tk.id)
			continue
		}
		switch err := p.pause(ctx, err, nil); {
		case errors.Is(err, ErrClosed):
			t.leave()
			return nil, attempts, ErrClosed
		case err != nil:
			c.giveUp(k, queued, t)
			return nil, attempts, waitError(ctx, nil, last)
		}
	}
}

// giveUp ends a waiter's wait: it leaves the nodes' queue (if it queued:
// tk is nil when only plain rounds were sent) and passes its local turn on.
func (c *Client) giveUp(k keys, tk *ticket, t *turn) {
	if tk != nil {
		c.leaveQueue(k, tk, c.allNodes())
	}
	t.leave()
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
		if p.w != nil {
			p.w.reset()
		}
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

// leaveSlots ends a waiter's wait for a slot: it leaves the nodes' queue
// (if it queued) and passes its local turn t on.
func (c *Client) leaveSlots(resource string, tk *ticket, lc *lockConfig, t *turn) {
	if tk = c.slotTicket(tk); tk != nil {
		c.leaveSlotQueue(c.slotKeys(resource, 0), tk, int(lc.limit), c.allNodes())
	}
	t.leave()
}

// slotKeys are the keys of slot i of resource: the slot's lock key (the
// resource's own for slot 0, beside it under the same hash tag otherwise),
// the resource's fencing counter and release channel, shared by the slots.
func (c *Client) slotKeys(resource string, i int) keys {
	k := c.keysFor(resource)
	k.key = slotKey(k.key, i)
	return k
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

func (c *Client) acquired(resource string, begin time.Time, attempts int, err error) {
	d := time.Since(begin)
	if err != nil {
		c.cfg.logger.Debug("redlock acquire failed", "resource", resource, "attempts", attempts, "wait", d, "err", err)
	}
	c.observe(Event{Kind: EventAcquire, Resource: resource, Duration: d, Attempts: attempts, Err: err})
}
